"""A stopped daemon's runs are taken over within about a lease, whatever the backlog
(issue 38, item 2). Before, lapsed leases were reclaimed only when a daemon was idle or
could not fill its slots: with thousands of runs queued, a SIGSTOPped daemon's 32 runs
were untouched after 30 s. Now each daemon has a reclaim pass of its own cadence
(flowctl.daemon.isolation) that takes lapsed runs whatever is queued.

Two real daemons at `--concurrency 16 --lease 2s --heartbeat 300ms` over thousands of queued
three-step runs (5,000), one frozen with SIGSTOP (never inside a write); both stores.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import wait_until

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.store import open_store
from tests.dbs import is_url

from .conftest import ROOT, Daemons, mid_write, read

pytestmark = pytest.mark.crash

FLOWS = "tests/crash/recover_flows.py"
FAST = ("--concurrency", "16", "--lease", "2s", "--heartbeat", "300ms")


def holds_turn(db: str) -> bool:
    """SQLite: someone holds `<db>-lock`, the turn daemons on one file take around each
    write (frozen holding it, it would hold the other up as the write lock would)."""
    if is_url(db):
        return False
    fd = os.open(db + "-lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def count(db: str, status: str) -> int:
    ((n,),) = read(db, "SELECT COUNT(*) FROM runs WHERE status = ?", (status,))
    return int(n)


def held_by(db: str, group: int) -> set[str]:
    """Runs running under a lease of a process of the daemon whose process group is
    `group` (the daemon itself, or its worker processes)."""
    rows = read(db, "SELECT run_id, lease_owner FROM runs WHERE status = 'running'")
    return {r for r, owner in rows if owner and _group(int(owner.split("/")[1])) == group}


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_a_frozen_daemons_runs_are_taken_over_while_thousands_are_queued(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    """One process per daemon, on both stores."""
    frozen_daemons_runs_are_taken_over(db, tmp_path, daemons, "1")


def test_a_frozen_daemons_runs_are_taken_over_under_a_backlog_with_worker_processes(
    tmp_path: Path, daemons: Daemons
) -> None:
    """Worker processes, SQLite's default (a PostgreSQL daemon is one process unless told)."""
    frozen_daemons_runs_are_taken_over(str(tmp_path / "flowctl.db"), tmp_path, daemons, "2")


def frozen_daemons_runs_are_taken_over(
    db: str, tmp_path: Path, daemons: Daemons, workers: str
) -> None:
    effects = tmp_path / "effects.log"
    with open_store(db) as store:
        ops.start_many(
            store,
            f"{FLOWS}:three",
            [{"effects": str(effects)}] * 5000,
            clock=SystemClock(),
            cwd=str(ROOT),
        )
    args = (*FAST, "--workers", workers)
    frozen, other = daemons.start(db, *args), daemons.start(db, *args)
    wait_until(lambda: count(db, "completed") >= 50, timeout=60)
    while True:  # freeze it mid-run, never inside a write (that would hold the other up)
        os.killpg(frozen.pid, signal.SIGSTOP)
        if not (mid_write(db, frozen.pid) or holds_turn(db)):
            break
        os.killpg(frozen.pid, signal.SIGCONT)
        time.sleep(0.01)
    held = held_by(db, frozen.pid)
    assert held  # it was running some when it froze

    # Taken over: each claimed again by someone else (or finished), the frozen lease fenced.
    # A generous bound: about a lease plus the isolated workers' start on a loaded machine.
    wait_until(lambda: not (held & held_by(db, frozen.pid)), timeout=120)
    assert count(db, "queued") > 1000  # while the backlog was still there
    ids = ", ".join(f"'{r}'" for r in sorted(held))
    reclaimed = read(
        db,
        f"SELECT COUNT(DISTINCT run_id) FROM timeline WHERE type = 'reclaimed' AND run_id IN ({ids})",
    )
    assert reclaimed == [(len(held),)]
    assert other.poll() is None
    os.killpg(frozen.pid, signal.SIGCONT)
