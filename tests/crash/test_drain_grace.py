"""Drain keeps to --grace with a command that ignores SIGTERM: the daemon exits 0 when the
grace is over, the command and its child are killed, the run is handed back. On both
stores (the `db` fixture)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from helpers import wait_until

from .conftest import Daemons, read, start_runs, statuses, timeline

pytestmark = pytest.mark.crash


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_past_the_grace_a_command_ignoring_sigterm_is_killed_and_the_run_handed_back(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    pidfile = tmp_path / "child.pid"
    (run_id,) = start_runs(
        db, "", [{"pidfile": str(pidfile)}], target="tests/crash/core_flows.py:deaf_command"
    )
    proc = daemons.start(db, "--grace", "0.5s")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip())
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    # A hang guard, not a timing claim (tests/test_drain_grace.py shows the bound on a
    # FakeClock): before, the daemon waited 6 s after the grace, the command 5 s more.
    assert proc.wait(timeout=30) == 0
    wait_until(lambda: not alive(child), timeout=5)  # killed with its group, not orphaned
    assert statuses(db)[run_id] == "running"  # handed back, nothing invented
    assert read(db, "SELECT error FROM runs WHERE run_id = ?", (run_id,)) == [(None,)]
    (released,) = timeline(db, run_id, "released")
    assert released["reason"] == "grace period over"
    assert "killed 1 command(s) still running" in daemons.log(proc)


def test_past_the_grace_a_python_step_stuck_in_its_body_does_not_keep_the_daemon_alive(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    """A body no interrupt reaches runs on a thread (the batch runner's pool on SQLite):
    that thread must not hold up the process's exit once the daemon has handed the run
    back (a ThreadPoolExecutor's threads are joined at exit: it would wait 120 s)."""
    marker = tmp_path / "entered"
    (run_id,) = start_runs(
        db, "", [{"marker": str(marker)}], target="tests/crash/core_flows.py:stuck_step"
    )
    proc = daemons.start(db, "--grace", "0.5s")
    wait_until(marker.exists)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0  # a hang guard: the body would sleep 120 s
    assert statuses(db)[run_id] == "running"  # handed back for another daemon
    (released,) = timeline(db, run_id, "released")
    assert released["reason"] == "grace period over"
