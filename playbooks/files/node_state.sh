# Read what validation needs from a Proxmox node, in one round trip, changing nothing.
# Called as: bash -c "$(cat node_state.sh)" node_state PCT TEMPLATE_DIR CONFIG_DIR
# Each section starts with "## <title>". `pct list` names the containers; their configs are
# read from CONFIG_DIR (/etc/pve/lxc, what `pct config` prints), through `pct config` where a
# file cannot be read.
pct="$1"
templates="$2"
configs="$3"
echo "## nproc"; nproc
echo "## meminfo"; grep '^MemTotal:' /proc/meminfo
echo "## gpus"; ls /dev | grep -E '^nvidia[0-9]+$' || true
echo "## addresses"; ip -o -4 addr show 2>/dev/null || true
echo "## templates"; ls -1 "$templates" 2>/dev/null || true
# A container created or destroyed meanwhile can make one `pct list` fail: try five times.
for try in 1 2 3 4 5; do
  list="$("$pct" list 2>"${TMPDIR:-/tmp}/node_state.$$")" && break
  [ "$try" = 5 ] && { echo "$pct list failed: $(tail -n 3 "${TMPDIR:-/tmp}/node_state.$$")" >&2;
                      rm -f "${TMPDIR:-/tmp}/node_state.$$"; exit 3; }
  sleep 1
done
rm -f "${TMPDIR:-/tmp}/node_state.$$"
echo "## pct list"; printf '%s\n' "$list"
for id in $(printf '%s\n' "$list" | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {print $1}'); do
  echo "## config $id"
  if [ -r "$configs/$id.conf" ]; then
    sed '/^\[/,$d' "$configs/$id.conf"
  else
    "$pct" config "$id" 2>/dev/null
  fi
done
