"""envace-gym: LLM tool-use tasks as Gymnasium envs with real or rehearsed dynamics."""

from envace_gym.core.episode import Task
from envace_gym.core.errors import ErrorCode, ToolError
from envace_gym.core.grader import Grader
from envace_gym.core.limits import Limits
from envace_gym.core.response import Response
from envace_gym.core.suite import ScriptedUser, Suite, User, UserReply, World
from envace_gym.core.tools import ToolSet
from envace_gym.dynamics import DYNAMICS
from envace_gym.env import EnvACEEnv
from envace_gym.moved import install as _install_moved
from envace_gym.registration import ENV_IDS, make_mcp_env, register_all, register_suite
from envace_gym.rehearse_prompts import ResponseCache
from envace_gym.wrappers import SelfRehearsal  # noqa: F401 (deprecated until 0.3.0: importable, not in __all__)

_install_moved()  # envace_gym.envs's modules still import, until 0.3.0
register_all()

__all__ = [
    "DYNAMICS",
    "ENV_IDS",
    "EnvACEEnv",
    "ErrorCode",
    "Grader",
    "Limits",
    "Response",
    "ResponseCache",
    "ScriptedUser",
    "Suite",
    "Task",
    "ToolError",
    "ToolSet",
    "User",
    "UserReply",
    "World",
    "make_mcp_env",
    "register_suite",
]
__version__ = "0.2.0"
