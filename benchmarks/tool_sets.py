"""Building the tool sets of a BFCL multi-turn category: each tool set compiling its own schemas
(the cache emptied before each, as before the shared cache) against the schema cache shared by
every tool set, side by side in one process. Every entry's tool set at every turn where its tools
change is built by the suite's own ``tools``, as resets and the held-out functions' turns build
them, with the suite's tool-set cache emptied before each, so each side builds every set.

    python benchmarks/tool_sets.py [--category multi_turn_miss_func] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

from envace_gym.core import tools
from envace_gym.suites.bfcl import get_suite


def build(suite, turns: list, shared: bool) -> float:
    """Seconds to build the tool set of every (task, turn) in ``turns``."""
    tools._compiled.cache_clear()
    start = time.perf_counter()
    for task, turn in turns:
        suite._toolsets.clear()
        if not shared:
            tools._compiled.cache_clear()
        suite.tools(task, turn)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--category", default="multi_turn_miss_func")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    suite = get_suite(args.category)
    tasks = [suite.task(task_id) for task_id in suite.task_ids()]
    turns = [(task, turn) for task in tasks for turn in [0, *sorted(task.data.added)]]
    n_tools = sum(len(suite.tools(task, turn).functions) for task, turn in turns)
    print(f"{args.category}: {len(turns)} tool sets, {n_tools} tools")
    rows = {"per tool set (before)": [], "shared cache": []}
    for _ in range(args.repeats):
        rows["per tool set (before)"].append(build(suite, turns, shared=False))
        rows["shared cache"].append(build(suite, turns, shared=True))
    base = min(rows["per tool set (before)"])
    for name, times in rows.items():
        best = min(times)
        print(f"{name:>22}: {best:7.2f} s ({1000 * best / len(turns):6.1f} ms per tool set), {base / best:5.1f}x")


if __name__ == "__main__":
    main()
