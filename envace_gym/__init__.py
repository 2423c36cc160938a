"""envace-gym: LLM tool-use tasks as Gymnasium envs with real or rehearsed dynamics."""

from envace_gym.env import DYNAMICS, EnvACEEnv
from envace_gym.errors import ErrorCode, ToolError
from envace_gym.limits import Limits
from envace_gym.registration import ENV_IDS, register_all, register_suite
from envace_gym.rehearsal import ResponseCache
from envace_gym.suite import Response, ScriptedUser, Suite, Task, User, UserReply, World
from envace_gym.tools import ToolSet
from envace_gym.wrappers import SelfRehearsal

register_all()

__all__ = ["DYNAMICS", "ENV_IDS", "EnvACEEnv", "ErrorCode", "Limits", "Response", "ResponseCache", "ScriptedUser",
           "SelfRehearsal", "Suite", "Task", "ToolError", "ToolSet", "User", "UserReply", "World", "register_suite"]
__version__ = "0.1.0"
