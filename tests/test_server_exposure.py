"""Who may use `envace-gym serve`, and how much of it: browser origins, rebound Host names, the token,
streamed bodies, slow connections, hostile frames, and what RemoteEnv accepts back."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from contextlib import contextmanager

import gymnasium as gym
import pytest
import requests
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.sync.server import serve

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.integrations.openenv import access
from envace_gym.integrations.openenv.client import RemoteEnv
from envace_gym.integrations.openenv.server import EnvServer, jsonable, serving
from tests.test_openenv import MOCK, openenv_client

TOKEN = "s3cret-token-for-tests"


def handshake(url: str, path: str = "/ws", **headers: str) -> int:
    """The HTTP status of a WebSocket handshake (101: a session was opened, and is closed again)."""
    try:
        with connect(url.replace("http", "ws") + path, additional_headers=headers, open_timeout=10):
            return 101
    except InvalidStatus as e:
        return e.response.status_code


def test_browser_origins_rebound_hosts_and_requests_without_the_token_are_refused_before_any_session():
    with serving(EnvServer(MOCK, max_sessions=2, token=TOKEN, allow_origins=("https://lab.example/",))) as url:
        ok = {"Authorization": f"Bearer {TOKEN}"}
        port = url.rsplit(":", 1)[1]
        for origin in ("http://evil.example", "null", "http://127.0.0.1.evil.example", "file://"):
            assert handshake(url, **ok, Origin=origin) == 403, origin
        with raw_http(url) as s:  # DNS rebinding: the page's own name in Host
            s.sendall(
                f"GET /ws HTTP/1.1\r\nHost: evil.example:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
            )
            assert s.recv(4096).startswith(b"HTTP/1.1 403")
        assert handshake(url) == 403 and handshake(url, Authorization="Bearer wrong-token-xx") == 403
        for good in (
            ok,
            {"X-EnvACE-Token": TOKEN},
            {"Origin": f"http://localhost:{port}", **ok},
            {"Origin": "https://lab.example", **ok},
        ):
            assert handshake(url, **good) == 101, good
        assert handshake(url, f"/ws?token={TOKEN}") == 101
        assert requests.get(f"{url}/capacity", timeout=5).status_code == 403
        assert requests.get(f"{url}/capacity", headers=ok, timeout=5).json()["active_sessions"] == 0
        assert requests.get(f"{url}/health", timeout=5).ok  # liveness probes need no token...
        assert (
            requests.get(f"{url}/health", headers={"Host": "evil.example"}, timeout=5).status_code == 403
        )  # ...or rebinding
        cross_site = requests.post(
            f"{url}/mcp?token={TOKEN}",
            headers={"Origin": "http://evil.example"},
            json={"jsonrpc": "2.0", "method": "tools/list", "id": 1},
            timeout=5,
        )
        assert cross_site.status_code == 403
        with pytest.raises(ConnectionError, match="403"):
            RemoteEnv(url, timeout=10).reset(seed=0)
        env = RemoteEnv(url, timeout=10, token=TOKEN)
        assert env.reset(seed=0)[0]["role"] == "act"
        env.close()
        episode = [{"reset": {"seed": 0}, "actions": [{"text": "hello"}]}]
        with pytest.raises(AssertionError, match="HTTP 403"):  # OpenEnv's own client: refused without the token...
            openenv_client(url, episode)
        assert openenv_client(url, episode, headers=ok)[0]["steps"][1]["observation"]["role"] == "act"  # ...as a header


def test_the_host_check_follows_the_bound_address():
    loop, wild = access.Access("127.0.0.1"), access.Access("0.0.0.0")
    assert loop.host_allowed("localhost:8000") and loop.host_allowed("[::1]:8000") and loop.host_allowed(None)
    assert not loop.host_allowed("10.0.0.5:8000") and not loop.host_allowed("attacker.example")
    assert wild.host_allowed("10.0.0.5:8000") and wild.host_allowed(f"{socket.gethostname()}:8000")
    assert not wild.host_allowed("attacker.example:8000")
    assert access.Access("127.0.0.1", ("*",)).origin_allowed("http://anything.example")
    with pytest.raises(ValueError, match="8 characters"):
        EnvServer(MOCK, token="short")


def raw_http(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_request_bodies_are_read_as_a_stream_and_refused_past_the_limit_whatever_their_length_says():
    with serving(EnvServer(MOCK, max_sessions=1, max_message_bytes=64_000)) as url:
        head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        with raw_http(url) as s:  # chunked, 160 MB offered: refused after about the limit, not after all of it
            s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            chunk, sent, answered = b"%x\r\n%s\r\n" % (65536, b"x" * 65536), 0, False
            s.setblocking(False)
            while sent < 160_000_000 and not answered:
                try:
                    sent += s.send(chunk)
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    time.sleep(0.01)
                answered = bool(select.select([s], [], [], 0)[0])
            s.setblocking(True)
            assert answered and sent < 32_000_000, sent
            assert s.recv(4096).startswith(b"HTTP/1.1 413")
        with raw_http(url) as s:  # a Content-Length over the limit: refused before a byte of body
            s.sendall(head + b"Content-Length: 999999999\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 413")
        with raw_http(url) as s:  # a Content-Length that under-states: only that much is read
            body = json.dumps({"jsonrpc": "2.0", "method": "tools/list", "id": 3}).encode()
            s.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(body) - 1, body + b"x" * 200_000))
            reply = s.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200") and b"-32700" in reply
        rpc = requests.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "id": 7}, timeout=5).json()
        assert rpc["id"] == 7 and rpc["result"]["tools"]


def test_binary_frames_and_json_nested_tens_of_thousands_deep_get_error_frames_and_the_session_lives_on():
    with (
        serving(EnvServer(MOCK, max_sessions=1)) as url,
        connect(url.replace("http", "ws") + "/ws", open_timeout=10, max_size=None) as ws,
    ):
        ws.send(b'{"type": "reset", "data": {}}')
        assert json.loads(ws.recv(timeout=30))["data"]["code"] == "INVALID_JSON"
        for deep in (
            "[" * 50_000 + "]" * 50_000,
            '{"type": "step", "data": {"message": ' + '{"a": ' * 30_000 + "1" + "}" * 30_001 + "}",
        ):
            ws.send(deep)
            frame = json.loads(ws.recv(timeout=30))
            assert frame["type"] == "error" and frame["data"]["code"] in ("INVALID_JSON", "EXECUTION_ERROR")
        ws.send('{"type": "reset", "data": {"seed": 0}}')
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"


def test_idle_and_half_sent_connections_are_closed_and_do_not_keep_clients_out(monkeypatch):
    monkeypatch.setattr(access, "HEAD_TIMEOUT", 1.0)
    with serving(EnvServer(MOCK, max_sessions=2, max_connections=16)) as url:
        idle = [raw_http(url) for _ in range(20)]
        for s in idle[:10]:  # half a request head
            s.sendall(b"GET /health HTTP/1.1\r\nHo")
        time.sleep(0.3)
        assert requests.get(f"{url}/health", timeout=5).ok  # connections without a request take no client's place
        time.sleep(1.5)
        for s in idle:
            s.settimeout(5)
            assert s.recv(4096) == b""  # the server closed it
            s.close()
        assert requests.get(f"{url}/health", timeout=5).json() == {"status": "healthy"}
        env = RemoteEnv(url, timeout=10)  # a WebSocket session is no half-sent head: it stays open
        env.reset(seed=0)
        time.sleep(1.5)
        assert env.step("hello")[0]["role"] == "act"
        env.close()


@contextmanager
def fake_server(replies: list):
    """A WebSocket server that answers each message with the next of ``replies`` (text, or data to dump)."""
    todo = list(replies)

    def handler(ws):
        for _ in ws:
            reply = todo.pop(0)
            ws.send(reply if isinstance(reply, str) else json.dumps(reply))

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        server.shutdown()


INFO = {"role": "act", "dynamics": "real", "task_id": "1", "turn": 0, "tool_calls": [], "rehearsal_errors": 0}


def frame(reward=None, **observation) -> dict:
    fields = {
        "role": "act",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "tool_call": None,
        "terminated": False,
        "truncated": False,
        "info": INFO,
    } | observation
    return {"type": "observation", "data": {"observation": fields, "reward": reward, "done": False}}


HOSTILE = {
    "NaN reward": json.dumps(frame()).replace('"reward": null', '"reward": NaN'),
    "Infinity reward": json.dumps(frame()).replace('"reward": null', '"reward": Infinity'),
    "1e999 reward": json.dumps(frame()).replace('"reward": null', '"reward": 1e999'),
    "terminated as text": frame(terminated="false"),
    "messages not a list": frame(messages={"role": "user"}),
    "a message not an object": frame(messages=["hi"]),
    "unknown role": frame(role="root"),
    "no observation": {"type": "observation", "data": {"reward": 1.0}},
    "observation a list": {"type": "observation", "data": {"observation": [1]}},
    "messages_from past the end": frame(messages_from=99),
    "deep": '{"type": "observation", "data": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "tools not schemas": frame(tools=[{"function": "x"}]),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_remote_env_checks_every_reply_a_bad_reset_is_a_connection_error_a_bad_step_ends_the_episode(case):
    with fake_server([HOSTILE[case]]) as url, pytest.raises(ConnectionError, match=url):
        RemoteEnv(url, timeout=10).reset(seed=0)
    with fake_server([frame(), HOSTILE[case]]) as url:
        env = RemoteEnv(url, timeout=10)
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("hello")
        assert (reward, terminated, truncated) == (0.0, True, False) and url in info["error"]
        assert obs["messages"] == [{"role": "user", "content": "hi"}]
    with fake_server([frame(), frame(reward=1)]) as url:  # an integer reward is a number
        env = RemoteEnv(url, timeout=10)
        env.reset(seed=0)
        assert env.step("hello")[1] == 1.0


def test_delta_sessions_send_what_is_new_so_a_steps_reply_does_not_grow_with_the_episode():
    env = gym.make(MOCK, max_turns=200)
    with serving(EnvServer(MOCK, max_sessions=2, max_turns=200)) as url:
        sizes = {}
        for mode in ("", "?observations=delta"):
            with connect(url.replace("http", "ws") + "/ws" + mode, max_size=None, open_timeout=10) as ws:
                ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
                ws.recv(timeout=30)
                sizes[mode] = []
                for step in range(30):
                    # a question the scripted user answers, so the conversation goes on
                    ws.send(json.dumps({"type": "step", "data": {"text": f"{step} Do you confirm? " + "x" * 20_000}}))
                    sizes[mode].append(len(ws.recv(timeout=30)))
        assert sizes[""][-1] > 10 * sizes[""][0]  # OpenEnv's full observation: the whole conversation each time
        assert max(sizes["?observations=delta"]) < 2 * sizes["?observations=delta"][0]
        remote = RemoteEnv(url, timeout=30)  # and RemoteEnv, on a delta session, still sees whole observations
        local = remote.reset(seed=0), env.reset(seed=0)
        assert jsonable(local[0]) == jsonable(local[1])
        for step in range(10):
            action = f"{step} Do you confirm? " + "y" * 1000
            assert jsonable(list(remote.step(action))) == jsonable(list(env.step(action)))
        remote.close()


def test_the_oracle_refuses_a_remote_env_in_one_line_since_gold_answers_never_cross_the_wire():
    with pytest.raises(ValueError, match="gold answers never cross the wire"):
        agents.load("oracle", env=RemoteEnv("http://127.0.0.1:9"))
