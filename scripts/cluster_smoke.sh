#!/usr/bin/env bash
# The README's "Running on a cluster" recipe, run as written on one machine: token
# authentication, a head, a second node, then sources / build / detect / evaluate with
# --executor ray --ray-address auto; then the refusals the README promises (exit 2, one
# line naming the node or address, nothing written): a wrong token, a node that cannot
# see the data path (a mount namespace hiding it; needs root), a node without aegisbench.
#
#   scripts/cluster_smoke.sh DATA WEIGHTS
#
# DATA: the "shared storage" checkout folder: DATA/params.yaml with the README's relative
# paths (data/sources, aegisbench).
# WEIGHTS: a detector checkpoint (yolo). PYTHON: the interpreter with aegisbench and Ray
# (default python3). Every node gets one CPU and a 100 MB object store. Differences from
# the README, because this machine is shared: HOME points at a scratch folder (so the
# generated token is this run's ~/.ray/auth_token), RAY_ADDRESS pins what "auto" means
# (other Rays may run here), and `ray stop` (which stops every Ray of the machine) is
# replaced by stopping the processes of this run's temp dirs, by pid; the head port is a free one
# (6379 may be taken) and every node is small (one CPU). Exit 0: all passed.
set -euo pipefail
DATA=$(cd "$1" && pwd)
WEIGHTS=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
PYTHON=${PYTHON:-python3}
aegisbench() { "$PYTHON" -m aegisbench.cli "$@"; }
ray() { "$PYTHON" -m ray.scripts.scripts "$@"; }
say() { echo "cluster_smoke: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

TMP=$(mktemp -d /tmp/rsXXXXXX)   # short: Ray's socket paths have a length limit
stop_dir() {  # every process of a node started with --temp-dir under $1, by pid
  local pids pid
  pids=$(grep -lsF -- "$1" /proc/[0-9]*/cmdline | cut -d/ -f3 | grep -vx "$$" || true)
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 2
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
}
cleanup() { stop_dir "$TMP"; rm -rf "$TMP"; }
trap cleanup EXIT
say "temp dir $TMP"

export HOME=$TMP/home RAY_AUTH_MODE=token
SMALL=(--num-cpus=1 --object-store-memory=100000000 --disable-usage-stats)
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
HEAD_IP=$("$PYTHON" -c 'from ray._private.services import get_node_ip_address; print(get_node_ip_address())')

# --- the README, as written
ray get-auth-token --generate >/dev/null
ray start --head --port="$PORT" --temp-dir="$TMP/head" --include-dashboard=false "${SMALL[@]}" >/dev/null
ray start --address="$HEAD_IP:$PORT" --temp-dir="$TMP/node2" "${SMALL[@]}" >/dev/null
export RAY_ADDRESS=$HEAD_IP:$PORT
cd "$DATA"
aegisbench sources
aegisbench build --executor ray --ray-address auto
aegisbench verify aegisbench
aegisbench detect --detector yolo --weights "$WEIGHTS" --track sar \
    --team "My lab" --out submissions/my_yolo --device auto --executor ray --ray-address auto --no-progress
aegisbench evaluate submissions/my_yolo --executor ray --ray-address auto --n-resamples 20
say "recipe OK on $HEAD_IP:$PORT"

# --- refusals: exit 2, one line naming the node or the address, nothing written
refused() {  # refused WHAT PATTERN CMD...: CMD exits 2 with one stderr line matching PATTERN, writes no $DATA/refused
  local what=$1 pattern=$2 rc=0
  shift 2
  "$@" --out "$DATA/refused" >"$TMP/out" 2>"$TMP/err" || rc=$?
  local lines
  lines=$(grep -cv '^WARNING\|^INFO\|^\s*$' "$TMP/err" || true)
  [[ $rc == 2 ]] || fail "$what: exit $rc, expected 2: $(tail -3 "$TMP/err")"
  [[ $lines == 1 ]] || fail "$what: $lines error lines, expected 1: $(cat "$TMP/err")"
  grep -q -- "$pattern" "$TMP/err" || fail "$what: the error does not name $pattern: $(cat "$TMP/err")"
  [[ ! -e $DATA/refused ]] || fail "$what: wrote $DATA/refused"
  say "refused ($what): $(grep -v '^WARNING\|^INFO' "$TMP/err")"
}
node_gone() {  # wait until the cluster no longer counts the node of temp dir $1 alive
  stop_dir "$1"
  "$PYTHON" - "$1" <<'EOF'
import sys, time, ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
for _ in range(120):
    if sum(n["Alive"] for n in ray.nodes()) == 2:
        sys.exit(0)
    time.sleep(0.5)
sys.exit("a stopped node is still alive")
EOF
}
third_node() {  # third_node TEMPDIR [PREFIX...]: a third node started with PREFIX before `ray start`
  local dir=$1
  shift
  "$@" "$PYTHON" -m ray.scripts.scripts start --address="$HEAD_IP:$PORT" --temp-dir="$dir" "${SMALL[@]}" >/dev/null
}

RAY_AUTH_TOKEN=not-the-token refused "wrong token" "$HEAD_IP:$PORT" \
    aegisbench build --executor ray --ray-address auto

if unshare -m true 2>/dev/null; then  # a node whose mount of the shared storage is missing
  (cd /tmp && unshare -m --propagation private sh -c \
      'mount -t tmpfs tmpfs "$0" && exec "$@"' "$DATA" \
      "$PYTHON" -m ray.scripts.scripts start --address="$HEAD_IP:$PORT" --temp-dir="$TMP/blind" "${SMALL[@]}" >/dev/null)
  refused "data path not visible" "cannot see $DATA" aegisbench build --executor ray --ray-address auto
  node_gone "$TMP/blind"
else
  say "skipped the hidden-data-path node: unshare -m is not permitted here"
fi

# a node whose Python environment has Ray but not aegisbench: a venv on the same base
# interpreter that reads the Ray install's site-packages without its .pth files
BASE=$("$PYTHON" -c 'import sys; print(sys._base_executable)')
SITE=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$BASE" -m venv --without-pip "$TMP/bare"
echo "$SITE" >"$("$TMP/bare/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ray.pth"
(cd /tmp && env -u PYTHONPATH PYTHON="$TMP/bare/bin/python" bash -c \
    '"$PYTHON" -c "import ray, importlib.util as u; assert u.find_spec(\"aegisbench\") is None" && "$PYTHON" -m ray.scripts.scripts start "$@" >/dev/null' \
    _ --address="$HEAD_IP:$PORT" --temp-dir="$TMP/bare_node" "${SMALL[@]}")
refused "node without aegisbench" "aegisbench not installed" aegisbench build --executor ray --ray-address auto
node_gone "$TMP/bare_node"
say "OK"
