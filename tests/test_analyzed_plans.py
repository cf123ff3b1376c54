"""The query plans hold on a database ANALYZEd while nearly every run was finished (issue
14, item 9).

flowctl never runs ANALYZE, but an operator may (`sqlite3 flowctl.db ANALYZE`, or `PRAGMA
optimize`, which SQLite recommends for long-lived databases). sqlite_stat1 then tells the
planner how many rows one value of an index's first column holds on average, not which
value: ANALYZEd at a quiet moment, when a million runs were all completed, `status =
'running'` looks like a million rows, and so does `key = ?` (every run without a key has
the one value NULL). A seek through the index then looked dearer than a scan of the whole
table; the daemon's liveness pass scanned every run, which was the 43% drop of
benchmarks/scaling.py at a million finished runs (its seed ANALYZEs).

So the checks of tests/test_query_plans.py run again here with such statistics: no
statement scans or sorts what grows, and the daemon's hot path does no more SQLite work
beside 20,000 finished runs than beside none.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store
from tests import test_query_plans
from tests.test_query_plans import (
    FLOWS,
    Captured,
    add_finished,
    daemon_work,
    exercise,
    seed_runs,
    violations,
)

captured = test_query_plans.captured  # the fixture: every statement on every connection


def analyze(db: Path) -> None:
    conn = sqlite3.connect(str(db))
    try:
        conn.execute("ANALYZE")
        conn.commit()
        (rows,) = conn.execute("SELECT COUNT(*) FROM sqlite_stat1 WHERE tbl = 'runs'").fetchone()
        assert rows > 0, "ANALYZE wrote no statistics for runs"
    finally:
        conn.close()


@pytest.fixture(scope="module")
def analyzed_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, FakeClock]:
    """20,000 completed runs and nothing else, ANALYZEd; then runs of every status."""
    tmp = tmp_path_factory.mktemp("analyzed")
    flows = tmp / "flows.py"
    flows.write_text(FLOWS)
    db = tmp / "template.db"
    clock = FakeClock()
    with Store(db) as store:
        ops.start(store, f"{flows}:quick", {}, clock=clock)
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    add_finished(db, 20_000)
    analyze(db)
    seed_runs(db, str(flows), clock)
    return db, str(flows), clock


@pytest.fixture
def analyzed(
    analyzed_template: tuple[Path, str, FakeClock], tmp_path: Path
) -> tuple[Path, str, FakeClock]:
    """A copy of the template for one test (the tests write to it), with its own clock
    (the template's time: the runs' leases and wake times are relative to it)."""
    template, flows, clock = analyzed_template
    db = tmp_path / "analyzed.db"
    copy(template, db)
    return db, flows, FakeClock(clock.now())


def copy(src: Path, dst: Path) -> None:
    a, b = sqlite3.connect(str(src)), sqlite3.connect(str(dst))
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()


def test_the_statistics_say_one_status_holds_every_run(
    analyzed: tuple[Path, str, FakeClock],
) -> None:
    """The set-up is the one that misled the planner: per status and per key, the average
    is every run."""
    db, _, _ = analyzed
    conn = sqlite3.connect(str(db))
    try:
        stats = dict(conn.execute("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'runs'"))
    finally:
        conn.close()
    total, per_status = map(int, stats["runs_due"].split()[:2])
    assert total == per_status == 20_001
    # The key index holds only the runs that have a key (migration 19; before, every run
    # was in it with the one value NULL, and `key = ?` looked like every run): none here.
    assert [s for s in stats.values() if s.split() == ["20001", "20001"]] == [], stats
    assert "runs_key" not in stats or int(stats["runs_key"].split()[0]) == 0, stats


def test_no_query_scans_a_growing_table_after_analyze(
    monkeypatch: pytest.MonkeyPatch, analyzed: tuple[Path, str, FakeClock], captured: Captured
) -> None:
    db, _, clock = analyzed
    exercise(monkeypatch, db, clock)
    assert len(captured.statements) > 60, "the exercise ran too few distinct statements"
    bad = violations(db, captured.statements)
    assert bad == [], "\n".join(bad)


def test_the_daemons_hot_queries_do_not_grow_after_analyze(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The daemon's work beside 20,000 finished runs, ANALYZEd while they were all there
    was, is that beside none (a scan of them adds well over 20,000 instructions a tick)."""
    empty = daemon_work(monkeypatch, tmp_path, 0, after_seed=analyze)
    full = daemon_work(monkeypatch, tmp_path, 20_000, after_seed=analyze)
    assert empty > 10_000
    assert full <= empty * 1.1, (empty, full)


def without_statistics(db: Path) -> Path:
    """A copy of db whose sqlite_stat1 is empty: the plans flowctl's own files get."""
    plain = db.with_name("plain.db")
    copy(db, plain)
    conn = sqlite3.connect(str(plain))
    try:
        conn.execute("DELETE FROM sqlite_stat1")
        conn.commit()
    finally:
        conn.close()
    return plain


def test_the_store_seeks_few_runs_among_many_after_analyze(
    analyzed: tuple[Path, str, FakeClock], captured: Captured
) -> None:
    """Reads and writes the exercise does not reach (a dead owner's leases, held counts,
    cancel and pause requests, an idempotency key, metrics, retention): with the
    statistics, none has a plan worse than it has without them."""
    db, flows, clock = analyzed
    now = clock.now()
    with Store(db) as store:
        running = [r.run_id for r in store.list_runs(statuses=[RunStatus.RUNNING])]
        assert running
        owners = store.running_owners()
        assert owners
        assert store.held_count(owners[0]) > 0
        store.expire_owner("gone/1/1/0000", now)
        store.interrupts_requested(running[:3])
        ops.start(store, f"{flows}:quick", {}, key="once", clock=clock)
        again = ops.start(store, f"{flows}:quick", {}, key="once", clock=clock)
        assert store.get_run_by_key("once") is not None and again is not None
        store.runs_due_between(now - timedelta(hours=1), now, limit=10)
        store.due_ahead(running[0], now)
        store.agenda_runs(now + timedelta(days=1), 50)
        store.metrics_snapshot([0.01, 0.1], [0.01, 0.1])
        store.prunable_runs([RunStatus.COMPLETED], now - timedelta(days=1), 10)
        store.prune_runs([RunStatus.DEAD], now - timedelta(days=1), 10)
    assert len(captured.statements) > 15
    plain = set(violations(without_statistics(db), captured.statements))
    worse = [v for v in violations(db, captured.statements) if v not in plain]
    assert worse == [], "\n".join(worse)
