"""What moved since 0.1.0 keeps its old name until 0.3.0, with the project's own warning naming the new
place; names renamed within the unreleased 0.2.0 keep no alias."""

import importlib
import sys

import pytest

import envace_gym
from envace_gym.moved import REMOVAL, Deprecated


def _forget_envs():
    for name in [n for n in sys.modules if n == "envace_gym.envs" or n.startswith("envace_gym.envs.")]:
        del sys.modules[name]


def test_the_old_suites_package_and_its_constructors():
    _forget_envs()
    with pytest.warns(Deprecated, match=f"envace_gym.envs is now envace_gym.suites; it will be removed in {REMOVAL}"):
        tau2 = importlib.import_module("envace_gym.envs.tau2")
    assert tau2 is importlib.import_module("envace_gym.suites.tau2")
    with pytest.warns(Deprecated):
        _forget_envs()
        from envace_gym.envs import mcp
    with pytest.warns(Deprecated, match="make_env is now envace_gym.make_mcp_env"):
        env = mcp.make_env(None, ["hello"])
    assert isinstance(env, envace_gym.EnvACEEnv)
    env.close()


@pytest.mark.parametrize("old", ["envace_gym.runner", "envace_gym.runs", "envace_gym.bounded", "envace_gym.testing"])
def test_names_that_never_shipped_keep_no_alias(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_projects_own_deprecations_fail_a_test_that_does_not_expect_them():
    with pytest.raises(Deprecated):
        envace_gym.moved.warn("old", "new")
    assert "SelfRehearsal" not in envace_gym.__all__
