"""A policy that keeps every prompt and completion it makes (the rollout and adaptive tests read them)."""

from envace_gym.agents.prompting import Generation
from envace_gym.core.messages import format_tool_call

CALL = format_tool_call("get_order_details", {"order_id": "#W2378156"})


class Recorder:
    """Keeps every prompt and completion. Act turns are a tool call written as if sampled
    (the random model rarely writes one), so that every episode has rehearse turns; the model is
    not asked for them."""

    def __init__(self, agent, call=CALL):
        self.agent, self.tokenizer, self.calls, self.call = agent, agent.tokenizer, [], call

    def generate_ids(self, prompts, stops):
        """The model samples the rehearse rows (a stop string ends them); the act rows (none) are the call."""
        sampled = [i for i, stop in enumerate(stops) if stop is not None]
        gens = {}
        if sampled:
            rows = self.agent.generate_ids([prompts[i] for i in sampled], [stops[i] for i in sampled])
            gens = dict(zip(sampled, rows))
        ids = self.tokenizer(self.call + self.tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        for i, stop in enumerate(stops):
            if stop is None:
                gens[i] = Generation(self.call, prompts[i], ids, [-0.5] * len(ids))
        out = [gens[i] for i in range(len(prompts))]
        self.calls += list(zip(prompts, out))
        return out
