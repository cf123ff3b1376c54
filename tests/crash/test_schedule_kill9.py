"""A schedule under SIGKILL: a real daemon firing every second, killed at random points and
restarted, never fires a fire twice and never loses one. On a SQLite file and on a
PostgreSQL database (the `db` fixture)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flowctl.schedule.calendar import ScheduleSpec
from tests.crash.conftest import ROOT, Daemons, read
from tests.helpers import wait_until

PING = """name: ping
steps:
  - id: pong
    run: [echo, pong]
"""


def _fires(db: str) -> list[int]:
    """The schedule's fires so far (the schema exists: `schedule add` made it)."""
    rows = read(db, "SELECT scheduled_at FROM runs WHERE schedule = 'beat' ORDER BY scheduled_at")
    return [r[0] for r in rows]


@pytest.mark.crash
def test_sigkilled_daemon_never_fires_twice_or_loses_a_fire(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    """`--every 1s --missed all --overlap allow`: every fire from creation to the end must
    exist exactly once, whatever the kills interrupted (deciding, creating, recording)."""
    ping = tmp_path / "ping.yaml"
    ping.write_text(PING)
    added = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, "schedule", "add", "beat",
         "--every", "1s", "--missed", "all", "--overlap", "allow", str(ping)],
        capture_output=True, text=True, cwd=str(ROOT), check=False,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    for _ in range(3):
        proc = daemons.start(db)
        seen = len(_fires(db))
        wait_until(lambda n=seen: len(_fires(db)) > n, timeout=20)
        threading.Event().wait(rng.uniform(0.05, 1.2))  # a random point, reproducible by seed
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    proc = daemons.start(db)
    target = len(_fires(db)) + 2
    wait_until(lambda: len(_fires(db)) >= target, timeout=20)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ((spec_json,),) = read(db, "SELECT spec FROM schedules")
    spec = ScheduleSpec.from_json(spec_json)
    assert spec.anchor is not None
    first = round(spec.anchor.timestamp() * 1_000_000) + 1_000_000
    fires = _fires(db)
    assert fires == [first + k * 1_000_000 for k in range(len(fires))], f"seed {seed}"
