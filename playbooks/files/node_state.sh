# Read what validation needs from a Proxmox node, in one round trip, changing nothing.
# Called as: bash -c "$(cat node_state.sh)" node_state PCT TEMPLATE_DIR
# Each section starts with "## <title>"; the containers' configs are read in parallel.
pct="$1"
templates="$2"
echo "## nproc"; nproc
echo "## meminfo"; grep '^MemTotal:' /proc/meminfo
echo "## gpus"; ls /dev | grep -E '^nvidia[0-9]+$' || true
echo "## addresses"; ip -o -4 addr show 2>/dev/null || true
echo "## templates"; ls -1 "$templates" 2>/dev/null || true
list="$("$pct" list)" || { echo "pct list failed" >&2; exit 3; }
echo "## pct list"; printf '%s\n' "$list"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for id in $(printf '%s\n' "$list" | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {print $1}'); do
  "$pct" config "$id" > "$tmp/$id" 2>/dev/null &
done
wait
for file in "$tmp"/*; do
  [ -e "$file" ] || continue
  echo "## config ${file##*/}"; cat "$file"
done
