#!/usr/bin/env bash
# Accelerator throughput in one short run (under 5 minutes on a lent GPU): detect images/s at
# batch 1/8/32 with --half, and the torch fire-spread model's cell-updates/s (perf/gpu.py).
#
#   perf/gpu.sh                       # CUDA (exit 2 with one line if no GPU is visible)
#   DEVICE=cpu perf/gpu.sh            # check the script on CPU with tiny sizes (~2-4 min on 2 cores)
#   OUT=results/gpu.json perf/gpu.sh  # where the JSON goes (a .md table is written beside it)
#
# PYTHON defaults to .venv/bin/python of the repository; a run of at most TIMEOUT seconds (300).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-$ROOT/perf/gpu-result.json}"
TIMEOUT="${TIMEOUT:-300}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
[ -x "$PYTHON" ] || { echo "perf/gpu.sh: no python at $PYTHON (set PYTHON=...)" >&2; exit 2; }
if [ "$DEVICE" = cpu ]; then
  args=(--device cpu --images 4 --batches 1,8,32 --repeat 1 --grid 32 --realizations 4 --horizon 8)
else
  args=(--device "$DEVICE" --half --images 64 --batches 1,8,32 --repeat 3 --grid 256 --realizations 64 --horizon 60)
fi
cd "$ROOT/perf"
exec timeout "$TIMEOUT" "$PYTHON" gpu.py "${args[@]}" --out "$OUT"
