"""The dynamics: who answers an episode's tool calls. One registry entry each; the env, the
rewards, the settings and the integrations ask an entry's attributes, never its name nor its
``answers`` (a guard in tests/core/test_import_graph.py keeps it so)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ANSWERERS = ("world", "policy", "simulator", "recording", "either", "router")
#: The ``gym.make`` keywords that some dynamics use and the others refuse (:meth:`Dynamics.check_keywords`).
PARAMETERS = ("p_real", "simulator", "recordings", "router")


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
    an episode gets when none is given. ``parameters``: the keywords of :data:`PARAMETERS` that it
    uses (``mixed``: ``p_real``; ``simulated``: ``simulator``; ``replay``: ``recordings``;
    ``adaptive``: ``router``); it refuses the others.
    """

    name: str
    answers: str
    default_reward: str
    shadow: bool = False
    parameters: tuple[str, ...] = ()

    def __post_init__(self):
        if self.answers not in ANSWERERS:
            raise ValueError(f"dynamics {self.name!r}: answers must be one of {ANSWERERS}, got {self.answers!r}")
        if not set(self.parameters) <= set(PARAMETERS):
            raise ValueError(f"dynamics {self.name!r}: parameters must be among {PARAMETERS}, got {self.parameters}")

    @property
    def all_real(self) -> bool:
        """Whether the world answers every call (a reward may read the world it leaves: ``world``)."""
        return self.answers == "world"

    @property
    def routes(self) -> bool:
        """Whether a :class:`~envace_gym.routing.FidelityRouter` chooses who answers each call (``adaptive``)."""
        return self.answers == "router"

    @property
    def replays(self) -> bool:
        """Whether recorded responses answer the calls (``replay``: from the gold, which a server offers
        only when named)."""
        return self.answers == "recording"

    @property
    def needs_simulator(self) -> bool:
        """Whether a frozen ``simulator`` agent answers the calls (``simulated``)."""
        return self.answers == "simulator"

    def who_answers(self, name: str, arguments: dict, rng, p_real: float, router) -> tuple[str, dict | None]:
        """Who answers one call: ``world``, ``policy`` (a rehearse turn), ``shadow`` (the world, the policy's
        rehearsal beside it: the router's choice), ``simulator`` or ``recording``; with the router's
        estimate and reason (None where no router chose). ``either`` draws a coin with ``p_real`` from ``rng``."""
        if self.answers == "either":
            return ("world" if rng.random() < p_real else "policy"), None
        if self.answers == "router":
            return router.route(name, arguments, rng)
        return self.answers, None

    def check_keywords(self, given: Mapping[str, Any]) -> None:
        """Refuse a keyword of :data:`PARAMETERS` that ``given`` sets (not None) and this dynamics does not
        use: a ValueError naming the keyword, this dynamics and the ones that use it."""
        for keyword in PARAMETERS:
            if given.get(keyword) is not None and keyword not in self.parameters:
                users = [d.name for d in DYNAMICS.values() if keyword in d.parameters]
                raise ValueError(
                    f"{keyword} applies to dynamics {' and '.join(users)} only, not {self.name!r}: "
                    f"leave it out, or choose dynamics {users[0]}"
                )

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
        Dynamics("simulated", "simulator", "actions", parameters=("simulator",)),
        Dynamics("replay", "recording", "actions", parameters=("recordings",)),
        Dynamics("mixed", "either", "actions", parameters=("p_real",)),
        Dynamics("shadow", "world", "world", shadow=True),
        Dynamics("adaptive", "router", "actions", parameters=("router",)),
    )
}


def check_dynamics(name: str, simulator) -> Dynamics:
    """:func:`get`, refusing a dynamics that needs a simulator when none is given."""
    dynamics = get(name)
    if dynamics.needs_simulator and simulator is None:
        raise ValueError(f"dynamics={name!r} needs a simulator= agent to answer tool calls")
    return dynamics


def get(name: str) -> Dynamics:
    """The registered dynamics ``name``; an unknown one raises a ValueError listing the names."""
    dynamics = DYNAMICS.get(name) if isinstance(name, str) else None
    if dynamics is None:
        raise ValueError(f"unknown dynamics {name!r}; choose from {tuple(DYNAMICS)}")
    return dynamics
