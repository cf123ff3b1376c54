"""A daemon SIGKILLed in the middle of a delivery: its receiver never answered. The next
daemon sees the claimer is gone and delivers at once, without waiting out the try's budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import query, wait_until
from tests.serve_helpers import ROOT

pytestmark = pytest.mark.crash

FLOWS = """\
from flowctl import NonRetryableError, workflow

@workflow
def doomed(ctx):
    raise NonRetryableError("no way")
"""


def run_flowctl(cwd: Path, db: str, *args: str, popen: bool = False) -> object:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWCTL_DB", None)
    argv = [sys.executable, "-m", "flowctl", "--db", db, *args]
    if popen:
        with open(cwd / f"daemon-{len(list(cwd.glob('daemon-*.log')))}.log", "wb") as log:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(cwd), env=env
            )
    return subprocess.run(argv, capture_output=True, text=True, cwd=str(cwd), env=env, timeout=60)


def test_the_next_daemon_delivers_what_a_killed_one_was_sending(tmp_path: Path, db: str) -> None:
    received: list[str] = []
    hang = threading.Event()  # set: the receiver holds the request without answering
    hang.set()
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if hang.is_set():
                hang.clear()  # only the first request hangs
                received.append("hung")
                release.wait(60)
                return
            received.append(json.loads(body)["id"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "flows.py").write_text(FLOWS)
        (tmp_path / "flowctl.toml").write_text(
            f'[notify]\nwebhook = "http://127.0.0.1:{server.server_address[1]}/h"\n'
            'timeout = "10m"\n'  # the killed try's budget: far longer than this test waits
        )
        started = run_flowctl(tmp_path, db, "run", "flows.py:doomed", "--detach", "--json")
        run_id = json.loads(started.stdout)["id"]  # type: ignore[attr-defined]
        first = run_flowctl(tmp_path, db, "daemon", popen=True)
        assert isinstance(first, subprocess.Popen)
        try:
            wait_until(lambda: received == ["hung"], timeout=60)  # mid-delivery
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        rows = query(db, "SELECT state, tries, claimed_by FROM notifications")
        assert [(s, t) for s, t, _ in rows] == [("pending", 1)] and rows[0][2]
        second = run_flowctl(tmp_path, db, "daemon", popen=True)
        assert isinstance(second, subprocess.Popen)
        try:
            wait_until(lambda: run_id in received, timeout=60)
            wait_until(
                lambda: query(db, "SELECT state, tries FROM notifications") == [("delivered", 2)],
                timeout=30,
            )
        finally:
            second.terminate()
            second.wait(timeout=30)
        (notified,) = query(
            db, "SELECT data FROM timeline WHERE run_id = ? AND type = 'notified'", (run_id,)
        )
        assert json.loads(notified[0]) == {"channel": "webhook", "event": "dead", "try": 2}
    finally:
        release.set()
        server.shutdown()
        server.server_close()
