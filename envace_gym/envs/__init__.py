"""Deprecated until 0.3.0: the suites moved to :mod:`envace_gym.suites`. ``envace_gym.envs.X`` is the
module ``envace_gym.suites.X`` (the same object, so classes compare equal); the env constructors the
suite packages held are :func:`envace_gym.make_mcp_env` and ``gym.make`` of the ids
(:mod:`envace_gym.moved` finds the old names)."""

from __future__ import annotations

from envace_gym.moved import warn

warn("envace_gym.envs", "envace_gym.suites")
