"""The README's TRL snippet: one GRPOTrainer step through each route, SmolLM2 on tau2-mock-gen, on a CPU.

python examples/trl_grpo.py
python examples/trl_grpo.py --model PATH --out runs/trl   # another model (a local folder), e.g. `envace-gym tiny-model`
"""

import argparse
import time

from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from envace_gym.agents.hf import smollm2_path
from envace_gym.integrations.trl import (
    EpisodeRollout,
    environment_factory,
    episode_reward,
    final_reply,
    make_dataset,
    prepare_tokenizer,
)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a local model folder (default: SmolLM2-135M-Instruct)")
parser.add_argument("--out", default="runs/trl")
cli = parser.parse_args()
env_id, path = "EnvACE/tau2-mock-gen-v0", cli.model or smollm2_path()
tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(path))  # tool-call parsing for envace-gym's template
dataset = make_dataset(env_id, limit=64, split="train")
args = GRPOConfig(
    output_dir=cli.out,
    per_device_train_batch_size=2,
    num_generations=2,
    max_completion_length=64,
    max_steps=1,
    beta=0.0,
    use_cpu=True,
    bf16=False,
    report_to=[],
)  # bf16=False on a CPU

start = time.perf_counter()
GRPOTrainer(
    model=AutoModelForCausalLM.from_pretrained(path),
    processing_class=tokenizer,
    args=args,
    train_dataset=dataset,
    environment_factory=environment_factory(env_id, split="train"),
    reward_funcs=[final_reply],
).train()
print(f"environment_factory: one step in {time.perf_counter() - start:.0f} s")
start = time.perf_counter()
GRPOTrainer(
    model=AutoModelForCausalLM.from_pretrained(path),
    processing_class=tokenizer,
    args=args,
    train_dataset=dataset,
    reward_funcs=episode_reward,
    rollout_func=EpisodeRollout(env_id, max_new_tokens=48, split="train", dynamics="rehearsed", max_turns=6),
).train()
print(f"rollout_func: one step in {time.perf_counter() - start:.0f} s")
