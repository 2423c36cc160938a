"""The commands about envs: ``list`` the registered ids, an env's ``tasks``, and ``serve`` one over OpenEnv."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

import envace_gym
from envace_gym import registration
from envace_gym.cli.options import ENV_ARG, ENV_OPT, SPLIT, config_from, given_env
from envace_gym.cli.output import console, styled, user_errors
from envace_gym.integrations.openenv.config import ServeConfig
from envace_gym.registration import resolve_env


def list_envs(
    contains: Annotated[Optional[str], typer.Argument(help="Only the ids that contain this text.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array instead of a table.")] = False,
) -> None:
    """List the registered EnvACE ids with their task counts and splits."""
    with user_errors():
        rows = [describe(env_id) for env_id in envace_gym.ENV_IDS if not contains or contains in env_id]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table()
    table.add_column("id", no_wrap=True, min_width=max((len(r["id"]) for r in rows), default=2))
    for column in ("suite", "tasks", "splits (tasks; * default)"):
        table.add_column(column)
    for r in rows:
        splits = " · ".join(f"{name} {n}{'*' if name == r['default_split'] else ''}" for name, n in r["splits"].items())
        if "unavailable" in r:
            table.add_row(r["id"], "-", "-", f"unavailable: {r['unavailable']}")
        else:
            table.add_row(r["id"], r["suite"], str(r["tasks"]), splits or "none: all tasks")
    console.print(table)


def list_tasks(
    env_id: ENV_ARG = None,
    env: ENV_OPT = None,
    split: SPLIT = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array instead of a table.")] = False,
) -> None:
    """List an env's task ids (default split, or --split; 'all': every task) with a one-line summary."""
    with user_errors():
        env_id = resolve_env(given_env(env_id, env))
        suite, shown, ids = registration.suite(
            env_id, "default" if split is None else None if split == "all" else split
        )
        rows: list[dict[str, Any]] = []
        for task_id in ids:
            task = suite.task(task_id)
            rows.append(
                {
                    "task_id": task_id,
                    "summary": " ".join(suite.summary(task).split())[:100],
                    "gold_calls": len(suite.gold_calls(task)) if suite.has_gold(task) else None,
                }
            )
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"{env_id} · {shown or 'all'} · {len(rows)} tasks")
    for column in ("task_id", "gold calls", "summary"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["task_id"], "-" if r["gold_calls"] is None else str(r["gold_calls"]), r["summary"])
    console.print(table)


def describe(env_id: str) -> dict:
    """An id's suite, task count, default split and task count per split; for an id whose suite
    cannot load here (VitaBench without ``VITABENCH_ROOT``), why not."""
    try:
        suite, default_split, _ = registration.suite(env_id)
    except ImportError as e:
        return {"id": env_id, "suite": None, "tasks": None, "default_split": None, "splits": {}, "unavailable": str(e)}
    return {
        "id": env_id,
        "suite": suite.name,
        "tasks": len(suite.task_ids(None)),
        "default_split": default_split,
        "splits": {split: len(suite.task_ids(split)) for split in suite.splits()},
    }


def serve(options: dict, env_id: str | None, env: str | None) -> None:
    """Serve an env over OpenEnv's wire protocol: one env per WebSocket session (/ws)."""
    with user_errors():
        from envace_gym.integrations.openenv.access import is_loopback
        from envace_gym.integrations.openenv.server import EnvServer, run_server

        c = config_from(ServeConfig, {**options, "env_id": given_env(env_id, env)}, {"env_id": None})
        resolved = c.resolve(per_episode=True)
        env_id, kwargs, token = resolved.env_id, resolved.make_kwargs, c.token or os.environ.get("ENVACE_SERVE_TOKEN")
        if c.allow_fetch:
            kwargs["allow_fetch"] = tuple(c.allow_fetch)
        server = EnvServer(
            env_id,
            c.max_sessions,
            c.session_timeout or None,
            token=token,
            allow_origins=tuple(c.allow_origin or ()),
            max_connections=c.max_connections,
            allow_dynamics=tuple(c.allow_dynamics or ()),
            **kwargs,
        )
    host, port, max_sessions = c.host, c.port, c.max_sessions
    console.print(
        f"serving {env_id} on ws://{host}:{port}/ws (OpenEnv {server.protocol}); "
        f"dynamics {', '.join(server.dynamics)}; at most {max_sessions} sessions · Ctrl-C stops",
        soft_wrap=True,
    )
    if not is_loopback(host) and token is None:
        console.print(
            styled(
                "warning:",
                f" {host} is reachable from other machines and no --token is set: "
                "anyone who can reach the port can play episodes and make the env's real tool calls",
                "yellow",
            ),
            soft_wrap=True,
        )
    run_server(server, host, port)
