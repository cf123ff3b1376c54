"""A run cancelled inside a Python step, in a real daemon: it stays `running` (held, under a
kept lease) while the step runs, and becomes `cancelled` when its daemon dies, at the
reclaim, without its step running again. On both stores (the `db` fixture)."""

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


def flowctl(db: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=30,
    )


def lease_until(db: Path | str, run_id: str) -> int:
    return int(read(db, "SELECT lease_until FROM runs WHERE run_id = ?", (run_id,))[0][0])


def test_a_cancelled_run_is_held_while_its_step_runs_and_cancelled_when_its_daemon_dies(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    (run_id,) = start_runs(db, "hold", [{"effects": str(effects), "seconds": 60}])
    proc = daemons.start(db, "--lease", "1s", "--heartbeat", "0.1s")
    wait_until(lambda: effects.exists() and effects.read_text().strip())

    out = flowctl(db, "cancel", run_id)
    assert out.returncode == 0, out.stderr
    first_lease = lease_until(db, run_id)
    # The daemon keeps heartbeating it: its lease moves past the point it would have lapsed.
    wait_until(lambda: lease_until(db, run_id) > first_lease + 1_000_000, timeout=10)
    assert statuses(db)[run_id] == "running"
    status = json.loads(flowctl(db, "status", "--json").stdout)
    (d,) = status["daemons"]
    assert (d["pid"], d["runs_held"]) == (proc.pid, 1)
    assert [e["type"] for e in timeline(db, run_id)][-1] == "cancel requested"

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    daemons.start(db, "--lease", "1s", "--heartbeat", "0.1s")
    wait_until(lambda: statuses(db)[run_id] == "cancelled", timeout=15)
    ((error,),) = read(db, "SELECT error FROM runs WHERE run_id = ?", (run_id,))
    assert json.loads(error)["kind"] == "cancelled"
    assert len(effects.read_text().splitlines()) == 1  # the step did not run again
