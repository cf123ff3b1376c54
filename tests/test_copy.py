"""`flowctl copy SRC DEST`: SQLite to PostgreSQL and back, every row kept as it was (ids,
deadlines, fences); refused into a database that holds runs or from one a daemon serves."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ids import HOST, proc_start
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import FirePlan, NewRun, NewSchedule, Store, open_store
from flowctl.store.copy import CopyRefusedError, copy_rows
from tests.conftest import ROOT

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
HELLO = str(ROOT / "examples/hello.py") + ":hello"
PING = str(ROOT / "workflows/ping.yaml")


def seed(store: Store, clock: FakeClock) -> dict[str, str]:
    """A little of everything: a completed run, a sleeper with a deadline and a buffered
    signal, a running run holding a lease with a published value, a schedule with history."""
    done = ops.start(store, PING, {}, clock=clock).run.run_id
    sleeper = ops.start(
        store, HELLO, {"name": "ana"}, clock=clock, deadline=clock.now() + timedelta(hours=1)
    ).run.run_id
    Daemon(store, clock, DaemonConfig(concurrency=1)).tick()  # ping completes, hello sleeps 2s
    store.send_signal(sleeper, "nudge", {"by": "ana"}, clock.now())
    store.create_run(NewRun("r_held", "held", "held.py:held", "python", {"k": [1, 2]}), clock.now())
    ((claim,), _) = store.claim_due(
        "host-z/1/1/0001", clock.now(), clock.now() + timedelta(seconds=15), 1, run_id="r_held"
    )
    store.record_entry(
        claim.lease,
        JournalEntry("r_held", 0, CallKind.NOW, "now", EntryState.DONE, value=1.5),
        clock.now(),
    )
    store.publish(claim.lease, "progress", {"pct": 40}, clock.now())
    store.add_schedule(
        NewSchedule(
            "nightly",
            PING,
            None,
            {},
            '{"every": 86400}',
            next_fire_at=clock.now() + timedelta(days=1),
        ),
        clock.now(),
    )
    store.trigger_schedule(
        "nightly",
        FirePlan(
            None,
            "manual",
            NewRun(
                "r_manual",
                "wf",
                "wf.py:wf",
                "python",
                {},
                schedule="nightly",
                run_at=clock.now() + timedelta(days=2),
            ),
        ),
        overlap="allow",
        now=clock.now(),
    )
    return {"done": done, "sleeper": sleeper}


def everything(store: Store) -> dict[str, Any]:
    """The whole database through the Store API (what every front end can see)."""
    runs = store.list_runs(limit=1000, order="run_at")
    ids = sorted(r.run_id for r in runs)
    return {
        "runs": sorted(runs, key=lambda r: r.run_id),
        "journal": {i: store.journal(i) for i in ids},
        "timeline": {i: store.timeline(i) for i in ids},
        "signals": {i: store.pending_signals(i) for i in ids},
        "published": {i: store.published(i) for i in ids},
        "versions": {i: store.versions_detail(i) for i in ids},
        "schedules": store.list_schedules(),
        "history": {s.name: store.schedule_history(s.name, 100) for s in store.list_schedules()},
    }


def copy(src: Store, dest: Store, clock: FakeClock) -> dict[str, int]:
    return copy_rows(src, dest, ops.plan_copy(src, dest, clock=clock))


def test_sqlite_to_postgresql_and_back_keeps_every_row(tmp_path: Path, pg_url: str) -> None:
    clock = FakeClock(T0)
    src = open_store(tmp_path / "one.db")
    pg = open_store(pg_url)
    back = open_store(tmp_path / "back.db")
    try:
        ids = seed(src, clock)
        before = everything(src)
        copied = copy(src, pg, clock)
        assert copied["runs"] == 4 and copied["journal"] == sum(
            len(j) for j in before["journal"].values()
        )
        assert everything(pg) == before
        assert copy(pg, back, clock) == copied
        assert everything(back) == before
        # The sleeper wakes on the fleet at the deadline it had, not before.
        sleeper = pg.get_run(ids["sleeper"])
        assert sleeper.status is RunStatus.SLEEPING and sleeper.run_at is not None
        daemon = Daemon(pg, clock, DaemonConfig(concurrency=1))
        clock.set(sleeper.run_at - timedelta(microseconds=1))
        assert daemon.tick() == 0
        clock.set(sleeper.run_at)
        assert daemon.tick() == 1
        done = pg.get_run(ids["sleeper"])
        assert done.status is RunStatus.COMPLETED and done.result == {
            "greeting": "hello, ana",
            "loud": "HELLO, ANA!",
        }
        # New rows on the fleet take new ids after the copied ones.
        pg.add_event(ids["done"], "note", {}, clock.now())
        assert pg.timeline(ids["done"])[-1].type == "note"
    finally:
        for s in (src, pg, back):
            s.close()


def test_a_copy_into_a_database_with_runs_is_refused_and_writes_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    clock = FakeClock(T0)
    src, pg = open_store(tmp_path / "one.db"), open_store(pg_url)
    try:
        seed(src, clock)
        pg.create_run(NewRun("r_there", "wf", "wf.py:wf", "python", {}), clock.now())
        with pytest.raises(CopyRefusedError, match=r"already holds 1 run\(s\): copy into an empty"):
            ops.plan_copy(src, pg, clock=clock)
        assert [r.run_id for r in pg.list_runs()] == ["r_there"]
    finally:
        src.close()
        pg.close()


def test_a_copy_from_a_database_a_daemon_serves_is_refused(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    src, dest = open_store(tmp_path / "one.db"), open_store(tmp_path / "two.db")
    try:
        owner = f"{HOST}/{os.getpid()}/{proc_start(os.getpid())}/0001"  # this process: live
        src.register_daemon(owner, HOST, os.getpid(), None, clock.now(), {})
        with pytest.raises(
            CopyRefusedError, match=f"a daemon is live on .*pid {os.getpid()} on {HOST}"
        ):
            ops.plan_copy(src, dest, clock=clock)
    finally:
        src.close()
        dest.close()


def test_a_refused_copy_from_a_served_database_creates_no_destination(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    src = open_store(tmp_path / "one.db")
    try:
        owner = f"{HOST}/{os.getpid()}/{proc_start(os.getpid())}/0001"  # this process: live
        src.register_daemon(owner, HOST, os.getpid(), None, clock.now(), {})
    finally:
        src.close()
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"}
    proc = subprocess.run(
        [sys.executable, "-m", "flowctl", "copy", "one.db", "new.db"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert proc.returncode != 0 and "a daemon is live on" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("new.db*"))


def test_the_command_prints_one_summary_line(tmp_path: Path, pg_url: str) -> None:
    clock = FakeClock(T0)
    src = open_store(tmp_path / "one.db")
    try:
        seed(src, clock)
    finally:
        src.close()
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"}
    proc = subprocess.run(
        [sys.executable, "-m", "flowctl", "copy", str(tmp_path / "one.db"), pg_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("copied 4 runs, ")
    assert "1 schedule, " in line and line.endswith(
        f"to {pg_url.replace(f':{urlsplit(pg_url).password}@', ':***@')}"
    )
    again = subprocess.run(
        [sys.executable, "-m", "flowctl", "copy", str(tmp_path / "one.db"), pg_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert again.returncode == 1 and "already holds 4 run(s)" in again.stderr
    assert "Traceback" not in again.stderr
