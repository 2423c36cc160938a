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
from remote import Recorded, openenv_client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.sync.server import serve

import envace_gym  # noqa: F401
from envace_gym import agents
from envace_gym.integrations.openenv import access
from envace_gym.integrations.openenv.client import RemoteEnv
from envace_gym.integrations.openenv.protocol import jsonable
from envace_gym.integrations.openenv.server import EnvServer, serving

MOCK = "EnvACE/tau2-mock-v0"
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


@contextmanager
def fake_env_server(replies: list, tasks: dict):
    """``fake_server`` that also answers ``GET /tasks`` with ``tasks``, as ``run --url`` asks first."""
    todo = list(replies)

    def handler(ws):
        for _ in ws:
            reply = todo.pop(0)
            ws.send(reply if isinstance(reply, str) else json.dumps(reply))

    def process_request(connection, request):
        return connection.respond(200, json.dumps(tasks)) if request.path == "/tasks" else None

    with serve(handler, "127.0.0.1", 0, process_request=process_request) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        server.shutdown()


def test_run_url_ends_an_episode_whose_reply_breaks_the_contract_as_server_error_and_goes_on(tmp_path):

    from envace_gym.play.run import Run, RunConfig

    call = {"id": "c1", "name": "find", "arguments": {}, "requestor": "assistant", "source": "real", "error": None}
    bad = {
        "tool_calls of numbers": frame(info=INFO | {"tool_calls": [1, 2]}),
        "no dynamics": frame(info={k: v for k, v in INFO.items() if k != "dynamics"}),
        "turn as text": frame(info=INFO | {"turn": "3"}),
        "fidelity as text": frame(info=INFO | {"tool_calls": [call | {"fidelity": "high"}]}),
        "reward_info a list": frame(terminated=True, info=INFO | {"ended_by": "user_stop", "reward_info": [1]}),
        "ended without ended_by": frame(terminated=True),
        "error code a list": {"type": "error", "data": {"message": "no", "code": ["EXECUTION_ERROR"]}},
        "error message an object": {"type": "error", "data": {"message": {"a": 1}, "code": "EXECUTION_ERROR"}},
        "a well-formed error": {"type": "error", "data": {"message": "the env broke", "code": "EXECUTION_ERROR"}},
        "a state frame": {"type": "state", "data": {}},
    }
    last = frame(reward=1.0, terminated=True, info=INFO | {"turn": 1, "ended_by": "user_stop", "tool_calls": [call]})
    replies = [r for step in bad.values() for r in (frame(), step)] + [frame(), last]
    ids = [str(i) for i in range(len(bad) + 1)]
    tasks = {"env_id": "fake/v0", "split": None, "task_ids": ids, "dynamics": "real", "reward": None, "max_turns": 5}
    with fake_env_server(replies, tasks) as url:
        job = Run(RunConfig(None, url=url, agent="random", out=str(tmp_path / "r.jsonl")))
        job.agent = Recorded(["hello"] * len(ids))
        records = list(job)
    assert [r["task_id"] for r in records] == ids  # every episode played: none aborted the run
    for case, record in zip(bad, records):
        assert record["ended_by"] == "server_error" and url in record["error"], case
        assert (record["reward"], record["dynamics"], record["turns"], record["tool_calls"]) == (0.0, "real", 0, 0)
    assert (records[-1]["ended_by"], records[-1]["reward"], records[-1]["tool_calls"]) == ("user_stop", 1.0, 1)
    with fake_server([frame(info={})]) as url, pytest.raises(ConnectionError, match=url):  # a reset's info too
        RemoteEnv(url, timeout=10).reset(seed=0)


def finishes_within(seconds: float, fn) -> BaseException | None:
    """What ``fn()`` raised (None: nothing), asserting that it returned within ``seconds``."""
    outcome: list = []

    def run():
        try:
            fn()
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 (handed to the test)
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert outcome, f"still running after {seconds} s"
    print(f"returned after {time.monotonic() - started:.2f} s")
    return outcome[0]


@contextmanager
def raw_server(serve_one):
    """A loopback TCP server that runs ``serve_one(connection)`` for each connection, in a thread of its own."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(connection, stop), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def read_head(connection: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        head += connection.recv(65536)
    return head


def test_remote_env_bounds_each_whole_request_by_its_timeout_however_slowly_the_server_drips():
    import base64
    import hashlib

    def drip(connection, stop):  # a byte every 50 ms: no single read ever waits a second
        read_head(connection)
        with connection:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000:
                if stop.is_set():
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.05)

    def deaf(connection, stop):  # opens the WebSocket, then reads nothing more
        key = next(
            line.split(b":", 1)[1].strip()
            for line in read_head(connection).split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key")
        )
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        connection.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        stop.wait(30)
        connection.close()

    with raw_server(drip) as url:
        error = finishes_within(5, RemoteEnv(url, timeout=1).tasks)
        assert isinstance(error, ConnectionError) and f"at {url} did not answer GET /tasks within 1" in str(error)
    with raw_server(deaf) as url:  # a send the server never reads, 16 MB: held by no socket timeout
        env = RemoteEnv(url, timeout=1)
        error = finishes_within(5, lambda: env.reset(options={"task_id": "x" * 16_000_000}))
        assert isinstance(error, ConnectionError) and f"at {url} did not answer within 1" in str(error)


def test_remote_env_follows_no_redirect_and_sends_its_token_nowhere_else():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[dict] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(dict(self.headers))
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    target = f"http://127.0.0.1:{elsewhere.server_port}"

    class Redirect(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # as a WebSocket client asks

        def do_GET(self):
            self.send_response(307 if self.path.startswith("/tasks") else 302)
            self.send_header("Location", target + self.path if self.path.startswith("/tasks") else "/again")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    redirect = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    for server in (elsewhere, redirect):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{redirect.server_port}"
    try:
        env = RemoteEnv(url, timeout=5, token=TOKEN)
        with pytest.raises(ConnectionError, match=f"{url} answered HTTP 307, a redirect to '{target}/tasks'") as e:
            env.tasks()
        assert TOKEN not in str(e.value)
        with pytest.raises(ConnectionError, match=f"{url} answered HTTP 302, a redirect to '/again'") as e:
            env.reset(seed=0)  # the WebSocket's handshake: same-origin, and still not followed
        assert TOKEN not in str(e.value)
        assert seen == []  # the token went nowhere else
    finally:
        for server in (elsewhere, redirect):
            server.shutdown()
            server.server_close()


def test_a_request_carrying_the_token_more_than_once_is_refused_so_each_request_is_one_guess():
    with serving(EnvServer(MOCK, max_sessions=1, token=TOKEN)) as url:
        guesses = [("token", f"guess-{i:04d}") for i in range(600)] + [("token", TOKEN)]

        def status(query=(), **headers) -> int:
            headers = {k.replace("_", "-"): v for k, v in headers.items()}
            return requests.get(f"{url}/capacity", params=list(query), headers=headers, timeout=5).status_code

        assert status(guesses) == 403 and status([("token", TOKEN)] * 2) == 403
        assert status([("token", TOKEN)]) == status(X_EnvACE_Token=TOKEN) == 200
        assert status([("token", TOKEN)], Authorization=f"Bearer {TOKEN}") == 200  # two carriers, each once: right
        assert status([("token", "wrong-guess")], Authorization=f"Bearer {TOKEN}") == 403  # every value must be it
        assert status(Authorization=f"Bearer {TOKEN}", X_EnvACE_Token="wrong-guess") == 403
        assert handshake(url, f"/ws?token=guess-0000&token={TOKEN}") == 403
        for name, value in (("X-EnvACE-Token", TOKEN), ("Authorization", f"Bearer {TOKEN}")):
            with raw_http(url) as s:  # the same header twice
                s.sendall(
                    f"GET /capacity HTTP/1.1\r\nHost: 127.0.0.1\r\n{name}: wrong-guess-xx\r\n{name}: {value}\r\n"
                    "\r\n".encode()
                )
                reply = s.recv(4096)
                assert reply.startswith(b"HTTP/1.1 403") and TOKEN.encode() not in reply, name


def test_connections_without_a_request_take_no_authorised_clients_place_and_requests_in_progress_are_capped():
    ok = {"Authorization": f"Bearer {TOKEN}"}
    with serving(EnvServer(MOCK, max_sessions=1, max_connections=4, token=TOKEN)) as url:
        half_open = [raw_http(url) for _ in range(12)]
        for s in half_open:
            s.sendall(b"GET /capacity HTTP/1.1\r\nHo")  # never completed, never authenticated
        time.sleep(0.3)
        assert requests.get(f"{url}/capacity", headers=ok, timeout=5).ok  # not 503
        closed = 0
        for s in half_open:  # past the cap, the longest waiting were closed at once
            s.settimeout(0.5)
            try:
                closed += s.recv(4096) == b""
            except ConnectionResetError:  # closed with the request's bytes unread: a reset, not an end
                closed += 1
            except TimeoutError:
                pass
            s.close()
        assert closed >= 8, closed
        held = [raw_http(url) for _ in range(4)]
        for s in held:  # four authorised requests in progress: their bodies are not all there
            s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n".encode())
            s.sendall(b"Content-Length: 100\r\n\r\n{")
        time.sleep(0.3)
        assert requests.get(f"{url}/capacity", headers=ok, timeout=5).status_code == 503
        for s in held:
            s.close()
        time.sleep(0.3)
        assert requests.get(f"{url}/capacity", headers=ok, timeout=5).ok
        env = RemoteEnv(url, timeout=10, token=TOKEN)  # and a session
        assert env.reset(seed=0)[0]["role"] == "act"
        env.close()


def test_the_token_is_in_no_log_even_at_debug_level(caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    with serving(EnvServer(MOCK, max_sessions=1, token=TOKEN)) as url:
        env = RemoteEnv(url, timeout=10, token=TOKEN)
        env.tasks()
        env.reset(seed=0)
        env.step("hello")
        env.close()
    assert TOKEN not in caplog.text  # websockets logs a handshake's headers at DEBUG


def reset_frame(url: str, **data) -> dict:
    """The frame a fresh session answers one reset with."""
    with connect(url.replace("http", "ws") + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": data}))
        return json.loads(ws.recv(timeout=30))


def test_a_server_offers_its_default_dynamics_and_those_its_operator_names_and_replay_only_when_named():
    with serving(EnvServer(MOCK, max_sessions=1)) as url:  # a real-dynamics server
        for data in ({"dynamics": "replay"}, {"options": {"dynamics": "replay"}}, {"dynamics": "rehearsed"}):
            refused = reset_frame(url, seed=0, **data)
            assert refused["type"] == "error" and refused["data"]["code"] == "VALIDATION_ERROR", data
            assert refused["data"]["allowed_dynamics"] == ["real"] and "it offers real" in refused["data"]["message"]
        assert reset_frame(url, seed=0, dynamics="real")["type"] == "observation"
        with pytest.raises(ValueError, match="'replay' is not offered by this server; it offers real"):
            RemoteEnv(url, timeout=10, dynamics="replay").reset(seed=0)
    with serving(EnvServer(MOCK, max_sessions=1, allow_dynamics=("rehearsed,shadow",))) as url:
        assert reset_frame(url, seed=0, dynamics="rehearsed")["type"] == "observation"
        assert reset_frame(url, seed=0, dynamics="replay")["data"]["allowed_dynamics"] == [
            "real",
            "rehearsed",
            "shadow",
        ]
    with pytest.raises(ValueError, match="--allow-dynamics replay"):
        EnvServer(MOCK, dynamics="replay")
    with pytest.raises(ValueError, match="unknown dynamics 'dreamed'"):
        EnvServer(MOCK, allow_dynamics=("dreamed",))
    assert EnvServer(MOCK, dynamics="replay", allow_dynamics=("replay",)).dynamics == ("replay",)


SERP_KEY = "sk-serp-never-on-the-wire-0123456789"  # no "429" in it: bfcl-eval retries such errors for ever


def test_a_served_web_search_episode_carries_neither_the_search_key_nor_a_loopback_page(tmp_path, monkeypatch, capfd):
    from web_pages import MARKER, closed_port, web_pages

    from envace_gym.core.messages import format_tool_call
    from envace_gym.play.run import Run, RunConfig
    from envace_gym.registration import register_suite
    from envace_gym.suites.bfcl.web_search import WebSearchSuite

    monkeypatch.setenv("SERPAPI_API_KEY", SERP_KEY)
    suite = WebSearchSuite("web_search_base", backend="serpapi", serpapi_url=f"http://127.0.0.1:{closed_port()}")
    register_suite("EnvACETest/web-search-exposure-v0", suite, max_turns=None)
    with web_pages() as pages, serving(EnvServer("EnvACETest/web-search-exposure-v0", max_sessions=1)) as url:
        actions = [
            format_tool_call("search_engine_query", {"keywords": "who"}),  # its transport fails, quoting its URL
            format_tool_call("fetch_url_content", {"url": f"{pages}/admin"}),
            format_tool_call("fetch_url_content", {"url": f"{pages}/to?http://169.254.169.254/"}),
            "{'answer': 'none', 'context': 'none'}",
        ]
        frames = []
        with connect(url.replace("http", "ws") + "/ws", open_timeout=10) as ws:
            for message in [{"type": "reset", "data": {"seed": 0}}] + [
                {"type": "step", "data": {"text": a}} for a in actions
            ]:
                ws.send(json.dumps(message))
                frames.append(ws.recv(timeout=60))
        job = Run(RunConfig(None, url=url, agent="random", limit=1, out=str(tmp_path / "r.jsonl")))
        job.agent = Recorded(actions)
        (record,) = list(job)
    assert json.loads(frames[-1])["data"]["done"] and record["tool_calls"] == 3
    searched = json.loads(frames[1])["data"]["observation"]["messages"][-1]["content"]
    assert "api_key=[redacted]" in searched  # the transport's error, its key taken out
    refused = [json.loads(f)["data"]["observation"]["info"]["tool_calls"][0] for f in frames[2:4]]
    assert [c["error"] for c in refused] == ["execution_error", "execution_error"]
    out, err = capfd.readouterr()
    for text in (*frames, (tmp_path / "r.jsonl").read_text(), out, err):
        assert SERP_KEY not in text and MARKER not in text


def test_serve_takes_the_networks_a_fetch_may_reach_and_the_dynamics_it_offers(monkeypatch):
    from typer.testing import CliRunner
    from web_pages import ADMIN_PAGE, web_pages

    from envace_gym.cli import app
    from envace_gym.core.messages import format_tool_call
    from envace_gym.integrations.openenv import server as server_module

    monkeypatch.setenv("SERPAPI_API_KEY", SERP_KEY)
    made = []
    monkeypatch.setattr(server_module, "run_server", lambda server, host, port: made.append(server))
    serve = ["serve", "EnvACE/bfcl-web-search-no-snippet-v0", "--allow-fetch", "127.0.0.0/8"]
    result = CliRunner().invoke(app, [*serve, "--allow-dynamics", "rehearsed", "--allow-dynamics", "shadow"])
    assert result.exit_code == 0, result.output
    (server,) = made
    assert server.dynamics == ("real", "rehearsed", "shadow") and "dynamics real, rehearsed, shadow" in result.output
    with web_pages() as pages, serving(server) as url:
        env = RemoteEnv(url, timeout=60)
        env.reset(seed=0)
        obs, *_ = env.step(format_tool_call("fetch_url_content", {"url": f"{pages}/admin"}))
        env.close()
    assert json.loads(obs["messages"][-1]["content"])["content"] == ADMIN_PAGE  # the operator allowed the loopback
    refused = CliRunner().invoke(app, ["serve", MOCK, "--dynamics", "replay"])
    assert refused.exit_code == 2 and "--allow-dynamics replay" in refused.output
    refused = CliRunner().invoke(app, ["serve", MOCK, "--allow-fetch", "10.0.0.0/8"])
    assert refused.exit_code == 2 and "unexpected keyword argument 'allow_fetch'" in refused.output  # not a web env
