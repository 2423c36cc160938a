"""Run by ``accelerate launch`` with ``fsdp``: an update on a saved global batch, a checkpoint,
the update a run resumed from that checkpoint makes next, then a whole two-step run in OUT
(hf generation, evaluation, checkpoints).

    sharded_run.py CONFIG.json ROLLOUTS.pkl RESULT.pt OUT   (the main process writes RESULT.pt)
"""

import json
import pickle
import sys
from dataclasses import replace

import torch

from envace_gym.training import TrainConfig, Trainer

config = TrainConfig(**json.loads(open(sys.argv[1]).read()))
with open(sys.argv[2], "rb") as f:
    rollouts = pickle.load(f)
trainer = Trainer(config)
trainer.update(rollouts)
trainer.step = 1
trainer.save()
first = trainer._full_weights()
resumed = Trainer(config)
resumed.resume()
resumed.update(rollouts)
second = resumed._full_weights()
if resumed.accelerator.is_main_process:
    torch.save({"world": resumed.world, "sharded": [trainer.sharded, resumed.sharded], "first": first,
                "second": second}, sys.argv[3])
Trainer(replace(config, out=sys.argv[4], steps=2, eval_every=2, eval_tasks=1)).train()
