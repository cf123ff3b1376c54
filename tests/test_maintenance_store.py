"""Retention, vacuum and backup through the Store protocol, on both stores: prune deletes
only finished runs with everything they recorded, in bounded batches; vacuum reports
sizes; backup writes a checked SQLite copy of a file, and on a server database says in one
line to use pg_dump, writing nothing."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.retention import prune
from flowctl.errors import FlowctlError
from flowctl.model import RunStatus
from flowctl.store import Store, open_store

ROOT = Path(__file__).resolve().parent.parent

FLOWS = """
from flowctl import workflow


@workflow
def done(ctx, n=0):
    ctx.step("one", lambda: print("printed", n) or n)
    ctx.publish("progress", n)
    return n


@workflow
def waits(ctx):
    ctx.wait_signal("go")


@workflow
def boom(ctx):
    from flowctl.errors import NonRetryableError

    ctx.step("fail", lambda: (_ for _ in ()).throw(NonRetryableError("no")))
"""


def flowctl(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    db = store.location
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def recorded(store: Store, run_id: str) -> dict[str, int]:
    """How much a run has recorded, read through the store (0 everywhere once it is gone)."""
    return {
        "journal": len(store.journal(run_id)),
        "timeline": len(store.timeline(run_id)),
        "signals": len(store.pending_signals(run_id)),
        "published": len(store.published(run_id)),
        "output": len(store.output(run_id)),
        "outbox": sum(n.run_id == run_id for n in store.due_notifications(FAR)),
    }


FAR = FakeClock().now() + timedelta(days=10_000)


@pytest.fixture
def world(tmp_path: Path, store: Store, fake_clock: FakeClock) -> dict[str, str]:
    """One run of each fate: completed, dead, cancelled (with a signal), still waiting."""
    (tmp_path / "flows.py").write_text(FLOWS)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))

    def start(fn: str, **inp: object) -> str:
        return ops.start(
            store, f"{tmp_path / 'flows.py'}:{fn}", dict(inp), clock=fake_clock
        ).run.run_id

    ids = {
        "completed": start("done", n=1),
        "dead": start("boom"),
        "cancelled": start("waits"),
        "waiting": start("waits"),
    }
    daemon.tick()
    ops.send_signal(store, ids["cancelled"], "other", None, clock=fake_clock)
    ops.cancel(store, ids["cancelled"], clock=fake_clock)
    daemon.tick()
    fake_clock.advance(timedelta(days=60))
    return ids


def test_prune_deletes_finished_runs_with_everything_they_recorded(
    store: Store, world: dict[str, str], fake_clock: FakeClock
) -> None:
    before = {k: recorded(store, v) for k, v in world.items()}
    assert before["completed"]["output"] == 1 and before["completed"]["published"] == 1
    assert before["completed"]["outbox"] == 1 and before["completed"]["journal"] == 1
    cutoff = fake_clock.now() - timedelta(days=30)
    wanted = [RunStatus.COMPLETED, RunStatus.CANCELLED]
    listed = store.prunable_runs(wanted, cutoff, 10)
    assert {p.run_id for p in listed} == {world["completed"], world["cancelled"]}
    assert recorded(store, world["completed"]) == before["completed"]  # listing is a read
    gone = store.prune_runs(wanted, cutoff, 10)
    assert gone == listed  # the same runs, oldest first
    for name in ("completed", "cancelled"):
        assert set(recorded(store, world[name]).values()) == {0}
        assert store.runs_by_ids([world[name]]) == []
    for kept in ("dead", "waiting"):  # dead runs go only when asked; unfinished never
        assert recorded(store, world[kept]) == before[kept]
    assert [p.run_id for p in store.prune_runs([RunStatus.DEAD], cutoff, 10)] == [world["dead"]]
    assert store.count_by_status()[RunStatus.WAITING] == 1
    assert sum(store.count_by_status().values()) == 1


def test_prune_refuses_unfinished_statuses_and_keeps_recent_or_redriven_runs(
    store: Store, world: dict[str, str], fake_clock: FakeClock
) -> None:
    for bad in ([RunStatus.WAITING], [RunStatus.COMPLETED, RunStatus.RUNNING], []):
        with pytest.raises(FlowctlError, match="finished statuses only"):
            store.prune_runs(bad, fake_clock.now(), 10)
        with pytest.raises(FlowctlError, match="finished statuses only"):
            store.prunable_runs(bad, fake_clock.now(), 10)
    too_early = fake_clock.now() - timedelta(days=61)
    assert store.prune_runs([RunStatus.COMPLETED, RunStatus.DEAD], too_early, 10) == []
    # Listed, then redriven before the delete: the delete re-checks and keeps it.
    listed = store.prunable_runs([RunStatus.DEAD], fake_clock.now(), 10)
    assert [p.run_id for p in listed] == [world["dead"]]
    ops.redrive(store, world["dead"], clock=fake_clock)
    assert store.prune_runs([RunStatus.DEAD], fake_clock.now(), 10) == []
    assert store.get_run(world["dead"]).status is RunStatus.QUEUED


def test_retention_goes_in_bounded_batches_one_transaction_each(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=8, claim_batch=64))
    for i in range(25):
        ops.start(store, f"{tmp_path / 'flows.py'}:done", {"n": i}, clock=fake_clock)
    while daemon.tick():
        pass
    fake_clock.advance(timedelta(days=40))
    commits = store.commit_stats().commits
    gone = prune(store, [RunStatus.COMPLETED], fake_clock.now() - timedelta(days=30), batch=10)
    assert len(gone) == len({p.run_id for p in gone}) == 25
    assert store.commit_stats().commits - commits == 3  # 10 + 10 + 5
    assert sum(store.count_by_status().values()) == 0


def test_vacuum_reports_the_sizes_before_and_after(
    store: Store, world: dict[str, str], fake_clock: FakeClock
) -> None:
    store.prune_runs([RunStatus.COMPLETED, RunStatus.CANCELLED], fake_clock.now(), 10)
    before, after = store.vacuum()
    assert before > 0 and after > 0
    out = flowctl(store, "vacuum", "--json")
    assert out.returncode == 0, out.stderr
    assert store.get_run(world["waiting"]).status is RunStatus.WAITING  # nothing else changed


def test_backup_copies_a_file_and_names_pg_dump_for_a_server(
    store: Store, world: dict[str, str], tmp_path: Path
) -> None:
    dest = tmp_path / "copy.db"
    out = flowctl(store, "backup", str(dest))
    if not store.location.startswith("postgres"):
        assert out.returncode == 0, out.stderr
        with open_store(dest, create=False) as copy:
            assert copy.get_run(world["waiting"]).status is RunStatus.WAITING
        return
    assert out.returncode == 1
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("flowctl: flowctl backup copies a SQLite file;")
    assert "pg_dump" in line and store.path in line
    assert f":{urlsplit(store.location).password}@" not in line  # shown without its password
    assert not dest.exists()
    with pytest.raises(FlowctlError, match="pg_dump"):
        store.backup_to(dest)
    assert not dest.exists()


def test_a_backup_path_the_filesystem_refuses_is_one_line(
    store: Store, world: dict[str, str], tmp_path: Path
) -> None:
    out = flowctl(store, "backup", str(tmp_path / ("x" * 300)), "--force")
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith("flowctl: cannot write the backup at ") and "too long" in line
