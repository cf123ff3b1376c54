"""Notifications survive daemon crashes: real daemons, one killed with SIGKILL after the run
died and before its notification got through; the next daemon delivers it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import query, wait_until
from tests.notify_helpers import webhook_server
from tests.serve_helpers import ROOT

pytestmark = pytest.mark.crash

FLOWS = """\
from flowctl import NonRetryableError, workflow

@workflow
def doomed(ctx):
    raise NonRetryableError("no way")

@workflow
def napper(ctx):
    ctx.sleep("7d")
"""


def flowctl(project: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWCTL_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *args],
        capture_output=True,
        text=True,
        cwd=str(project),
        env=env,
        timeout=60,
    )


def daemon(project: Path, db: str, n: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWCTL_DB", None)
    with open(project / f"daemon-{n}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "flowctl", "--db", db, "daemon", "--log-level", "warning"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(project),
            env=env,
        )


def events(db: str, run_id: str, type_: str) -> list[dict[str, object]]:
    rows = query(
        db, "SELECT data FROM timeline WHERE run_id = ? AND type = ? ORDER BY seq", (run_id, type_)
    )
    return [json.loads(r[0]) for r in rows]


def test_a_daemon_killed_before_delivery_leaves_it_to_the_next(tmp_path: Path, db: str) -> None:
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "flows.py").write_text(FLOWS)
    out = tmp_path / "told.log"
    # A port nobody listens on yet: held by an unlistening socket, so tries are refused.
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    command = [
        sys.executable,
        "-c",
        f"import os; open({str(out)!r}, 'a').write(os.environ['FLOWCTL_RUN_ID'] + '\\n')",
    ]
    (project / "flowctl.toml").write_text(
        '[notify]\non = ["dead", "cancelled"]\n'
        f'webhook = "http://127.0.0.1:{port}/hook"\n'
        f"command = {json.dumps(command)}\n"
    )
    # --db names a database outside the project (a file in tmp_path, or a PostgreSQL URL):
    # the project's [notify] still applies
    started = flowctl(
        project / "sub", db, "run", f"{project}/flows.py:doomed", "--detach", "--json"
    )
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]

    first = daemon(project / "sub", db, 1)
    try:
        wait_until(lambda: events(db, run_id, "notify failed"), timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert query(db, "SELECT status FROM runs WHERE run_id = ?", (run_id,)) == [("dead",)]
    (state,) = query(db, "SELECT state FROM notifications WHERE run_id = ?", (run_id,))
    assert state == ("pending",)
    told_before = out.read_text().splitlines() if out.exists() else []
    assert told_before == [run_id]  # the command took it; the webhook did not

    # A second run ends while no daemon runs: cancelled from the CLI, recorded in the outbox.
    napping = flowctl(project, db, "run", f"{project}/flows.py:napper", "--detach", "--json")
    nap_id = json.loads(napping.stdout)["id"]
    assert flowctl(project, db, "cancel", nap_id).returncode == 0
    assert query(db, "SELECT state FROM notifications WHERE run_id = ?", (nap_id,)) == [
        ("pending",)
    ]

    held.close()
    with webhook_server(port) as hook:
        second = daemon(project / "sub", db, 2)
        try:
            wait_until(lambda: len(hook.received) >= 2, timeout=60)
            wait_until(
                lambda: (
                    query(db, "SELECT COUNT(*) FROM notifications WHERE state = 'delivered'")
                    == [(2,)]
                ),
                timeout=30,
            )
        finally:
            second.terminate()
            second.wait(timeout=30)
    assert sorted(h["x-flowctl-run"] for h, _ in hook.received) == sorted([run_id, nap_id])
    assert out.read_text().splitlines().count(run_id) == 1  # never told twice on the command
    assert [e["channel"] for e in events(db, run_id, "notified")] == ["command", "webhook"]
    assert second.returncode == 0
    for n in (1, 2):
        assert "Traceback" not in (project / "sub" / f"daemon-{n}.log").read_text()
