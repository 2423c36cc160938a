"""A web server on the loopback for fetch tests: pages, redirects, a large page and a slow one."""

import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from helpers import free_port

MARKER = "internal-only-marker"
ADMIN_PAGE = f"<html><body><p>admin console: {MARKER}</p></body></html>"


class Pages(BaseHTTPRequestHandler):
    """``/admin``: a page only the loopback should see; ``/to?url``: a 302 to ``url``; ``/big``: 3 MiB;
    ``/slow``: a page sent a byte a second."""

    def do_GET(self):
        if self.path.startswith("/to?"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/to?"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = {"/admin": ADMIN_PAGE.encode(), "/big": b"<p>" + b"x" * (3 << 20) + b"</p>"}.get(self.path)
        self.send_response(200 if body is not None or self.path == "/slow" else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        if self.path == "/slow":
            self.end_headers()
            try:
                for _ in range(30):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(1)
            except OSError:  # the client gave up
                pass
            return
        body = body or b"missing"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def web_pages():
    """Serve :class:`Pages` on 127.0.0.1; yields its ``http://127.0.0.1:PORT``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (a transport that fails at once), without "429" in it: bfcl-eval
    retries, for ever, a failed search whose error text holds 429."""
    while True:
        port = free_port()
        if "429" not in str(port):
            return port
