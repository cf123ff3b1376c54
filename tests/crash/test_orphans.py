"""A command a step started does not outlive a daemon killed with SIGKILL, so the
reclaiming daemon's copy of the step never runs beside an orphan. On both stores."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.store import open_store
from tests.crash.conftest import Daemons
from tests.helpers import wait_until

LONG = """\
name: long
steps:
  - id: wait
    run: 'echo $$ >> pids.txt; exec sleep 30'
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.crash
def test_sigkill_of_the_daemon_takes_its_running_command_with_it(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    (tmp_path / "long.yaml").write_text(LONG)
    with open_store(db) as store:
        run_id = ops.start(
            store, "long.yaml", {}, clock=SystemClock(), cwd=str(tmp_path)
        ).run.run_id
    pids = tmp_path / "pids.txt"
    first = daemons.start(db)
    wait_until(lambda: pids.exists() and pids.read_text().strip(), timeout=15)
    command = int(pids.read_text().split()[0])
    assert _alive(command)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    wait_until(lambda: not _alive(command), timeout=5)
    # The restarted daemon reclaims the run at once and starts the step again: one copy runs.
    second = daemons.start(db)
    wait_until(lambda: len(pids.read_text().split()) == 2, timeout=15)
    again = int(pids.read_text().split()[1])
    assert again != command and _alive(again)
    with open_store(db) as store:
        assert ops.cancel(store, run_id, clock=SystemClock()).cancel_requested
    wait_until(lambda: not _alive(again), timeout=10)
    second.terminate()
    second.wait(10)
