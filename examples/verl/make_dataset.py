"""Write an envace env's tasks as a verl dataset (parquet): one row per task, played by the envace loop.

    .venv-verl/bin/python examples/verl/make_dataset.py EnvACE/tau2-retail-v0 --split train \
        --dynamics rehearsed --out data/retail-train.parquet
"""

import argparse
from pathlib import Path

import pandas as pd

from envace_gym.integrations.verl import dataset_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id")
    parser.add_argument("--split", default=None)
    parser.add_argument("--dynamics", default="real", help="the episodes' dynamics (rehearsed: the policy's own world)")
    parser.add_argument("--max-turns", type=int, default=30)
    parser.add_argument("--reward", default=None, help="the reward: a name or judge:MODEL@BASE_URL")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    reward = {"reward": args.reward} if args.reward else {}
    rows = dataset_rows(args.env_id, args.split, args.limit, dynamics=args.dynamics, max_turns=args.max_turns, **reward)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(args.out)
    print(f"{len(rows)} episodes of {args.env_id} ({args.dynamics}) in {args.out}")


if __name__ == "__main__":
    main()
