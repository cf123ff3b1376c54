"""A real `flowctl serve` process on an ephemeral port, and a tiny HTTP client for it."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import wait_until

TOKEN = "test-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


class Api:
    def __init__(self, port: int, token: str | None = TOKEN) -> None:
        self.port = port
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        token: str | bool | None = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            sent = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            h = dict(headers or {})
            chosen = self.token if token is True else token
            if isinstance(chosen, str):
                h["Authorization"] = f"Bearer {chosen}"
            if sent is not None:
                h.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=sent, headers=h)
            resp = conn.getresponse()
            return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()})
        finally:
            conn.close()


def start_serve(
    project: Path,
    db: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    token: str | None = TOKEN,
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `flowctl serve --port 0` in `project`; returns the process and its log."""
    log = project / f"serve-{len(list(project.glob('serve-*.log')))}.log"
    full_env = {k: v for k, v in os.environ.items() if k not in ("FLOWCTL_TOKEN", "FLOWCTL_DB")}
    full_env["PYTHONPATH"] = str(ROOT)
    if token is not None:
        full_env["FLOWCTL_TOKEN"] = token
    full_env.update(env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowctl", "--db", str(db), "serve", "--port", "0", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=str(project),
        )
    return proc, log


def port_of(proc: subprocess.Popen[bytes], log: Path) -> int:
    def bound() -> int | None:
        m = re.search(r"listening on http://[^:]+:(\d+)", log.read_text())
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {log.read_text()}")
        return None

    return int(wait_until(bound, timeout=30))
