"""Episodes as tokens with roles (OpenEnv RFC 010's, and env_rehearsed), and the ECHO trainers' masks."""

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.training.grpo import ROLE_IDS
from envace_gym.training.token_roles import (
    ECHO_EXPORTERS,
    SOURCE_ROLES,
    TOKEN_ROLES,
    RoledTokens,
    echo_mask,
    episode_tokens,
    opening_length,
    prime_rl_echo,
    role_weights,
    row_tokens,
    trl_echo,
    trl_env_mask,
    trl_knows_tool_observation,
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


def play(**make_kwargs):
    """A retail episode played by the oracle after one refused call: the episode and its tools."""
    env = gym.make("EnvACE/tau2-retail-v0", **make_kwargs)
    oracle = agents.load("oracle", env=env)
    env.reset(seed=3, options={"task_id": "5"})
    obs, reward, terminated, truncated, _ = env.step(REFUSED)
    while not (terminated or truncated):
        obs, reward, terminated, truncated, _ = env.step(oracle.act(obs))
    assert reward == 1.0
    return env.unwrapped.episode, obs["tools"]


@pytest.fixture(scope="module")
def mixed_episode():
    """A retail episode under mixed dynamics: real and rehearsed responses, and one refused call."""
    return play(dynamics="mixed", p_real=0.5)


@pytest.fixture(scope="module")
def rehearsed_episode():
    """A retail episode under rehearsed dynamics: every response the policy's own."""
    return play(dynamics="rehearsed")


def test_every_token_has_the_role_of_whoever_wrote_it(tiny, mixed_episode):
    tok = AutoTokenizer.from_pretrained(tiny)
    episode, tools = mixed_episode
    sources = {c.id: c.source for c in episode.calls}
    assert {"real", "rehearsed", "rejected"} <= set(sources.values())
    opening = opening_length(episode)
    assert episode.messages[opening - 1]["role"] == "assistant"  # tau2's greeting: the env's, not the policy's
    tokens = episode_tokens(tok, episode.messages, tools, sources, opening)
    assert set(tokens.roles) <= set(TOKEN_ROLES) and len(tokens.ids) == len(tokens.roles)
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


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RoledTokens([1, 2, 3], ["action", "action"]), "roles has 2 entries for 3 ids"),
        (lambda: RoledTokens([1], ["action", "context"]), "roles has 2 entries for 1 ids"),
        (lambda: RoledTokens([1], ["actor"]), "roles holds unknown token roles ['actor']"),
        (lambda: row_tokens([1, 2], [ROLE_IDS["act"]], ROLE_IDS), "row_roles has 1 entries for 2 ids"),
        (lambda: row_tokens([1], [99], ROLE_IDS), "row_roles holds role numbers ['99']"),
        (lambda: row_tokens([1], [0], {"actor": 0}), "role_ids names unknown row roles ['actor']"),
        (lambda: role_weights(RoledTokens([1], ["action"]), {"action": float("nan")}), "weights['action']"),
        (lambda: role_weights(RoledTokens([1], ["action"]), {"action": "1"}), "weights['action']"),
        (lambda: trl_env_mask(RoledTokens([1], ["action"]), start=2), "start must be a whole number from 0 to 1"),
        (lambda: trl_echo(RoledTokens([1], ["action"]), start=-1), "start must be a whole number from 0 to 1"),
        (lambda: prime_rl_echo(RoledTokens([1], ["action"]), alpha=float("inf")), "alpha must be a finite number"),
        (lambda: prime_rl_echo(RoledTokens([1], ["action"]), alpha=0), "alpha must be a finite number above 0"),
    ],
)
def test_mismatched_or_unknown_roles_and_bad_weights_are_refused_naming_the_field(make, field):
    with pytest.raises(ValueError) as error:
        make()
    assert field in str(error.value)


def test_tokens_changed_after_they_were_made_are_checked_by_each_exporter():
    tokens = RoledTokens([1, 2], ["action", "env_output"])
    tokens.roles.pop()
    for export in (echo_mask, trl_env_mask, lambda t: role_weights(t, {"action": 1.0}), *ECHO_EXPORTERS.values()):
        with pytest.raises(ValueError, match="roles has 1 entries for 2 ids"):
            export(tokens)


def reused_id_call(order_id: str) -> dict:
    """An assistant action whose one tool call carries the id ``same``, whatever the turn."""
    call = {"id": "same", "type": "function", "function": {"name": "get_order_details", "arguments": {}}}
    call["function"]["arguments"]["order_id"] = order_id
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def test_a_policy_that_reuses_a_call_id_never_gets_a_rehearsal_exported_as_env_output(tiny):
    from envace_gym.routing import FidelityRouter

    tok = AutoTokenizer.from_pretrained(tiny)
    router = FidelityRouter(min_calls=1, explore=0.0)  # the first call goes to the world, the second is trusted
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="adaptive", router=router)
    env.reset(seed=0, options={"task_id": "5"})
    oracle = agents.load("oracle", env=env)
    for order_id in ("#W2378156", "#W2378157"):
        obs, *_ = env.step(reused_id_call(order_id))
        obs, *_ = env.step(oracle.act(obs))  # a rehearse turn: the second call is rehearsed, the first shadowed
    episode = env.unwrapped.episode
    assert [c.source for c in episode.calls] == ["real", "rehearsed"]
    assert len({c.id for c in episode.calls}) == 2  # the env gave the reused id a new one
    assert [m["tool_call_id"] for m in episode.messages if m["role"] == "tool"] == [c.id for c in episode.calls]
    sources = {c.id: c.source for c in episode.calls}
    opening = opening_length(episode)
    roles = [role for role, _ in spans(episode_tokens(tok, episode.messages, obs["tools"], sources, opening), tok)]
    assert roles.count("env_output") == 1 and roles.count("env_rehearsed") == 1
    assert roles.index("env_output") < roles.index("env_rehearsed")
    # a record with one id on both responses (made elsewhere): neither is taken for the environment's output
    same = [{**m, "tool_call_id": "same"} if m["role"] == "tool" else m for m in episode.messages]
    roles = [role for role, _ in spans(episode_tokens(tok, same, obs["tools"], {"same": "real"}, opening), tok)]
    assert "env_output" not in roles and "env_rehearsed" not in roles


#: each ECHO trainer's fields of environment output (1, or a weight, where its world-model loss trains)
ENV_OUTPUT_FIELDS = {
    "prime-rl": ("ce_weights", "echo_filter_mask"),
    "verl-recipe": ("aux_token_loss_mask",),
    "rllm": ("obs_mask",),
    "trl": ("tool_observation_mask",),
}


@pytest.mark.parametrize("dynamics", ["rehearsed", "mixed"])
@pytest.mark.parametrize("trainer", sorted(ECHO_EXPORTERS))
def test_no_echo_trainer_gets_a_rehearsed_token_as_environment_output(tiny, request, dynamics, trainer):
    tok = AutoTokenizer.from_pretrained(tiny)
    episode, tools = request.getfixturevalue(f"{dynamics}_episode")
    sources = {c.id: c.source for c in episode.calls}
    tokens = episode_tokens(tok, episode.messages, tools, sources, opening_length(episode))
    rehearsed = [k for k, role in enumerate(tokens.roles) if role == "env_rehearsed"]
    real = [k for k, role in enumerate(tokens.roles) if role == "env_output"]
    assert rehearsed and bool(real) == (dynamics == "mixed")
    start = 0 if trainer == "prime-rl" else tokens.roles.index("action")  # prime-rl's sample spans the prompt
    options = {"prime-rl": {}, "trl": {"start": start, "observation": True}}.get(trainer, {"start": start})
    exported = ECHO_EXPORTERS[trainer](tokens, **options)
    for name in ENV_OUTPUT_FIELDS[trainer]:
        values = exported[name]
        assert len(values) == len(tokens.ids) - start, name
        assert all(not values[k - start] for k in rehearsed), f"{name} exports a rehearsal as environment output"
        assert all(values[k - start] for k in real), f"{name} leaves out real environment output"
        assert sum(map(bool, values)) == len(real), name
    policy = exported.get("env_mask") or exported.get("action_mask")
    if policy is not None:  # the policy loss still trains the rehearsals as the policy's own tokens
        assert all(policy[k - start] == 1 for k in rehearsed) and all(policy[k - start] == 0 for k in real)


def test_trl_gets_tool_observation_mask_where_it_knows_the_field_or_when_asked():
    tokens = RoledTokens([1, 2, 3, 4], ["context", "action", "env_output", "env_rehearsed"])
    from trl import GRPOConfig

    knows = "tool_observation_loss_weight" in GRPOConfig.__dataclass_fields__
    assert trl_knows_tool_observation() is knows
    assert ("tool_observation_mask" in trl_echo(tokens, 1)) is knows
    assert trl_echo(tokens, 1, observation=True) == {"env_mask": [1, 0, 1], "tool_observation_mask": [0, 1, 0]}
    assert trl_echo(tokens, 1, observation=False) == {"env_mask": [1, 0, 1]}
    assert prime_rl_echo(tokens, alpha=0.25) == {
        "ce_weights": [0.0, 0.0, 0.25, 0.0],
        "echo_filter_mask": [False, False, True, False],
    }
