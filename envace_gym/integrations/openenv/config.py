"""``envace-gym serve``'s settings (:class:`ServeConfig`): the env's, as ``run`` takes them, and the
server's; each field's default and help are also the command's option's. Imports without the server."""

from __future__ import annotations

from dataclasses import dataclass

from envace_gym.config_fields import COUNT, Range, check_settings, setting
from envace_gym.env_settings import EnvSettings, shared


@dataclass
class ServeConfig(EnvSettings):
    """An env served over OpenEnv's wire protocol (:class:`~envace_gym.integrations.openenv.server.EnvServer`):
    :class:`~envace_gym.env_settings.EnvSettings` fix every session's env (``dynamics`` the default one),
    the rest the server's."""

    host: str = setting("127.0.0.1", "Interface to listen on.")
    port: int = setting(8000, "Port.")
    max_sessions: int = setting(8, "Concurrent sessions (one env each); more are refused with CAPACITY_REACHED.")
    session_timeout: float = setting(300.0, "Seconds a session may stay idle before it is closed (0: never).")
    token: str | None = shared("token")
    allow_origin: list[str] | None = setting(
        None,
        "A browser origin allowed to use the server besides loopback ones, e.g. https://lab.example (repeat; "
        "'*': any page).",
    )
    max_connections: int = setting(
        64, "Requests in progress at once (more are answered 503), and idle connections kept."
    )
    allow_dynamics: list[str] | None = setting(
        None,
        "Dynamics a client may reset with besides --dynamics, e.g. real,rehearsed (repeat or comma-separate; "
        "replay, which answers calls from the gold, is offered only when named).",
    )
    allow_fetch: list[str] | None = setting(
        None,
        "A network (CIDR, e.g. 10.0.0.0/8) the web-search envs' fetch_url_content may reach besides public "
        "addresses (repeat); loopback, private, link-local and reserved ones are refused otherwise.",
    )

    def __post_init__(self):
        super().__post_init__()
        check_settings(
            self,
            {COUNT: ("max_sessions", "max_connections"), Range(0): ("session_timeout",), Range(1, 65535): ("port",)},
        )
