"""Run the app with uvicorn on a socket bound here, so `--port 0` works and the line we
print names the port actually bound."""

from __future__ import annotations

import socket
import sys

import uvicorn

from flowctl.errors import UsageError
from flowctl.serve.app import build_app
from flowctl.serve.routes import Served


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (IPv6 when host is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except (OSError, OverflowError) as e:
        sock.close()
        detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(f"cannot listen on {host}:{port}: {detail}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run(served: Served, host: str, port: int, *, log_level: str = "warning") -> None:
    """Serve until SIGINT or SIGTERM (uvicorn's own handlers stop it cleanly)."""
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    auth = "bearer token" if served.token is not None else "NO AUTH (loopback only)"
    print(
        f"flowctl serve: listening on http://{shown}:{bound} ({auth})", file=sys.stderr, flush=True
    )
    config = uvicorn.Config(
        build_app(served),
        log_level=log_level,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        limit_concurrency=256,
        timeout_keep_alive=5,
    )
    uvicorn.Server(config).run(sockets=[sock])
