"""``EnvACE/tau2-mock-gen-v0``: procedurally generated, short tasks on tau2's mock domain.

Only the tasks are generated; the tools, database model, policy and evaluator are
the mock domain's own. Task ``i`` of a split is a pure function of ``(seed, split, i)``,
made when first asked for: an initial database of 2-4 users and 1-4 tasks (tau2's
initial-state data, which overwrites the mock database's ``user_1`` and ``task_1``),
an instruction of one to four steps, and its gold actions. A hash of the instruction
decides which split may hold it, so no test instruction is ever seen in training.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable, Iterator, Mapping
from functools import cache, cached_property, partial
from typing import Any

from tau2.data_model.tasks import Task as Tau2Task

from envace_gym.core.episode import Task
from envace_gym.suites.tau2.suite import Tau2Suite

SIZES = {"train": 5000, "test": 200}
# An estimate of a task's own turns in SmolLM2 tokens stays under BUDGET, so that whole episodes
# (system prompt, tools, greeting and closing add ~680) stay under 1000: CALL_COST is a call and
# its response, USER_COST one user in get_users' response.
BUDGET = 290
CALL_COST = {"get_users": 45, "create_task": 110, "update_task_status": 95, "transfer_to_human_agents": 80}
USER_COST = 26
TEST_SHARE = 8  # one instruction hash in TEST_SHARE belongs to the test split
FIRST = (
    "Ana",
    "Ben",
    "Chloe",
    "Dev",
    "Elena",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonah",
    "Kira",
    "Liam",
    "Maya",
    "Nikhil",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Umar",
    "Vera",
    "Wes",
    "Yara",
    "Zoe",
)
LAST = (
    "Abbott",
    "Banerjee",
    "Castro",
    "Dunn",
    "Eriksen",
    "Fischer",
    "Garcia",
    "Hale",
    "Ito",
    "Jensen",
    "Kowalski",
    "Lopez",
    "Mensah",
    "Novak",
    "Okafor",
    "Park",
    "Rossi",
    "Silva",
    "Tanaka",
    "Varga",
)
NAMES = tuple(f"{first} {last}" for first in FIRST for last in LAST)
TITLES = (
    "Book venue",
    "Pay invoices",
    "Update roadmap",
    "Call supplier",
    "Review budget",
    "Plan offsite",
    "Fix login bug",
    "Order laptops",
    "Draft newsletter",
    "Renew domain",
    "Hire designer",
    "Clean backlog",
    "Prepare demo",
    "Write report",
    "Test release",
    "Archive files",
    "Send survey",
    "Audit access",
    "Sign contract",
    "Train interns",
    "Refresh slides",
    "Migrate database",
    "Schedule retro",
    "Check backups",
    "Translate docs",
    "Onboard client",
    "Print badges",
    "Set up printer",
    "Reply to legal",
    "Collect feedback",
)
DESCRIPTIONS = (
    "Before Friday",
    "High priority",
    "Ask finance first",
    "For the Q3 review",
    "Needs two quotes",
    "Share with the team",
    "Due next week",
    "Keep it short",
)


def generate(split: str, index: int, seed: int = 0) -> dict:
    """Raw tau2 task ``{split}_{index}``, redrawn until it fits the budget and its instruction ``split``."""
    if split not in SIZES:
        raise ValueError(f"no split {split!r}; splits: {sorted(SIZES)}")
    attempt = 0
    while True:
        rng = random.Random(f"{seed}:{split}:{index}:{attempt}")
        attempt += 1
        db = _draw_db(rng)
        steps = draw_steps(rng, db)
        if not steps:
            continue
        instruction = "Please " + ", then ".join(s["text"] for s in steps) + "."
        if token_cost(instruction, db, steps) <= BUDGET and _split_of(instruction) == split:
            return tau2_task(f"{split}_{index}", instruction, db, steps)


def token_cost(instruction: str, db: dict, steps: list[dict]) -> int:
    """A task's own turns (instruction, calls, responses, what must be said) in SmolLM2 tokens, roughly."""
    calls = [name for s in steps for name, _ in s["actions"]]
    if any(s["lookup"] for s in steps):
        calls.append("get_users")
    ids = {i for s in steps for i in s["communicate"]}
    return (
        len(instruction) // 3
        + sum(CALL_COST[name] for name in calls)
        + 5 * len(ids)
        + (USER_COST * len(db["users"]) if "get_users" in calls else 0)
    )


def _split_of(instruction: str) -> str:
    """The only split that may hold this instruction."""
    digest = hashlib.blake2b(instruction.encode(), digest_size=8).digest()
    return "test" if digest[0] % TEST_SHARE == 0 else "train"


def _draw_db(rng: random.Random) -> dict:
    names = rng.sample(NAMES, rng.randint(2, 4))
    users: dict[str, dict[str, Any]] = {
        f"user_{i}": {"user_id": f"user_{i}", "name": n, "tasks": []} for i, n in enumerate(names, 1)
    }
    tasks = {}
    for i, title in enumerate(rng.sample(TITLES, rng.randint(1, 4)), 1):
        task_id = f"task_{i}"
        tasks[task_id] = {
            "task_id": task_id,
            "title": title,
            "status": rng.choice(("pending", "completed")),
            "description": rng.choice((None, *DESCRIPTIONS)),
        }
        users[rng.choice(list(users))]["tasks"].append(task_id)
    return {"users": users, "tasks": tasks}


def draw_steps(rng: random.Random, db: dict) -> list[dict]:
    """One to four steps, each a kind that applies to the state so far; [] when the draw does not fit."""
    # the steps mutate users' task lists and tasks' fields: a copy two levels deep (deepcopy was most
    # of the office suite's 3.9 s load, 22,000 drafts for its 3,400 tasks)
    state: dict[str, Any] = {
        "users": {k: {**user, "tasks": list(user["tasks"])} for k, user in db["users"].items()},
        "tasks": {k: dict(task) for k, task in db["tasks"].items()},
    }
    state.update(titles={t["title"] for t in db["tasks"].values()}, listed=set())
    n = rng.choice((1, 2, 2, 3, 3, 4))
    steps: list[dict] = []
    for k in range(n):
        kinds = [kind for kind in STEPS if kind != "delete" or k == n - 1]
        step = None
        while step is None:  # a kind that does not apply returns None; "create" always applies
            kind = rng.choices(kinds, [STEPS[kind][1] for kind in kinds])[0]
            step = STEPS[kind][0](rng, state, steps)
        steps.append(step)
    if not any(s["actions"] or s["communicate"] for s in steps):  # doing nothing would score 1
        return []
    return steps


def _new_title(rng: random.Random, state: dict) -> str:
    title = rng.choice([t for t in TITLES if t not in state["titles"]])
    state["titles"].add(title)
    return title


def _create(rng, state, steps):
    user = rng.choice(list(state["users"].values()))
    title = _new_title(rng, state)
    description = rng.choice(DESCRIPTIONS) if rng.random() < 0.5 else None
    task_id = f"task_{len(state['tasks']) + 1}"
    state["tasks"][task_id] = {"title": title, "status": "pending", "touched": True}
    user["tasks"].append(task_id)
    arguments = {"user_id": user["user_id"], "title": title}
    by_name = rng.random() < 0.5  # else the user id is given and no lookup is needed
    text = f"create a task titled '{title}' for {user['name'] if by_name else user['user_id']}"
    if description:
        arguments["description"] = description
        text += f" with the description '{description}'"
    return _step("create", text, [("create_task", arguments)], [task_id], lookup=by_name)


def _complete_new(rng, state, steps):
    if not steps or steps[-1]["kind"] != "create":
        return None
    task_id = steps[-1]["communicate"][0]
    state["tasks"][task_id]["status"] = "completed"
    return _step(
        "complete_new",
        "mark that new task as completed",
        [("update_task_status", {"task_id": task_id, "status": "completed"})],
    )


def _set_status(status: str, text: str, kind: str):
    def step(rng, state, steps):
        ids = [i for i, t in state["tasks"].items() if t["status"] != status and not t.get("touched")]
        if not ids:
            return None
        task_id = rng.choice(ids)
        state["tasks"][task_id].update(status=status, touched=True)
        return _step(
            kind,
            text.format(id=task_id, title=state["tasks"][task_id]["title"]),
            [("update_task_status", {"task_id": task_id, "status": status})],
        )

    return step


def _complete_all(rng, state, steps):
    users = [u for u in state["users"].values() if any(state["tasks"][i]["status"] == "pending" for i in u["tasks"])]
    if not users:
        return None
    user = rng.choice(users)
    for task_id in user["tasks"]:
        state["tasks"][task_id].update(status="completed", touched=True)
    return _step(
        "complete_all",
        f"mark every task of {user['name']} as completed",
        [("update_task_status", {"task_id": i, "status": "completed"}) for i in user["tasks"]],
        lookup=True,
    )


def _list(rng, state, steps):
    users = [u for u in state["users"].values() if u["tasks"] and u["user_id"] not in state["listed"]]
    if not users:
        return None
    user = rng.choice(users)
    state["listed"].add(user["user_id"])
    return _step(
        "list", f"tell me the ids of the tasks assigned to {user['name']}", [], list(user["tasks"]), lookup=True
    )


def _unknown_user(rng, state, steps):
    names = {u["name"] for u in state["users"].values()}
    name = rng.choice([n for n in NAMES if n not in names])
    title = _new_title(rng, state)
    return _step("unknown_user", f"create a task titled '{title}' for {name}", [], lookup=True)


def _delete(rng, state, steps):
    ids = [i for i, t in state["tasks"].items() if not t.get("touched")]
    if not ids:
        return None
    task_id = rng.choice(ids)
    what = f"{task_id} ('{state['tasks'][task_id]['title']}')"
    summary = f"The user wants {what} deleted, which the policy does not allow."
    return _step("delete", f"delete {what}", [("transfer_to_human_agents", {"summary": summary})])


def _step(kind: str, text: str, actions: list, communicate: list | None = None, lookup: bool = False) -> dict:
    return {"kind": kind, "text": text, "actions": actions, "communicate": communicate or [], "lookup": lookup}


STEPS = {  # kind: (step maker, weight)
    "create": (_create, 2),
    "complete_new": (_complete_new, 3),
    "complete": (_set_status("completed", "mark {id} ('{title}') as completed", "complete"), 2),
    "reopen": (_set_status("pending", "set {id} ('{title}') back to pending", "reopen"), 1),
    "complete_all": (_complete_all, 1),
    "list": (_list, 1),
    "unknown_user": (_unknown_user, 0.3),
    "delete": (_delete, 0.5),
}


def tau2_task(task_id: str, instruction: str, db: dict, steps: list[dict]) -> dict:
    calls: list[tuple[str, dict]] = []
    looked_up = False
    for step in steps:
        if step["lookup"] and not looked_up:
            calls.append(("get_users", {}))
            looked_up = True
        calls += step["actions"]
    actions = [
        {"action_id": f"{name}_{k}", "name": name, "arguments": arguments} for k, (name, arguments) in enumerate(calls)
    ]
    basis = ["DB"]
    communicate = list(dict.fromkeys(i for s in steps for i in s["communicate"]))
    if communicate:
        basis.append("COMMUNICATE")
    if steps[-1]["kind"] == "delete":  # a transfer changes no data: it is checked as an action
        actions[-1]["compare_args"] = []
        basis.append("ACTION")
    return {
        "id": task_id,
        "description": {
            "purpose": "Generated mock-domain task",
            "notes": "steps: " + ", ".join(s["kind"] for s in steps),
        },
        "user_scenario": {
            "instructions": {
                "domain": "mock",
                "reason_for_call": instruction,
                "task_instructions": "Ask the agent to do exactly this; end the conversation once it is done.",
            }
        },
        "ticket": instruction,
        "initial_state": {"initialization_data": {"agent_data": db}},
        "evaluation_criteria": {"actions": actions, "communicate_info": communicate, "reward_basis": basis},
    }


class GeneratedTasks(Mapping):
    """Raw tasks by id (``train_0``, ``test_17``, ...), each generated when looked up."""

    def __init__(self, seed: int, sizes: dict[str, int]):
        self.seed, self.sizes = seed, sizes

    def _parse(self, task_id) -> tuple[str, int] | None:
        split, _, index = str(task_id).rpartition("_")
        if split in self.sizes and index.isdigit() and int(index) < self.sizes[split]:
            return split, int(index)
        return None

    def __contains__(self, task_id) -> bool:
        return self._parse(task_id) is not None

    def __getitem__(self, task_id) -> dict:
        parsed = self._parse(task_id)
        if parsed is None:
            raise KeyError(task_id)
        return generate(*parsed, seed=self.seed)

    def __iter__(self) -> Iterator[str]:
        return (f"{split}_{i}" for split, n in self.sizes.items() for i in range(n))

    def __len__(self) -> int:
        return sum(self.sizes.values())


class LazyTask(Task):
    """A task whose tau2 object is generated on first use, so listing thousands costs nothing."""

    def __init__(self, id: str, build: Callable[[], Tau2Task]):
        self.id, self._build = id, build

    @cached_property
    def data(self) -> Tau2Task:
        return self._build()


class MockGenSuite(Tau2Suite):
    """tau2's mock domain with generated tasks: splits ``train`` and ``test`` (sizes in ``SIZES``)."""

    def __init__(self, seed: int = 0, sizes: dict[str, int] | None = None):
        self.seed, self.sizes = seed, dict(sizes or SIZES)
        super().__init__("mock")
        self.name, self.default_split = "mock-gen", "test"

    def __reduce__(self):  # pickled by reference: the process-wide suite of its seed
        return (get_gen_suite, (self.seed,)) if self.sizes == SIZES else (MockGenSuite, (self.seed, self.sizes))

    def _schema(self, tool) -> dict:
        """Without pydantic's generated titles: tokens that say nothing new."""
        schema = copy.deepcopy(tool.openai_schema)
        parameters = schema["function"]["parameters"]
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        return schema

    def _load_tasks(self):
        tasks = GeneratedTasks(self.seed, self.sizes)
        return tasks, {split: [f"{split}_{i}" for i in range(n)] for split, n in self.sizes.items()}

    def task(self, task_id: str) -> Task:
        if task_id not in self._tasks and task_id in self._raw_tasks:
            self._tasks[task_id] = LazyTask(task_id, partial(self._validated, task_id))
        return super().task(task_id)

    def _validated(self, task_id: str) -> Tau2Task:
        return Tau2Task.model_validate(self._raw_tasks[task_id])


@cache
def get_gen_suite(task_seed: int = 0) -> MockGenSuite:
    """The process-wide generated suite of one seed."""
    return MockGenSuite(task_seed)
