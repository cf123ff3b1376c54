"""A local HTTP server that records what it is sent, for notification tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Hook:
    url: str
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    status: int = 200  # what the next requests are answered with


@contextmanager
def webhook_server(port: int = 0) -> Iterator[Hook]:
    """Serve on 127.0.0.1 (an ephemeral port unless one is given) until the block ends."""
    hook = Hook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size)
            hook.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(hook.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
