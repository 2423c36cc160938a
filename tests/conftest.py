import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, os.path.dirname(__file__))

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random-init Qwen3-style model with a tokenizer trained on the spot."""
    from envace_gym.testing import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny"))


class FakeChatServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that answers with the queued ``replies``."""

    replies: list = []
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        message = type(self).replies.pop(0) if type(self).replies else {"role": "assistant", "content": "ok"}
        payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeChatServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    FakeChatServer.replies, FakeChatServer.requests = [], []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", httpd
    httpd.shutdown()
