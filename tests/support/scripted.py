"""The oracle's replies on an episode, a token agent that plays them, and verl's server-manager interface
over a token agent (for the verl loop's tests and benchmark)."""

from __future__ import annotations

from envace_gym.agents.prompting import Generation, TokenAgent, completion


def oracle_replies(env_id: str, env_kwargs: dict, task_id: str, seed: int) -> list[str]:
    """The oracle's replies, act and rehearse turns, on one episode of ``env_id`` played in process."""
    import gymnasium as gym

    from envace_gym import agents

    env = gym.make(env_id, **env_kwargs)
    oracle, texts = agents.load("oracle", env=env), []
    obs, _ = env.reset(seed=seed, options={"task_id": task_id})
    done = False
    while not done:
        texts.append(oracle.act(obs))
        obs, _, terminated, truncated, _ = env.step(texts[-1])
        done = terminated or truncated
    env.close()
    return texts


class ScriptedAgent(TokenAgent):
    """Plays recorded replies in order as token ids, each closed by its turn's stop string or the end of
    sequence, with log-prob -0.5 per token."""

    def __init__(self, tokenizer, texts: list[str]):
        self.tokenizer, self.texts = tokenizer, iter(texts)

    def generate_ids(self, prompts: list[list[int]], stops: list[str | None]) -> list[Generation]:
        out = []
        for prompt, stop in zip(prompts, stops):
            text = next(self.texts)
            ids = self.tokenizer(text + (stop or ""), add_special_tokens=False)["input_ids"]
            ids += [] if stop else [self.tokenizer.eos_token_id]
            out.append(completion(self.tokenizer, {self.tokenizer.eos_token_id}, prompt, ids, [-0.5] * len(ids), stop))
        return out


class ServerManager:
    """verl's server-manager interface (``await generate(...)``, a ``TokenOutput``) over a token agent;
    the first stop string of the sampling parameters is the generation's."""

    def __init__(self, agent: TokenAgent):
        self.agent = agent

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        (gen,) = self.agent.generate_ids([prompt_ids], [(sampling_params.get("stop") or [None])[0]])
        return TokenOutput(token_ids=gen.completion_ids, log_probs=gen.logprobs)
