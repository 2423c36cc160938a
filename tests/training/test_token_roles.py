"""Episodes as tokens with roles (OpenEnv RFC 010's, and env_rehearsed), and the ECHO trainers' masks."""

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.training.grpo import ROLE_IDS
from envace_gym.training.token_roles import (
    ROLES,
    SOURCE_ROLES,
    echo_mask,
    episode_tokens,
    opening_length,
    role_weights,
    row_tokens,
    trl_env_mask,
)

REFUSED = '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'


def spans(tokens, tok) -> list[tuple[str, str]]:
    """(role, text) of each run of one role."""
    out: list[tuple[str, list[int]]] = []
    for i, role in zip(tokens.ids, tokens.roles):
        if not out or out[-1][0] != role:
            out.append((role, []))
        out[-1][1].append(i)
    return [(role, tok.decode(ids)) for role, ids in out]


@pytest.fixture(scope="module")
def mixed_episode():
    """A retail episode under mixed dynamics: real and rehearsed responses, and one refused call."""
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="mixed", p_real=0.5)
    oracle = agents.load("oracle", env=env)
    env.reset(seed=3, options={"task_id": "5"})
    obs, reward, terminated, truncated, _ = env.step(REFUSED)
    while not (terminated or truncated):
        obs, reward, terminated, truncated, _ = env.step(oracle.act(obs))
    assert reward == 1.0
    return env.unwrapped.episode, obs["tools"]


def test_every_token_has_the_role_of_whoever_wrote_it(tiny, mixed_episode):
    tok = AutoTokenizer.from_pretrained(tiny)
    episode, tools = mixed_episode
    sources = {c.id: c.source for c in episode.calls}
    assert {"real", "rehearsed", "rejected"} <= set(sources.values())
    opening = opening_length(episode)
    assert episode.messages[opening - 1]["role"] == "assistant"  # tau2's greeting: the env's, not the policy's
    tokens = episode_tokens(tok, episode.messages, tools, sources, opening)
    assert set(tokens.roles) <= set(ROLES) and len(tokens.ids) == len(tokens.roles)
    # nothing lost or added: the tokens are the rendered conversation
    assert tok.decode(tokens.ids) == tok.apply_chat_template(episode.messages, tools=tools, tokenize=False)
    runs = spans(tokens, tok)
    responses = [(role, text) for role, text in runs if role in ("env_output", "warning", "env_rehearsed")]
    assert [role for role, _ in responses] == [SOURCE_ROLES[c.source] for c in episode.calls]
    assert [text for _, text in responses] == [c.content for c in episode.calls]
    actions = [text for role, text in runs if role == "action"]
    assert len(actions) == sum(m["role"] == "assistant" for m in episode.messages[opening:])
    assert all(text.endswith(tok.eos_token) for text in actions)
    assert "no_such_tool" in actions[0]


def test_no_exporter_trains_a_rehearsal_as_real_environment_output(tiny, mixed_episode):
    tok = AutoTokenizer.from_pretrained(tiny)
    episode, tools = mixed_episode
    sources = {c.id: c.source for c in episode.calls}
    tokens = episode_tokens(tok, episode.messages, tools, sources, opening_length(episode))
    rehearsed = [k for k, role in enumerate(tokens.roles) if role == "env_rehearsed"]
    real = [k for k, role in enumerate(tokens.roles) if role == "env_output"]
    assert rehearsed and real
    echo = echo_mask(tokens)  # the auxiliary cross-entropy on the environment's output
    assert all(echo[k] == 0 for k in rehearsed) and all(echo[k] == 1 for k in real) and sum(echo) == len(real)
    env_loss = role_weights(tokens, {"action": 1.0, "env_output": 0.1})
    assert all(env_loss[k] == 0.0 for k in rehearsed) and all(env_loss[k] == 0.1 for k in real)
    start = tokens.roles.index("action")
    trl = trl_env_mask(tokens, start)  # TRL: 1 on the policy's own tokens, 0 on the environment's
    assert len(trl) == len(tokens.ids) - start
    assert all(trl[k - start] == 1 for k in rehearsed) and all(trl[k - start] == 0 for k in real)
    with pytest.raises(ValueError, match="unknown token roles"):
        role_weights(tokens, {"observation": 1.0})


def test_a_training_rows_roles_in_the_same_vocabulary():
    roles = [ROLE_IDS[r] for r in ("context", "act", "context", "rehearse", "world")]
    tokens = row_tokens([1, 2, 3, 4, 5], roles, ROLE_IDS)
    assert tokens.roles == ["context", "action", "context", "env_rehearsed", "env_output"]
    assert echo_mask(tokens) == [0, 0, 0, 0, 1]
