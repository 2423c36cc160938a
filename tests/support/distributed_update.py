"""Run by ``accelerate launch``: one ``Trainer.update`` on a saved global batch of rollouts.

distributed_update.py CONFIG.json ROLLOUTS.pkl OUT_DIR   (each process saves OUT_DIR/rank<i>.pt)
"""

import json
import pickle
import sys

import torch

from envace_gym.training import TrainConfig, Trainer

config = TrainConfig(**json.loads(open(sys.argv[1]).read()))
with open(sys.argv[2], "rb") as f:
    rollouts = pickle.load(f)
trainer = Trainer(config)
trainer.update(rollouts)
weights = {k: v.detach().cpu() for k, v in trainer.model.state_dict().items()}
torch.save({"world": trainer.world, "weights": weights}, f"{sys.argv[3]}/rank{trainer.rank}.pt")
