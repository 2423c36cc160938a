"""Moved modules keep their old names, as the same modules, with a warning that names the new place."""

import importlib
import sys
import warnings

import pytest

import envace_gym
from envace_gym.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_is_the_new_module_with_a_warning(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_the_old_suites_package_and_its_constructors():
    for name in [n for n in sys.modules if n == "envace_gym.envs" or n.startswith("envace_gym.envs.")]:
        del sys.modules[name]
    with pytest.warns(DeprecationWarning, match="envace_gym.envs is now envace_gym.suites"):
        tau2 = importlib.import_module("envace_gym.envs.tau2")
    assert tau2 is importlib.import_module("envace_gym.suites.tau2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from envace_gym.envs import mcp
    with pytest.warns(DeprecationWarning, match="make_env is now envace_gym.make_mcp_env"):
        env = mcp.make_env(None, ["hello"])
    assert isinstance(env, envace_gym.EnvACEEnv)
    env.close()
