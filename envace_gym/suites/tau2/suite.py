"""tau2-bench domains (retail, airline, telecom, mock) as an envace-gym suite.

The tool code and database models are tau2's own. What differs from tau2's path
is how state is held: each domain's database is loaded and validated once per
process, every episode's world is a copy-on-write view of it
(:mod:`envace_gym.core.state`), and each task's initial and gold worlds are built
once and cached, so a reset is a fork and a score is a diff of touched items.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from functools import cache, cached_property

from tau2.data_model.tasks import Task as Tau2Task
from tau2.environment.environment import Environment
from tau2.environment.toolkit import ToolKitBase
from tau2.utils import load_file
from tau2.utils.pydantic_utils import update_pydantic_model_with_dict
from tau2.utils.utils import DATA_DIR

from envace_gym.core.episode import Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.response import DumpedJSON, Response
from envace_gym.core.state import cow_model, fork_model
from envace_gym.core.suite import Suite, User, World
from envace_gym.core.tools import ToolSet
from envace_gym.suites.tau2.grader import Tau2Grader
from envace_gym.suites.tau2.users import GREETING, LLMUser, ScriptedUser, scenario_parts

DOMAINS = ("retail", "airline", "telecom", "mock")
DEFAULT_SPLIT = {"retail": "test", "airline": "test", "telecom": "base", "mock": "base"}
STATELESS_TOOLS = ("calculate",)  # evaluates an expression: run isolated, so `9**9**9` is cut short
# a `calculate` expression without a power and this short costs microseconds: it runs in process
PLAIN_ARITHMETIC_CHARS = 200
AGENT_INSTRUCTION = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\n"
    "You cannot do both at the same time.\n\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."
)


def _clone_toolkit(toolkit: ToolKitBase, db) -> ToolKitBase:
    """A toolkit of the same class on ``db``, its other state (id counters) copied."""
    clone = copy.copy(toolkit)
    for name, value in vars(toolkit).items():
        setattr(clone, name, db if name == "db" else copy.deepcopy(value))
    return clone


class Tau2World(World):
    """A tau2 ``Environment`` running tau2's tools on a copy-on-write database."""

    def __init__(self, env: Environment):
        self.env = env

    def execute(self, name: str, arguments: dict, requestor: str = "assistant") -> Response:
        try:
            result = self.env.make_tool_call(name, requestor=requestor, **arguments)
            self.env.sync_tools()
            native = Environment.to_json_str(result)
        except Exception as e:  # tau2 tools signal failures with exceptions
            return Response(error=ToolError(ErrorCode.EXECUTION_ERROR, str(e)), native=f"Error: {e}")
        if not isinstance(result, str) and native.startswith(("{", "[")):
            # json.dumps's text of an object or array: from_native would parse and dump it to this text
            return Response(text=DumpedJSON(native), native=native)
        return Response.from_native(native)

    def fork(self) -> Tau2World:
        env = copy.copy(self.env)
        for attr in ("tools", "user_tools"):
            toolkit = getattr(self.env, attr)
            if toolkit is not None:
                setattr(env, attr, _clone_toolkit(toolkit, fork_model(toolkit.db)))
        return Tau2World(env)


class Tau2Suite(Suite):
    """One tau2 domain. Build it with :func:`get_suite`, which shares one per process."""

    transfer_tool = "transfer_to_human_agents"
    users = ("scripted", "llm")

    def __init__(self, domain: str):
        if domain not in DOMAINS:
            raise ValueError(f"unknown tau2 domain {domain!r}; choose from {DOMAINS}")
        self.domain = self.name = domain
        self.default_split = DEFAULT_SPLIT[domain]
        module = importlib.import_module(f"tau2.domains.{domain}.environment")
        self._template: Environment = module.get_environment()
        self._raw_tasks, self._splits = self._load_tasks()
        self._tasks: dict[str, Task] = {}
        self._initial: dict[str, Tau2World] = {}
        self._gold: dict[str, Tau2World] = {}
        # tau2's tools are Python functions: their keyword parameters are closed
        self._toolset = ToolSet([self._schema(t) for t in self._template.get_tools()], closed=True)
        self.user_toolset = (
            ToolSet([self._schema(t) for t in self._template.get_user_tools()], closed=True)
            if self._template.user_tools is not None
            else None
        )
        self.stateless_tools = frozenset(STATELESS_TOOLS) & set(self._toolset.names)
        self._system_prompt = (
            f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{self._template.get_policy()}\n</policy>"
        )

    def __reduce__(self):  # pickled by reference: the process-wide suite (no database copies)
        return get_suite, (self.domain,)

    def _schema(self, tool) -> dict:
        """The OpenAI schema shown for one of tau2's tools (a subclass may trim it)."""
        return tool.openai_schema

    # tasks ---------------------------------------------------------------
    def _load_tasks(self) -> tuple[Mapping[str, dict], dict[str, list[str]]]:
        """The raw tau2 tasks by id and the splits' id lists (a subclass may generate them)."""
        root = DATA_DIR / "tau2" / "domains" / self.domain
        raw = load_file(root / "tasks.json")
        raw = raw["tasks"] if isinstance(raw, dict) else raw
        return {t["id"]: t for t in raw}, load_file(root / "split_tasks.json")

    def splits(self) -> list[str]:
        return sorted(self._splits)

    def task_ids(self, split: str | None = "default") -> list[str]:
        split = self.default_split if split == "default" else split
        if split is None:
            return list(self._raw_tasks)
        if split not in self._splits:
            raise ValueError(f"tau2 {self.name} has no split {split!r}; splits: {sorted(self._splits)}")
        return list(self._splits[split])

    def task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            if task_id not in self._raw_tasks:
                raise KeyError(f"tau2 {self.name} has no task {task_id!r}")
            self._tasks[task_id] = Task(task_id, Tau2Task.model_validate(self._raw_tasks[task_id]))
        return self._tasks[task_id]

    def isolates(self, name: str, arguments: dict) -> bool:
        """``calculate`` runs in a child only when its expression could run long: a power (``**``, the
        one operator whose cost its length does not bound) or more than PLAIN_ARITHMETIC_CHARS characters."""
        if name not in self.stateless_tools:
            return False
        expression = arguments.get("expression")
        return not (
            isinstance(expression, str)
            and len(expression) <= PLAIN_ARITHMETIC_CHARS
            and "**" not in expression.replace(" ", "")
        )

    def tools(self, task: Task) -> ToolSet:
        return self._toolset

    def system_prompt(self, task: Task) -> str:
        return self._system_prompt

    def summary(self, task: Task) -> str:
        return scenario_parts(task)[0]

    # worlds --------------------------------------------------------------
    def new_world(self, task: Task) -> Tau2World:
        if task.id not in self._initial:
            self._initial[task.id] = self._build_initial(task.data)
        return self._initial[task.id].fork()

    def _build_initial(self, task: Tau2Task) -> Tau2World:
        env = copy.copy(self._template)
        state = task.initial_state
        data = state.initialization_data if state else None
        for attr, update in (("tools", data and data.agent_data), ("user_tools", data and data.user_data)):
            toolkit = getattr(self._template, attr)
            if toolkit is None:
                continue
            db = update_pydantic_model_with_dict(toolkit.db, update) if update else toolkit.db
            setattr(env, attr, _clone_toolkit(toolkit, cow_model(db)))
        world = Tau2World(env)
        if state and state.initialization_actions:
            for action in state.initialization_actions:
                env.run_env_function_call(action)
        history = (state.message_history if state else None) or []
        for message in history:  # a recorded history's calls happened: replay them
            for call in getattr(message, "tool_calls", None) or []:
                world.execute(call.name, call.arguments, call.requestor)
        env.sync_tools()
        return world

    def opening_messages(self, task: Task) -> list[dict]:
        out = [{"role": "assistant", "content": GREETING}]
        history = (task.data.initial_state.message_history if task.data.initial_state else None) or []
        for m in history:
            if m.role == "tool":
                out.append({"role": "tool", "tool_call_id": m.id, "content": m.content})
            else:
                msg = {"role": m.role, "content": m.content or ""}
                if getattr(m, "tool_calls", None):
                    msg["tool_calls"] = [
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in m.tool_calls
                    ]
                out.append(msg)
        return out

    def make_user(self, kind: str | User, task: Task, seed: int | None, **kwargs) -> User:
        if isinstance(kind, User):
            return kind
        if kind == "scripted":
            return ScriptedUser(self, task, **kwargs)
        if kind == "llm":
            return LLMUser(self, task, seed=seed, **kwargs)
        raise ValueError(f"unknown user {kind!r}; use 'scripted', 'llm' or a User object")

    # gold ----------------------------------------------------------------
    @cached_property
    def grader(self) -> Tau2Grader:
        return Tau2Grader(self)

    def gold_actions(self, task: Task):
        """The task's gold actions (tau2's ``Action`` objects), in order."""
        criteria = task.data.evaluation_criteria
        return (criteria.actions or []) if criteria else []

    def gold_world(self, task: Task) -> Tau2World:
        """The task's initial world after its gold actions, computed once (tau2's rules); read, never changed."""
        if task.id not in self._gold:
            world = self.new_world(task)
            for action in self.gold_actions(task):
                try:  # some gold actions fail by design (a lookup that finds nobody)
                    world.env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
                except Exception:
                    pass
            self._gold[task.id] = world
        return self._gold[task.id]

    def communicate_info(self, task: Task) -> list[str]:
        """What the agent must tell the user."""
        criteria = task.data.evaluation_criteria
        return list(criteria.communicate_info or []) if criteria else []


@cache
def get_suite(domain: str) -> Tau2Suite:
    """The process-wide suite of one tau2 domain (its database is loaded once)."""
    return Tau2Suite(domain)
