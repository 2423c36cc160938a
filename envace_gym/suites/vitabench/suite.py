"""VitaBench's domains as envace-gym suites, on VitaBench's own code: delivery, in-store and OTA, and its
cross-domain tasks in the three domains' merged environment (as its runner plays ``delivery,instore,ota``).

The tools, their schemas, the agent policy, the greeting and the tasks are VitaBench's.
What differs from its runner is how state is held: each task's initial world is built
once, with registries of its own (:mod:`~envace_gym.suites.vitabench.isolation`), and every
episode's world is a deep copy of it, so a reset and a fork are copies. The tasks have
no gold calls; their reward is VitaBench's rubric judge
(:class:`~envace_gym.suites.vitabench.reward.VitaBenchReward`). A task set whose file the
checkout lacks (the snapshot holds only delivery's and in-store's) is an ImportError naming it.
"""

from __future__ import annotations

import copy
import importlib
import os
from datetime import UTC, datetime
from functools import cache, cached_property, partial
from typing import Any

from envace_gym.core.episode import Episode, Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.grader import NoGoldGrader
from envace_gym.core.response import Response
from envace_gym.core.suite import Suite, User, World
from envace_gym.core.tools import ToolSet
from envace_gym.suites.vitabench.source import CROSS_DOMAIN, DOMAINS, LANGUAGE, ROOT_VARIABLE, TASK_SETS, load, root

load()

from vita.environment.environment import Environment, get_cross_environment, get_cross_tasks  # noqa: E402
from vita.orchestrator.orchestrator import get_default_first_agent_message  # noqa: E402
from vita.utils.utils import get_task_file_path, get_weekday  # noqa: E402

from envace_gym.suites.vitabench.isolation import Registries  # noqa: E402

JUDGE_VARIABLE = "VITABENCH_JUDGE"  # MODEL@BASE_URL of the default judge
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class VitaWorld(World):
    """VitaBench's ``Environment`` for one task, its tools run with the world's own registries active."""

    def __init__(self, env: Environment, registries: Registries):
        self.env, self.registries = env, registries

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        with self.registries.active():
            try:  # VitaBench's get_response: a raised exception is the text "Error: ..."
                result = self.env.make_tool_call(name, requestor=requestor, **arguments)
            except Exception as e:
                return Response(error=ToolError(ErrorCode.EXECUTION_ERROR, str(e)), native=f"Error: {e}")
            return Response.from_native(Environment.to_json_str(result), decode_scalars=True)

    def fork(self) -> VitaWorld:
        # one copy: shared objects stay shared, and the merged toolkit's bound tools bind to its copy
        tools, registries = copy.deepcopy((self.env.tools, self.registries))
        env = copy.copy(self.env)
        env.tools = tools
        return VitaWorld(env, registries)


def missing_judge(episode: Episode) -> tuple[float, dict]:
    raise ValueError(
        f"the vitabench reward needs a judge: set {JUDGE_VARIABLE}=MODEL@BASE_URL or pass "
        "reward='vitabench:MODEL@BASE_URL'"
    )


missing_judge.__name__ = "vitabench"
setattr(missing_judge, "unavailable", f"set {JUDGE_VARIABLE}=MODEL@BASE_URL, or pass --reward vitabench:MODEL@BASE_URL")  # noqa: B010


class VitaSuite(Suite):
    """One VitaBench task set (``delivery``, ``instore``, ``ota`` or ``cross_domain``). Build it with
    :func:`get_suite`."""

    users = ("scripted", "llm")
    judge_spec = "vitabench"

    def __init__(self, domain: str):
        if domain not in TASK_SETS:
            raise ValueError(f"unknown VitaBench domain {domain!r}; choose from {TASK_SETS}")
        path = get_task_file_path(domain, LANGUAGE)
        if not path.is_file():
            raise ImportError(
                f"the VitaBench checkout at {ROOT_VARIABLE}={root()} has no {domain} tasks: {path} is missing "
                "(VitaBench's repository holds it; put it there to play this suite)"
            )
        self.domain, self.name = domain, f"vitabench-{domain.replace('_', '-')}"
        if domain == CROSS_DOMAIN:
            tasks, self._environment = get_cross_tasks(LANGUAGE), partial(get_cross_environment, ",".join(DOMAINS))
        else:
            module = importlib.import_module(f"vita.domains.{domain}.environment")
            tasks, self._environment = module.get_tasks(LANGUAGE), module.get_environment
        self.tasks = [Task(t.id, t) for t in tasks]
        self._initial: dict[str, VitaWorld] = {}
        template = self.new_world(self.tasks[0]).env
        self._toolset = ToolSet([t.openai_schema for t in template.get_tools()], closed=True)
        self._policy = template.get_policy()
        self._greeting = get_default_first_agent_message(LANGUAGE).content

    def __reduce__(self):  # pickled by reference: the process-wide suite
        return get_suite, (self.domain,)

    def tools(self, task: Task) -> ToolSet:
        return self._toolset

    def system_prompt(self, task: Task) -> str:
        """VitaBench's agent policy at the task's time (as its LLM agent formats it)."""
        time = task.data.environment["time"]
        return self._policy.format(time=f"{time} {get_weekday(time, LANGUAGE)}")

    def opening_messages(self, task: Task) -> list[dict]:
        return [{"role": "assistant", "content": self._greeting}]

    def new_world(self, task: Task) -> VitaWorld:
        if task.id not in self._initial:
            time = datetime.strptime(task.data.environment["time"], TIME_FORMAT).replace(tzinfo=UTC)
            registries = Registries(time.timestamp())
            with registries.active():  # the database's stores, products and locations register here
                env = self._environment(copy.deepcopy(task.data.environment), LANGUAGE)
            self._initial[task.id] = VitaWorld(env, registries)
        return self._initial[task.id].fork()

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        from envace_gym.suites.vitabench.users import LLMUser, ScriptedUser

        if isinstance(kind, User):
            return kind
        if kind == "scripted":
            return ScriptedUser(task, **kwargs)
        if kind == "llm":
            return LLMUser(task, self._greeting, seed=seed, **kwargs)
        raise ValueError(f"unknown user {kind!r}; use 'scripted', 'llm' or a User object")

    @cached_property
    def grader(self) -> VitaGrader:
        return VitaGrader(self)


class VitaGrader(NoGoldGrader):
    """VitaBench's tasks have no gold calls: they are scored by its rubric judge."""

    def judge_reward(self) -> Any:
        """VitaBench's rubric judge on the server ``VITABENCH_JUDGE`` names (``MODEL@BASE_URL``)."""
        from envace_gym.suites.vitabench.reward import VitaBenchReward

        spec = os.environ.get(JUDGE_VARIABLE)
        return VitaBenchReward.from_spec(f"vitabench:{spec}") if spec else missing_judge

    def rubrics(self, task: Task) -> list[str]:
        """The task's rubrics, once each, in the order VitaBench's evaluator numbers them."""
        criteria = task.data.evaluation_criteria
        if criteria is None:
            return []
        found = [r for s in criteria.expected_states or [] for r in s.state_rubrics or []]
        return list(dict.fromkeys(found + list(criteria.overall_rubrics or [])))

    def criteria(self, task: Task) -> str:
        """The user's instructions and the task's rubrics, for a generic judge."""
        rubrics = "\n".join(f"- {r}" for r in self.rubrics(task)) or "- none"
        return f"The user's instructions: {task.data.instructions}\n\nEvery rubric must be met:\n{rubrics}"


@cache
def get_suite(domain: str) -> VitaSuite:
    """The process-wide suite of one VitaBench domain."""
    return VitaSuite(domain)
