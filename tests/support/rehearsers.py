"""Rehearsers of known quality, for measuring what the adaptive router scores."""

from envace_gym.agents.oracle import OracleAgent

WRONG = '{"corrupted": true}'


class CorruptOracle(OracleAgent):
    """The oracle, except that every rehearsal of ``tool`` is wrong."""

    name = "corrupt-oracle"

    def __init__(self, env, tool: str):
        super().__init__(env)
        self.tool = tool

    def act(self, obs: dict) -> str:
        if obs["role"] == "rehearse" and obs["tool_call"]["name"] == self.tool:
            return WRONG
        return super().act(obs)
