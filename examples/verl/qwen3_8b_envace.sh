#!/usr/bin/env bash
# NEEDS GPUS (one 8-GPU node): not run by the tests, and untested on GPUs until it has run on one.
# The EnvACE paper's recipe in verl 0.9.1 (.venv-verl): Qwen3-8B, lr 1e-6, 16 prompts x 4 episodes,
# temperature 1.0, clip 0.2, no KL; both roles trained with role-wise baselines (envace_rolewise);
# rehearsed dynamics for training, the real env for validation. verl's RayPPOTrainer (use_v1=false): the
# v1 trainer passes the advantage step none of the loop's per-sample fields (the roles).
set -euo pipefail
HERE=$(dirname "$0")
ENV_ID=${ENV_ID:-EnvACE/tau2-retail-v0}
DATA=${DATA:-data/envace}
MODEL=${MODEL:-Qwen/Qwen3-8B}
GPUS=${GPUS:-8}
PROMPT_LENGTH=${PROMPT_LENGTH:-8192}
RESPONSE_LENGTH=${RESPONSE_LENGTH:-16384}
LIMIT=${LIMIT:+--limit $LIMIT}  # LIMIT=N: only the first N tasks of each split
python "$HERE/make_dataset.py" "$ENV_ID" --split train --dynamics rehearsed $LIMIT --out "$DATA/train.parquet"
python "$HERE/make_dataset.py" "$ENV_ID" --split test --dynamics real $LIMIT --out "$DATA/test.parquet"
python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=envace_rolewise \
    algorithm.use_kl_in_reward=false \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=16 \
    data.max_prompt_length="$PROMPT_LENGTH" \
    data.max_response_length="$RESPONSE_LENGTH" \
    data.return_raw_chat=true \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.clip_ratio=0.2 \
    actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.agent.default_agent_loop=envace \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loops.yaml" \
    +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=envace_gym.integrations.verl.install \
    trainer.use_v1=false \
    trainer.n_gpus_per_node="$GPUS" \
    trainer.nnodes=1 \
    "$@"
