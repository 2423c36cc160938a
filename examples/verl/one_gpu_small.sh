#!/usr/bin/env bash
# NEEDS A GPU (one): not run by the tests, and untested on GPUs until it has run on one.
# The same recipe at small scale: Qwen3-0.6B on one GPU, tau2's mock office (its one shared database
# is what a small model learns), shorter sequences.
set -euo pipefail
ENV_ID=EnvACE/tau2-mock-office-v0 DATA=${DATA:-data/office} MODEL=Qwen/Qwen3-0.6B GPUS=1 \
    PROMPT_LENGTH=4096 RESPONSE_LENGTH=4096 bash "$(dirname "$0")/qwen3_8b_envace.sh" "$@"
