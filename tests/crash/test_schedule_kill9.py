"""A schedule under SIGKILL: a real daemon firing every second, killed at random points and
restarted, never fires a fire twice and never loses one."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flowctl.schedule.calendar import ScheduleSpec
from tests.crash.conftest import ROOT, Daemons
from tests.helpers import wait_until

PING = """name: ping
steps:
  - id: pong
    run: [echo, pong]
"""


def _fires(db: Path) -> list[int]:
    conn = sqlite3.connect(db, timeout=10)
    try:
        rows = conn.execute(
            "SELECT scheduled_at FROM runs WHERE schedule = 'beat' ORDER BY scheduled_at"
        )
        return [r[0] for r in rows]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


@pytest.mark.crash
def test_sigkilled_daemon_never_fires_twice_or_loses_a_fire(
    tmp_path: Path, daemons: Daemons
) -> None:
    """`--every 1s --missed all --overlap allow`: every fire from creation to the end must
    exist exactly once, whatever the kills interrupted (deciding, creating, recording)."""
    db = tmp_path / "f.db"
    ping = tmp_path / "ping.yaml"
    ping.write_text(PING)
    added = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "schedule", "add", "beat",
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
    conn = sqlite3.connect(db)
    try:
        spec = ScheduleSpec.from_json(conn.execute("SELECT spec FROM schedules").fetchone()[0])
    finally:
        conn.close()
    assert spec.anchor is not None
    first = round(spec.anchor.timestamp() * 1_000_000) + 1_000_000
    fires = _fires(db)
    assert fires == [first + k * 1_000_000 for k in range(len(fires))], f"seed {seed}"
