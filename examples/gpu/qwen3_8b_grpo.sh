#!/usr/bin/env bash
# NEEDS GPUS (one 8-GPU node): not run by the tests; tests/project/test_examples.py only checks its command lines.
# Role-wise GRPO of Qwen3-8B on tau2 retail with the EnvACE paper's settings: lr 1e-6,
# 16 prompts x 4 episodes a step, temperature 1.0, clip 0.2, no KL, both roles trained
# (act and rehearse), rehearsed dynamics for training and the real env for evaluation.
#
# One 8-GPU node: a vLLM server generates on GPUs 6-7 (tensor parallel 2), six trainer
# processes shard the model over GPUs 0-5 (examples/gpu/accelerate_fsdp.yaml). After every
# update the main process gathers the full weights and the server reloads them from
# $OUT/engine-weights (same file system), so the server must run with VLLM_SERVER_DEV_MODE=1.
# Memory per GPU count: README, "Training at scale". Not run by envace-gym's authors on GPUs.
#
#   MODEL=Qwen/Qwen3-8B OUT=runs/qwen3-8b bash examples/gpu/qwen3_8b_grpo.sh
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen3-8B}
OUT=${OUT:-runs/qwen3-8b-grpo}
PORT=${PORT:-8000}
HERE="$(cd "$(dirname "$0")" && pwd)"

CUDA_VISIBLE_DEVICES=6,7 VLLM_SERVER_DEV_MODE=1 vllm serve "$MODEL" --port "$PORT" \
  --tensor-parallel-size 2 --dtype bfloat16 --max-model-len 16384 --gpu-memory-utilization 0.9 \
  --logprobs-mode processed_logprobs --seed 0 > "$OUT.vllm.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
  kill -0 $SERVER || { echo "vllm serve exited; see $OUT.vllm.log" >&2; exit 1; }
  sleep 5
done

accelerate launch --config_file "$HERE/accelerate_fsdp.yaml" -m envace_gym.cli train \
  --model "vllm:$MODEL@http://127.0.0.1:$PORT/v1" --env EnvACE/tau2-retail-v0 --out "$OUT" \
  --dynamics rehearsed --eval-dynamics real --roles act,rehearse \
  --lr 1e-6 --tasks-per-step 16 --group-size 4 --temperature 1.0 --clip-eps 0.2 --kl-coef 0 \
  --max-new-tokens 1024 --max-turns 30 --steps 200 --eval-every 10 --save-every 10 \
  --fsdp --bf16 --gradient-checkpointing --minibatch-tokens 8192 "$@"
