"""Episodes are tokenized by role in one place (issue 57): :mod:`envace_gym.training.tokens`, which SFT,
the rollouts' world rows and the token-role exports share; the role vocabularies are defined once each."""

import ast
from pathlib import Path

from transformers import AutoTokenizer

import envace_gym
from envace_gym import spaces
from envace_gym.training import grpo, rollout, sft, token_roles, tokens

ROOT = Path(envace_gym.__file__).parent


def calls(path: Path) -> list[str]:
    """``apply_chat_template`` for each call of it in ``path``, ``tokenize`` for each call that tokenizes
    text without special tokens (``add_special_tokens=False``, as a role's run of tokens is)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "apply_chat_template":
                found.append("apply_chat_template")
            if any(k.arg == "add_special_tokens" for k in node.keywords):
                found.append("tokenize")
    return found


def test_only_tokens_renders_and_tokenizes_episodes():
    found = {path.relative_to(ROOT).as_posix(): calls(path) for path in ROOT.rglob("*.py")}
    renders = {name for name, seen in found.items() if "apply_chat_template" in seen}
    assert renders == {"agents/prompting.py", "training/tokens.py"}  # a prompt, or an episode by role
    tokenizes = {name for name, seen in found.items() if "tokenize" in seen and name.startswith("training/")}
    assert tokenizes == {"training/tokens.py"}
    assert sorted(found["training/tokens.py"]) == ["apply_chat_template", "tokenize"]  # once each


def test_the_three_tokenizers_by_role_are_one(tiny, monkeypatch):
    """SFT's rows, the world rows and the exports each tokenize through ``conversation_tokens``."""
    tok = AutoTokenizer.from_pretrained(tiny)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Order 7?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_order", "content": '{"status": "sent"}'},
        {"role": "assistant", "content": "It was sent."},
    ]
    used = []
    real = tokens.conversation_tokens
    monkeypatch.setattr(tokens, "conversation_tokens", lambda *a, **k: used.append(a[4]) or real(*a, **k))
    for module in (sft, rollout, token_roles):  # as each imported it
        monkeypatch.setattr(module, "conversation_tokens", tokens.conversation_tokens)
    record = {"messages": messages, "tools": [], "real_call_ids": ["c1"], "opening_messages": 2}
    ids, roles = sft.episode_tokens(tok, record)
    obs = {"role": "act", "messages": messages, "tools": [], "tool_call": None}
    world = rollout.world_row(tok, rollout.Rollout("t", 0), obs, {"c1"})
    exported = token_roles.episode_tokens(tok, messages, [], {"c1": "real"}, opening=2)
    assert used == [{2: "act", 3: "rehearse", 4: "act"}, {3: "world"}, {2: "action", 3: "env_output", 4: "action"}]
    assert grpo.ROLE_IDS["rehearse"] in roles and world is not None and grpo.ROLE_IDS["world"] in world.roles
    assert tok.decode(ids) in tok.decode(world.ids) and "env_output" in exported.roles


def _call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "get_order", "arguments": '{"id": 7}'}}


def test_each_role_vocabulary_is_defined_once():
    from envace_gym.agents import prompting
    from envace_gym.training import config

    assert spaces.CHAT_ROLES == ("system", "user", "assistant", "tool") and spaces.TURN_ROLES == ("act", "rehearse")
    assert not any(hasattr(module, "ROLES") for module in (prompting, config, token_roles, tokens, spaces))
    assert token_roles.TOKEN_ROLES == ("context", "action", "env_output", "warning", "env_rehearsed")
    assert grpo.ROLE_IDS is tokens.ROLE_IDS and set(token_roles.ROW_ROLES) == set(tokens.ROLE_IDS)
    definitions = {
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Tuple | ast.Dict)
        and {"act", "rehearse"} <= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
        and not any(isinstance(c, ast.Call) for c in ast.walk(node.value))
    }
    assert definitions <= {"spaces.py", "training/tokens.py", "training/token_roles.py"}, definitions
