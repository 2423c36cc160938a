"""Fakes the tests serve: an OpenAI-compatible chat endpoint (:class:`FakeChatServer`) that answers with
queued replies, or :class:`Raw` ones for servers that misbehave. The ``server`` fixture (tests/conftest.py)
runs it on a free loopback port."""

import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler


@dataclass
class Raw:
    """A reply sent as is: ``body`` after ``delay`` seconds, byte by byte every ``pace`` seconds if set."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    delay: float = 0.0
    pace: float = 0.0
    declare_length: bool = True  # else the body runs until the connection closes


class FakeChatServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that answers with the queued ``replies``: messages, or
    :class:`Raw` replies for servers that misbehave."""

    replies: list = []
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        reply = type(self).replies.pop(0) if type(self).replies else {"role": "assistant", "content": "ok"}
        if not isinstance(reply, Raw):
            payload = {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
            }
            reply = Raw(json.dumps(payload).encode())
        time.sleep(reply.delay)
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        if reply.declare_length:
            self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        chunks = [reply.body[i : i + 1] for i in range(len(reply.body))] if reply.pace else [reply.body]
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(reply.pace)
        except OSError:  # the client gave up
            pass

    def log_message(self, *args):
        pass
