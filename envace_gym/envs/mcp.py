"""Deprecated until 0.3.0: :mod:`envace_gym.suites.mcp`, with the old constructors: ``make_env`` is
:func:`envace_gym.make_mcp_env`, ``MCPEnv(suite)`` is :class:`~envace_gym.env.EnvACEEnv`, and
``register_finmcp`` is :func:`envace_gym.registration.register_finmcp`."""

from envace_gym import registration
from envace_gym.env import EnvACEEnv
from envace_gym.moved import warn
from envace_gym.suites.mcp import *  # noqa: F403
from envace_gym.suites.mcp import __all__

__path__: list[str] = []  # a package: its submodules are envace_gym.suites.mcp's, through the envs alias


def make_env(server, tasks, **kwargs) -> EnvACEEnv:
    warn("envace_gym.envs.mcp.make_env", "envace_gym.make_mcp_env")
    return registration.make_mcp_env(server, tasks, **kwargs)


def MCPEnv(suite, *, owns_suite: bool = False, **kwargs) -> EnvACEEnv:  # noqa: N802 (the old class's name)
    warn("envace_gym.envs.mcp.MCPEnv", "envace_gym.EnvACEEnv")
    return EnvACEEnv(suite, owns_suite=owns_suite, **kwargs)


def register_finmcp(path, distinct: bool = False) -> str:
    warn("envace_gym.envs.mcp.register_finmcp", "envace_gym.registration.register_finmcp")
    return registration.register_finmcp(path, distinct)


__all__ = [*__all__, "MCPEnv", "make_env", "register_finmcp"]
