"""Run by ``accelerate launch`` with ``fsdp``: an update on a saved global batch, a checkpoint,
the weights pushed to a served and an in-process engine (stand-ins that record them), the
update a run resumed from that checkpoint makes next, then a whole two-step run in OUT (hf
generation, evaluation, checkpoints).

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


class Engine:
    """Records the weights pushed to it; with ``weights_dir`` it stands for a served vLLM."""

    def load_weights(self, named_tensors):
        self.pushed = {name: tensor.cpu() for name, tensor in named_tensors}


served, in_process = Engine(), Engine()
served.weights_dir = "unused"
for engine in (served, in_process):
    trainer.engine = engine
    trainer._sync_engine()
trainer.engine = None
main = trainer.accelerator.is_main_process
assert hasattr(served, "pushed") == main  # a served engine gets the weights from the main process
assert {k: v.shape for k, v in in_process.pushed.items()} == {k: v.shape for k, v in trainer.model.state_dict().items()}
resumed = Trainer(config)
resumed.resume()
resumed.update(rollouts)
second = resumed._full_weights()
if resumed.accelerator.is_main_process:
    torch.save(
        {
            "world": resumed.world,
            "sharded": [trainer.sharded, resumed.sharded],
            "first": first,
            "second": second,
            "pushed": [served.pushed, in_process.pushed],
        },
        sys.argv[3],
    )
Trainer(replace(config, out=sys.argv[4], steps=2, eval_every=2, eval_tasks=1)).train()
