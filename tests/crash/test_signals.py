"""A real daemon: signals drain it, commands survive a signal to its group, wakes are on time,
and `flowctl status` reports it. On a SQLite file and on a PostgreSQL database (`db`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from .conftest import ROOT, Daemons, read, start_runs, statuses, timeline

pytestmark = pytest.mark.crash


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_daemons_group_drains_and_spares_the_running_command(
    db: str, tmp_path: Path, daemons: Daemons, signum: int
) -> None:
    marker = tmp_path / "marker"
    proc = daemons.start(db)
    (run_id,) = start_runs(db, "command", [{"marker": str(marker), "seconds": 0.5}])
    wait_until(lambda: marker.exists() and "started" in marker.read_text())
    os.killpg(proc.pid, signum)  # as Ctrl-C in a terminal or a service manager does
    assert proc.wait(timeout=30) == 0  # drained, then exited 0
    assert marker.read_text().split() == ["started", "done"]  # the command was not killed
    assert statuses(db)[run_id] == "completed"
    ((result,),) = read(db, "SELECT result FROM runs WHERE run_id = ?", (run_id,))
    assert json.loads(result) == {"exit_code": 0}
    assert read(db, "SELECT COUNT(*) FROM daemons") == [(0,)]  # unregistered


def test_a_second_signal_exits_at_once_and_a_new_daemon_takes_over(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    proc = daemons.start(db, "--lease", "60s", "--grace", "60s")
    (run_id,) = start_runs(db, "hold", [{"effects": str(effects), "seconds": 1.5}])
    wait_until(lambda: effects.exists() and effects.read_text())
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in daemons.log(proc))
    assert proc.poll() is None  # draining: the handler is still running
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 128 + signal.SIGTERM  # at once, not after the grace period
    assert statuses(db)[run_id] == "running"  # left to be reclaimed
    daemons.start(db)
    wait_until(lambda: statuses(db)[run_id] == "completed", timeout=20)
    assert timeline(db, run_id, "reclaimed")[0]["from"].split("/")[1] == str(proc.pid)


def test_a_real_daemon_wakes_sleepers_on_time_and_status_reports_it(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    proc = daemons.start(db)
    sleepers = start_runs(db, "nap", [{"seconds": 0.3 + 0.1 * i} for i in range(5)])
    wait_until(lambda: all(statuses(db)[r] == "completed" for r in sleepers), timeout=20)
    lates = []
    for run_id in sleepers:
        (woke,) = timeline(db, run_id, "woke")
        ((wake_at,),) = read(
            db, "SELECT wake_at FROM journal WHERE run_id = ? AND kind = 'sleep'", (run_id,)
        )
        assert woke["at_us"] >= wake_at
        lates.append(woke["late_ms"])
    # Tens of milliseconds, not a polling backstop's seconds (generous for a loaded CI box).
    assert sorted(lates)[len(lates) // 2] < 100, lates

    (held,) = start_runs(db, "hold", [{"effects": str(effects), "seconds": 30}])
    wait_until(lambda: statuses(db)[held] == "running")
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(ROOT),
    ).stdout
    report = json.loads(out)
    (d,) = report["daemons"]
    assert (d["pid"], d["alive"], d["runs_held"]) == (proc.pid, True, 1)
    assert d["started_at"].endswith("Z")
    assert report["wake_lateness"]["wakes"] == 5
    assert report["wake_lateness"]["p99_ms"] == max(lates)
    text = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "status"],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(ROOT),
    ).stdout
    assert f"pid {proc.pid}" in text and "holding 1 run(s)" in text and "p99" in text


def test_past_the_grace_period_the_daemon_stops_the_command_and_hands_the_run_back(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    pidfile = tmp_path / "command.pid"
    proc = daemons.start(db, "--grace", "1s")
    (run_id,) = start_runs(db, "stoppable", [{"pidfile": str(pidfile), "seconds": 60}])
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip())
    command_pid = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0  # drained as far as the grace period allowed: exit 0
    assert not os.path.exists(f"/proc/{command_pid}")  # the command was stopped, not orphaned
    assert statuses(db)[run_id] == "running"  # no invented timeout, failure or cancel
    ((error,),) = read(db, "SELECT error FROM runs WHERE run_id = ?", (run_id,))
    assert error is None
    (released,) = timeline(db, run_id, "released")
    assert released["reason"] == "grace period over"
    ((run_at, lease_until),) = read(
        db, "SELECT run_at, lease_until FROM runs WHERE run_id = ?", (run_id,)
    )
    assert run_at == lease_until == released["at_us"]  # due for another daemon right away
