"""The dynamics: who answers an episode's tool calls. One registry entry each; the env, the
rewards and the integrations ask an entry's attributes, never its name."""

from __future__ import annotations

from dataclasses import dataclass

ANSWERERS = ("world", "policy", "simulator", "recording", "either", "router")


@dataclass(frozen=True)
class Dynamics:
    """How an episode's tool calls are answered.

    ``answers``: who answers each call in the conversation: the ``world`` (its real tools), the
    ``policy`` (the acting agent, on a rehearse turn), a frozen ``simulator`` agent, a
    ``recording`` (recorded responses), ``either`` world or policy (a coin with ``p_real``
    per call), or a ``router`` (:class:`~envace_gym.routing.FidelityRouter`: the world, with the
    policy's rehearsal beside it, where the policy's estimated fidelity is low, else the policy).
    ``shadow``: the policy also rehearses each call the world answers, and its response is kept
    beside the real one with their fidelity. ``default_reward``: the reward
    an episode gets when none is given.
    """

    name: str
    answers: str
    default_reward: str
    shadow: bool = False

    def __post_init__(self):
        if self.answers not in ANSWERERS:
            raise ValueError(f"dynamics {self.name!r}: answers must be one of {ANSWERERS}, got {self.answers!r}")

    @property
    def asks_world(self) -> bool:
        """Whether the episode's world executes calls (a fork under any other dynamics needs none)."""
        return self.answers in ("world", "either", "router")

    @property
    def mixes(self) -> bool:
        """Whether an episode's calls are answered by the world and by the policy in turn (``mixed``,
        ``adaptive``): the world must then stay consistent with the rehearsed calls too."""
        return self.answers in ("either", "router")

    @property
    def rehearses(self) -> bool:
        """Whether the policy writes tool responses (rehearse turns), which a tool loop outside the env
        (TRL's ``environment_factory``) cannot drive."""
        return self.answers in ("policy", "either", "router") or self.shadow


#: Every dynamics by name, in the order the names are listed to users.
DYNAMICS: dict[str, Dynamics] = {
    d.name: d
    for d in (
        Dynamics("real", "world", "world"),
        Dynamics("rehearsed", "policy", "actions"),
        Dynamics("simulated", "simulator", "actions"),
        Dynamics("replay", "recording", "actions"),
        Dynamics("mixed", "either", "actions"),
        Dynamics("shadow", "world", "world", shadow=True),
        Dynamics("adaptive", "router", "actions"),
    )
}


def check_dynamics(name: str, simulator) -> Dynamics:
    """:func:`get`, refusing a dynamics that needs a simulator when none is given."""
    dynamics = get(name)
    if dynamics.answers == "simulator" and simulator is None:
        raise ValueError(f"dynamics={name!r} needs a simulator= agent to answer tool calls")
    return dynamics


def get(name: str) -> Dynamics:
    """The registered dynamics ``name``; an unknown one raises a ValueError listing the names."""
    dynamics = DYNAMICS.get(name) if isinstance(name, str) else None
    if dynamics is None:
        raise ValueError(f"unknown dynamics {name!r}; choose from {tuple(DYNAMICS)}")
    return dynamics
