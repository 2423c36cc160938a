"""A policy that keeps every prompt and completion it makes (the rollout and adaptive tests read them)."""

from envace_gym.agents.prompting import Generation
from envace_gym.core.messages import format_tool_call

CALL = format_tool_call("get_order_details", {"order_id": "#W2378156"})


class Recorder:
    """Keeps every prompt and completion. Act turns are a tool call written as if sampled
    (the random model rarely writes one), so that every episode has rehearse turns."""

    def __init__(self, agent, call=CALL):
        self.agent, self.tokenizer, self.calls, self.call = agent, agent.tokenizer, [], call

    def generate_ids(self, prompts, stops):
        gens = self.agent.generate_ids(prompts, stops)
        for i, stop in enumerate(stops):
            if stop is None:
                ids = self.tokenizer(self.call + self.tokenizer.eos_token, add_special_tokens=False)["input_ids"]
                gens[i] = Generation(self.call, prompts[i], ids, [-0.5] * len(ids))
        self.calls += list(zip(prompts, gens))
        return gens
