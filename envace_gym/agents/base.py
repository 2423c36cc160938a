"""The agent interface: observation in, action text out, for either role."""

from __future__ import annotations

from abc import ABC, abstractmethod


class Agent(ABC):
    """Maps an observation (``obs["role"]`` is ``act`` or ``rehearse``) to action text."""

    name = "agent"
    acts = True  # whether it can play the act role (a world model like knn cannot)
    runs_worlds = False  # whether its rehearsals execute calls on a (replayed) world, as the oracle's do

    @abstractmethod
    def act(self, obs: dict) -> str: ...

    def act_batch(self, observations: list[dict]) -> list[str]:
        return [self.act(obs) for obs in observations]

    def bind(self, env) -> Agent:
        """This agent playing in ``env`` (a fork of its env); an agent that reads no env is itself."""
        return self

    def reseed(self, seed: int) -> None:  # noqa: B027 (a hook: most agents have no randomness to seed)
        """Seed this agent's own randomness for the episode about to start (none: nothing to do)."""

    def episode_stats(self) -> dict:
        """This agent's fields of the current episode's run record (:class:`~envace_gym.play.records.RunRecord`),
        such as its private rehearsal's cost; none by default."""
        return {}


class RoleSplit(Agent):
    """Two agents as one: ``actor`` takes act turns, ``rehearser`` takes rehearse turns."""

    def __init__(self, actor: Agent, rehearser: Agent):
        self.actor, self.rehearser = actor, rehearser
        self.name = f"{actor.name}+{rehearser.name}"

    def act(self, obs: dict) -> str:
        return (self.rehearser if obs["role"] == "rehearse" else self.actor).act(obs)
