#!/usr/bin/env bash
# The GPU check for a lent device (bench/README.md, "GPU check"): the machine first (GPUs, vLLM's CUDA
# build, the embedded model), then `python -m bench.gpu_check` (the default slice with engine=gpu at
# TP=1 and TP=GPU count; JSON on stdout). Exits non-zero on any failure. Extra arguments go to
# bench.gpu_check (--model DIR, --gpus N, --out FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
nvidia-smi -L >&2 || { echo "gpu_check: nvidia-smi sees no GPU" >&2; exit 1; }
[ -x "$PY" ] || make setup ENGINE=gpu >&2
"$PY" -c 'import sys; from handoff.engine.vllm_engine import build_problem; m = build_problem("gpu"); print(m or "", file=sys.stderr); sys.exit(1 if m else 0)' \
  || { echo "gpu_check: run 'make setup ENGINE=gpu' first" >&2; exit 1; }
"$PY" -m handoff.engine.models smollm2 >&2
exec timeout 600 "$PY" -m bench.gpu_check "$@"
