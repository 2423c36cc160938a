"""``EnvACE/tau2-mock-office-v0``: one office, many requests, a world a policy can learn.

The tools, database model, policy and evaluator are tau2's mock domain's, and the
instructions are mock-gen's families (:mod:`envace_gym.suites.tau2.mock_gen`), but every
task of every split starts from the same database, drawn once from :data:`OFFICE_SEED`
(:data:`USERS` users, :data:`TASKS` tasks). Every real response is then a function of
that database and the episode's earlier calls, which a rehearse role can internalize;
mock-gen, whose database changes per task, is the hidden-world contrast.

Tasks come from one deterministic stream of drafts: a draft's instruction hash names
its split (``test``, ``validation`` or ``train``), a draft whose instruction its split
already holds is dropped, and the stream stops when every split is full, so no
instruction is in two splits or twice in one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from functools import cache
from pathlib import Path
from typing import Any

from envace_gym.cache import cache_dir
from envace_gym.core.episode import Task
from envace_gym.suites.tau2 import mock_gen
from envace_gym.suites.tau2.mock_gen import NAMES, TITLES, MockGenSuite, draw_steps, tau2_task, token_cost
from envace_gym.suites.tau2.suite import Tau2World

OFFICE_SEED = 2026  #: The seed the office's users and tasks are generated from.
USERS = 8  #: Users in the office.
TASKS = 12  #: Tasks per user.
SIZES = {"train": 3000, "validation": 200, "test": 200}
BUDGET = 400  # of mock-gen's token estimate (mock_gen.token_cost); get_users lists 8 users here
# an instruction's hash byte modulo 16 names its split: 0-1 test, 2 validation, the rest train
SPLIT_OF_BYTE = {0: "test", 1: "test", 2: "validation"}


@cache
def office_db() -> dict:
    """The one initial database: users ``user_1..user_8``, tasks ``task_1..task_12``, each task owned
    by one user (some users own none), each completed with probability 0.35 (2 of the 12 are)."""
    rng = random.Random(f"office:{OFFICE_SEED}")
    users: dict[str, dict[str, Any]] = {
        f"user_{i}": {"user_id": f"user_{i}", "name": name, "tasks": []}
        for i, name in enumerate(rng.sample(NAMES, USERS), 1)
    }
    tasks = {}
    for i, title in enumerate(rng.sample(TITLES, TASKS), 1):
        task_id = f"task_{i}"
        tasks[task_id] = {
            "task_id": task_id,
            "title": title,
            "status": "completed" if rng.random() < 0.35 else "pending",
            "description": None,
        }
        users[f"user_{rng.randint(1, USERS)}"]["tasks"].append(task_id)
    return {"users": users, "tasks": tasks}


def split_of(instruction: str) -> str:
    digest = hashlib.blake2b(instruction.encode(), digest_size=8).digest()
    return SPLIT_OF_BYTE.get(digest[0] % 16, "train")


@cache
def office_tasks(sizes: tuple[tuple[str, int], ...] = tuple(SIZES.items())) -> dict[str, dict]:
    """Raw tau2 tasks by id (``train_0``, ``validation_3``, ``test_17``, ...), in stream order: drawn
    once (1.7 s for the default sizes), then read from ``$ENVACE_CACHE/mock-office`` (0.3 s), under a
    name that hashes the sizes and the source of this module and of mock-gen, so an edit draws anew."""
    key = hashlib.blake2b(repr(sizes).encode(), digest_size=8)
    for source in (__file__, mock_gen.__file__):
        key.update(Path(source).read_bytes())
    path = cache_dir("mock-office") / f"tasks-{key.hexdigest()}.json"
    try:
        tasks = json.loads(path.read_text())
        if isinstance(tasks, dict):
            return tasks
    except (OSError, ValueError):  # none yet, or a damaged file: drawn again
        pass
    tasks = _draw_tasks(dict(sizes))
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:  # written whole, then renamed: a process reading at the same time sees no half file
        partial.write_text(json.dumps(tasks))
        os.replace(partial, path)
    except OSError:  # a read-only cache: drawn again next time
        partial.unlink(missing_ok=True)
    return tasks


def _draw_tasks(wanted: dict[str, int]) -> dict[str, dict]:
    """The stream of drafts, until every split of ``wanted`` is full."""
    db = office_db()
    seen: dict[str, set[str]] = {split: set() for split in wanted}
    tasks: dict[str, dict] = {}
    k = 0
    while not all(len(seen[s]) >= n for s, n in wanted.items()):
        rng = random.Random(f"office:{OFFICE_SEED}:draft:{k}")
        k += 1
        steps = draw_steps(rng, db)
        if not steps:
            continue
        instruction = "Please " + ", then ".join(s["text"] for s in steps) + "."
        split = split_of(instruction)
        if (
            split not in wanted
            or len(seen[split]) >= wanted[split]
            or instruction in seen[split]
            or token_cost(instruction, db, steps) > BUDGET
        ):
            continue
        task_id = f"{split}_{len(seen[split])}"
        seen[split].add(instruction)
        tasks[task_id] = tau2_task(task_id, instruction, db, steps)
        tasks[task_id]["description"]["purpose"] = "Office mock-domain task (one shared database)"
    return tasks


class OfficeSuite(MockGenSuite):
    """tau2's mock domain on one shared office database: splits ``train``, ``validation`` and ``test``."""

    def __init__(self, sizes: dict[str, int] | None = None):
        super().__init__(OFFICE_SEED, sizes or SIZES)
        self.name = "mock-office"
        self._office: Tau2World | None = None

    def __reduce__(self):  # pickled by reference: the process-wide suite
        return (get_office_suite, ()) if self.sizes == SIZES else (OfficeSuite, (self.sizes,))

    def _load_tasks(self):
        tasks = office_tasks(tuple(self.sizes.items()))
        splits: dict[str, list[str]] = {split: [] for split in self.sizes}
        for task_id in tasks:
            splits[task_id.rpartition("_")[0]].append(task_id)
        return tasks, splits

    def new_world(self, task: Task) -> Tau2World:
        """A fork of the one office world (every task's initial state is the same database)."""
        if self._office is None:
            self._office = self._build_initial(task.data)
        return self._office.fork()


@cache
def get_office_suite() -> OfficeSuite:
    """The process-wide office suite."""
    return OfficeSuite()
