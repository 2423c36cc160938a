"""Building the tool sets of a BFCL multi-turn category: each tool set compiling its own schemas
(the cache emptied before each, as before the shared cache) against the schema cache shared by
every tool set, side by side in one process. Every entry's tool set at every turn is built, as
the env's resets and the held-out functions' turns build them; the suite's own tool-set cache is
bypassed, so each side compiles the same list of tool sets.

    python benchmarks/tool_sets.py [--category multi_turn_miss_func] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

from envace_gym.core import tools
from envace_gym.suites.bfcl import get_suite
from envace_gym.suites.bfcl.schemas import openai_schema


def tool_set_specs(category: str) -> list[tuple[list[dict], list[dict]]]:
    """(shown, held-out) schemas of every entry at every turn where its tools change."""
    suite = get_suite(category)
    specs = []
    for task_id in suite.task_ids():
        entry = suite.task(task_id).data
        for turn in [0, *sorted(entry.added)]:
            shown = entry.docs + [d for t, ds in sorted(entry.added.items()) if t <= turn for d in ds]
            held = [d for t, ds in sorted(entry.added.items()) if t > turn for d in ds]
            specs.append(([openai_schema(d) for d in shown], [openai_schema(d) for d in held]))
    return specs


def build(specs, shared: bool) -> float:
    tools._compiled.cache_clear()
    start = time.perf_counter()
    for shown, held in specs:
        if not shared:
            tools._compiled.cache_clear()
        tools.ToolSet(shown, hidden=held, closed=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--category", default="multi_turn_miss_func")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    specs = tool_set_specs(args.category)
    n_tools = sum(len(s) + len(h) for s, h in specs)
    print(f"{args.category}: {len(specs)} tool sets, {n_tools} tools")
    rows = {"per tool set (before)": [], "shared cache": []}
    for _ in range(args.repeats):
        rows["per tool set (before)"].append(build(specs, shared=False))
        rows["shared cache"].append(build(specs, shared=True))
    base = min(rows["per tool set (before)"])
    for name, times in rows.items():
        best = min(times)
        print(f"{name:>22}: {best:7.2f} s ({1000 * best / len(specs):6.1f} ms per tool set), {base / best:5.1f}x")


if __name__ == "__main__":
    main()
