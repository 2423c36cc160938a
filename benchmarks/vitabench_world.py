"""VitaBench worlds through VitaBench's own path and through envace-gym, side by side.

VitaBench's path is what its runner does per task: clear its store and product tables,
build the environment from the task's database (``get_environment``), and answer each
call with ``Environment.get_response``. It has no fork; its nearest equivalent, timed
as its fork, is building the environment again and replaying the calls so far.
envace-gym's path is ``reset`` (a copy of the task's initial world, built at its first reset), ``step``
with one call (validation included) and ``fork`` of the episode. Both run the same calls:
searches, lookups, placing, paying and cancelling an order.

    VITABENCH_ROOT=/path/to/vitabench python benchmarks/vitabench_world.py [--tasks 100]
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import time
from datetime import datetime, timedelta

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym.core.messages import format_tool_call


def calls(domain: str, task) -> list[tuple[str, dict]]:
    """A fixed call mix on the task's own data; ``"$order"`` is the order the mix placed."""
    env = task.environment
    user = env["user_id"]
    later = (datetime.strptime(env["time"], "%Y-%m-%d %H:%M:%S") + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    if domain == "delivery":
        store = next(iter(env["stores"].values()))
        product = store["products"][0]
        return [
            ("delivery_store_search_recommand", {"keywords": [store["name"].split()[0]]}),
            ("delivery_product_search_recommand", {"keywords": [product["name"]]}),
            ("get_delivery_store_info", {"store_id": store["store_id"]}),
            ("get_delivery_product_info", {"product_id": product["product_id"]}),
            (
                "create_delivery_order",
                {
                    "user_id": user,
                    "store_id": store["store_id"],
                    "product_ids": [product["product_id"]],
                    "product_cnts": [1],
                    "address": env["location"][0]["address"],
                    "dispatch_time": later,
                },
            ),
            ("pay_delivery_order", {"order_id": "$order"}),
            ("cancel_delivery_order", {"order_id": "$order"}),
            ("get_delivery_order_detail", {"order_id": "$order"}),
        ]
    shop = next(iter(env["shops"].values()))
    product = shop["products"][0]
    return [
        ("instore_shop_search_recommend", {"keywords": [shop["shop_name"]]}),
        ("instore_product_search_recommend", {"keywords": [product["name"]]}),
        (
            "create_instore_product_order",
            {"user_id": user, "shop_id": shop["shop_id"], "product_id": product["product_id"], "quantity": 1},
        ),
        ("pay_instore_order", {"order_id": "$order"}),
        ("instore_cancel_order", {"order_id": "$order"}),
        ("instore_reservation", {"user_id": user, "shop_id": shop["shop_id"], "time": later, "customer_count": 2}),
        ("get_instore_orders", {"user_id": user}),
    ]


def with_order(arguments: dict, order: str | None) -> dict:
    return {k: ((order or "O_none") if v == "$order" else v) for k, v in arguments.items()}


def vitabench_path(domain: str, task, module, clear, order_of) -> dict:
    from vita.data_model.message import ToolCall

    t0 = time.perf_counter()
    clear()
    env = module.get_environment(task.environment, "english")
    t1 = time.perf_counter()
    order, per_call = None, []
    mix = calls(domain, task)
    for i, (name, arguments) in enumerate(mix):
        s = time.perf_counter()
        content = env.get_response(ToolCall(id=str(i), name=name, arguments=with_order(arguments, order))).content
        per_call.append(time.perf_counter() - s)
        order = order or order_of(content)
    s = time.perf_counter()  # "fork" after the whole mix: rebuild, then replay every call
    clear()
    copy = module.get_environment(task.environment, "english")
    order = None
    for i, (name, arguments) in enumerate(mix):
        order = order or order_of(
            copy.get_response(ToolCall(id=str(i), name=name, arguments=with_order(arguments, order))).content
        )
    return {"first": t1 - t0, "reset": t1 - t0, "call": per_call, "fork": time.perf_counter() - s}


def envace_path(domain: str, env, task, order_of) -> dict:
    t0 = time.perf_counter()
    env.reset(options={"task_id": task.id})  # the task's first: its initial world is built, then copied
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    env.reset(options={"task_id": task.id})
    t1 = time.perf_counter()
    order, per_call = None, []
    for name, arguments in calls(domain, task):
        s = time.perf_counter()
        env.step(format_tool_call(name, with_order(arguments, order)))
        per_call.append(time.perf_counter() - s)
        assert env.unwrapped.episode.calls[-1].source == "real", (name, env.unwrapped.episode.calls[-1].content)
        order = order or order_of(env.unwrapped.episode.calls[-1].native)
    s = time.perf_counter()
    env.unwrapped.fork()
    return {"first": first, "reset": t1 - t0, "call": per_call, "fork": time.perf_counter() - s}


def ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):7.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100, help="tasks per domain")
    args = parser.parse_args()
    envs = {d: gym.make(f"EnvACE/vitabench-{d}-v0", max_turns=None) for d in ("delivery", "instore")}
    from vita.run import _clear_global_state  # VitaBench's runner's own reset of its tables

    ids = re.compile(r"\bO[TI][0-9a-f]{10}\b")

    def order_of(text: str) -> str | None:
        found = ids.findall(text)
        return found[0] if found else None

    print(
        f"median ms per operation over {args.tasks} tasks per domain (call: over all calls; 1st reset: a task's first)"
    )
    print(f"{'domain':10} {'path':11} {'1st reset':>9} {'reset':>8} {'call':>8} {'fork':>8}")
    for domain, env in envs.items():
        module = importlib.import_module(f"vita.domains.{domain}.environment")
        tasks = [t.data for t in env.unwrapped.suite.tasks[: args.tasks]]
        for name, run in (
            ("vitabench", lambda t, d=domain, m=module: vitabench_path(d, t, m, _clear_global_state, order_of)),
            ("envace-gym", lambda t, d=domain, e=env: envace_path(d, e, t, order_of)),
        ):
            results = [run(t) for t in tasks]
            print(
                f"{domain:10} {name:11} {ms([r['first'] for r in results]):>9} {ms([r['reset'] for r in results])} "
                f"{ms([c for r in results for c in r['call']])} {ms([r['fork'] for r in results])}"
            )


if __name__ == "__main__":
    main()
