"""A daemon killed with SIGKILL is shown dead once its heartbeat lapses, and `daemon stop`
then says no daemon is running, forgets it and succeeds; a live daemon beside it is still
shown live. On both stores; each daemon on a FLOWCTL_HOST of its own, so only its
heartbeat can say it is alive (no pid to check from here).

Every check reads `flowctl status --json` / `daemon stop` as a user runs them, and the
database as an independent observer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from .conftest import ROOT, Daemons, read, registered, start_runs

pytestmark = pytest.mark.crash

ARGS = ("--lease", "2s", "--heartbeat", "300ms", "--concurrency", "2")


def flowctl(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *args],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        check=False,
    )


def shown(db: str) -> dict[int, dict[str, Any]]:
    out = flowctl(db, "status", "--json")
    assert out.returncode == 0, out.stderr
    return {d["pid"]: d for d in json.loads(out.stdout)["daemons"]}


def test_a_killed_daemon_is_shown_dead_and_daemon_stop_forgets_it(
    db: str, daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_runs(db, "hop", [])  # the database, made before anyone reads it
    procs = []
    for host in ("host-a", "host-b"):
        monkeypatch.setenv("FLOWCTL_HOST", host)  # inherited by that daemon only
        procs.append(daemons.start(db, *ARGS))
    monkeypatch.delenv("FLOWCTL_HOST")
    a, b = procs
    wait_until(lambda: registered(db) == {a.pid, b.pid}, timeout=60)
    assert {pid: d["alive"] for pid, d in shown(db).items()} == {a.pid: True, b.pid: True}
    os.killpg(a.pid, signal.SIGKILL)
    a.wait()
    # Dead once its lease (2 s) has passed since its last beat; b beats on.
    wait_until(lambda: not shown(db)[a.pid]["alive"], timeout=30)
    now = shown(db)
    assert now[b.pid]["alive"] is True
    text = flowctl(db, "status").stdout
    assert f"daemon    pid {a.pid} on host-a: not running, last seen " in text
    assert f"daemon    pid {b.pid} on host-b since " in text
    # b runs elsewhere (as far as this host can tell): stop it there; a is forgotten.
    mixed = flowctl(db, "daemon", "stop", "--json")
    assert mixed.returncode == 1, mixed.stderr
    assert {(d["pid"], d["live"], d["stopped"]) for d in json.loads(mixed.stdout)} == {
        (a.pid, False, True),
        (b.pid, True, False),
    }
    assert registered(db) == {b.pid}
    os.killpg(b.pid, signal.SIGKILL)
    b.wait()
    wait_until(lambda: not shown(db)[b.pid]["alive"], timeout=30)
    stop = flowctl(db, "daemon", "stop")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.splitlines()[0].startswith("no daemon is running on ")
    assert f"daemon pid {b.pid} on host-b: not running, last seen " in stop.stdout
    assert read(db, "SELECT COUNT(*) FROM daemons") == [(0,)]
    assert "not running (start one" in flowctl(db, "status").stdout


def test_a_killed_daemon_on_this_host_is_dead_at_once_and_stop_exits_0(
    db: str, daemons: Daemons, tmp_path: Path
) -> None:
    start_runs(db, "hop", [])
    proc = daemons.start(db, *ARGS)
    wait_until(lambda: registered(db) == {proc.pid}, timeout=60)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert shown(db)[proc.pid]["alive"] is False  # its pid is gone: no lease to wait for
    stop = flowctl(db, "daemon", "stop")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith("no daemon is running on ")
    assert registered(db) == set()
