import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, os.path.dirname(__file__))

import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random-init Qwen3-style model with a tokenizer trained on the spot."""
    from envace_gym.testing import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny"))
