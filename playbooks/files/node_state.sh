# shellcheck shell=bash
# Read what validation needs from a Proxmox node, in one round trip, changing nothing.
# Called as: bash -c "$(cat node_state.sh)" node_state PCT TEMPLATE_DIR CONFIG_DIR \
#   PYTHON FIT_PROGRAM READER_TEXT [MODEL_FOLDER...]
# Each section starts with "## <title>". The containers' configs are read from CONFIG_DIR
# (/etc/pve/lxc, what `pct config` prints); where that folder cannot be read, `pct list` names
# the containers and `pct config` prints their configs.
pct="$1"
templates="$2"
configs="$3"
python="${4:-}"
fit="${5:-}"
reader="${6:-}"
if [ "$#" -ge 6 ]; then shift 6; else set --; fi
echo "## nproc"; nproc
echo "## meminfo"; grep '^MemTotal:' /proc/meminfo
echo "## gpus"; for dev in /dev/nvidia[0-9]*; do [ -e "$dev" ] && echo "${dev#/dev/}"; done
echo "## addresses"; ip -o -4 addr show 2>/dev/null || true
echo "## templates"; ls -1 "$templates" 2>/dev/null || true
# The GPUs (NVML: memory, compute capability, each pair's P2P status and common ancestor), the
# PCIe fabric above them (IOMMU, the bridges' ACS) and the weight bytes of the model folders the
# containers will serve, for the fit, SM120 and fabric checks: one JSON line from node_fit.py, or
# the error that stopped it.
if [ -n "$fit" ]; then
  echo "## fit"; "$python" -c "$fit" "$reader" "$@" 2>&1 | tail -n 5
fi
# The containers of this node: the config files in CONFIG_DIR (on Proxmox /etc/pve/lxc holds
# exactly what `pct list` shows, and reading them costs no pct start-up); `pct list` where the
# folder cannot be read.
if [ -d "$configs" ] && [ -r "$configs" ] && [ -x "$configs" ]; then
  for conf in "$configs"/*.conf; do
    [ -f "$conf" ] || continue
    id="${conf##*/}"; id="${id%.conf}"
    case "$id" in *[!0-9]*|'') continue ;; esac
    echo "## config $id"
    sed '/^\[/,$d' "$conf"
  done
  exit 0
fi
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
