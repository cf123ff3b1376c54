"""Disk per sleeping run (issue 14, item 6), migration 18: what is no longer stored reads
back the same.

- A run's plain `created` event ({"attempt": 1} at created_at, its first event) is implied:
  no row holds it, yet every timeline read (whole, newest N, a page at any skip, the last
  event of a type) and a copy show it where the stored one was. One that says more (a
  later start) is still stored, and is not shown twice.
- The claims and reclaims the metrics count are kept by triggers, and go down with the
  events of a pruned run as a COUNT(*) of them did.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus, TimelineEvent
from flowctl.store.copy import copy_rows, plan_copy
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """\
from flowctl import workflow

@workflow
def nap(ctx):
    ctx.step("a", lambda: 1)
    ctx.sleep(3600)
    return ctx.step("b", lambda: 2)
"""


@pytest.fixture
def flows(tmp_path: Path) -> str:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return f"{path}:nap"


def stored(db: Path, run_id: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT type FROM timeline WHERE run_id = ? ORDER BY seq", [run_id])
        return [r[0] for r in rows]
    finally:
        conn.close()


def shown(events: list[TimelineEvent]) -> list[tuple[str, dict[str, object]]]:
    return [(e.type, e.data) for e in events]


def test_a_plain_created_event_is_implied_and_reads_back_first(tmp_path: Path, flows: str) -> None:
    db = tmp_path / "t.db"
    clock = FakeClock()
    with Store(db) as store:
        plain = ops.start(store, flows, {}, clock=clock).run
        later = ops.start(store, flows, {}, clock=clock, run_at=clock.now() + timedelta(hours=1))
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
        every = store.timeline(plain.run_id)
        assert shown(every)[0] == ("created", {"attempt": 1})
        assert every[0].at == plain.created_at
        assert [e.type for e in every[1:]] == stored(db, plain.run_id)
        assert "created" not in stored(db, plain.run_id)
        # A start that says more keeps its stored event, shown once.
        assert stored(db, later.run.run_id) == ["created"]
        assert [e.type for e in store.timeline(later.run.run_id)] == ["created"]
        assert "run_at" in store.timeline(later.run.run_id)[0].data
        # Every page of the newest-first order, at every skip: the same events, in order.
        n = len(every)
        assert n >= 3  # created (implied), claimed, sleep started
        for limit in (1, 2, n - 1, n, n + 3, None):
            assert store.timeline(plain.run_id, limit) == (
                every if limit is None else every[-limit:]
            )
            for skip in range(n + 2):
                page, total = store.timeline_page(plain.run_id, limit, skip)
                assert total == n
                end = n - skip
                start = 0 if limit is None else max(0, end - limit)
                assert page == every[start : max(0, end)], (limit, skip)
        first = store.last_event(plain.run_id, ["created"])
        assert first == every[0]
        assert (
            store.last_event(plain.run_id, ["created", "claimed"])
            == [e for e in every if e.type == "claimed"][-1]
        )
        assert store.timeline("no-such-run") == []
        assert store.timeline_page("no-such-run", 5) == ([], 0)


def test_a_copy_holds_the_implied_event(tmp_path: Path, flows: str) -> None:
    clock = FakeClock()
    with Store(tmp_path / "a.db") as src, Store(tmp_path / "b.db") as dest:
        ids = [s.run.run_id for s in ops.start_many(src, flows, [{}] * 3, clock=clock)]
        Daemon(src, clock, DaemonConfig(concurrency=2)).tick()
        plan = plan_copy(src, dest, [])
        copied = copy_rows(src, dest, plan)
        assert copied["timeline"] == plan.counts["timeline"]
        for rid in ids:
            assert shown(dest.timeline(rid)) == shown(src.timeline(rid))
            assert dest.timeline(rid)[0].type == "created"
            assert dest.timeline_page(rid, 2)[1] == src.timeline_page(rid, 2)[1]


def test_claims_are_counted_by_triggers_and_go_with_a_pruned_run(
    tmp_path: Path, flows: str
) -> None:
    db = tmp_path / "m.db"
    clock = FakeClock()

    def counted() -> tuple[int, int]:
        conn = sqlite3.connect(db)
        try:
            (n,) = conn.execute("SELECT COUNT(*) FROM timeline WHERE type = 'claimed'").fetchone()
        finally:
            conn.close()
        snap = store.metrics_snapshot([0.1], [0.1])
        return snap.claims, n

    with Store(db) as store:
        ops.start_many(store, flows, [{}] * 4, clock=clock)
        daemon = Daemon(store, clock, DaemonConfig(concurrency=2))
        daemon.tick()
        assert counted() == (4, 4)
        clock.advance(timedelta(hours=2))
        daemon.tick()  # each wakes: a second claim
        assert store.count_by_status()[RunStatus.COMPLETED] == 4
        assert counted() == (8, 8)
        clock.advance(timedelta(days=40))
        pruned = store.prune_runs([RunStatus.COMPLETED], clock.now(), 3)
        assert len(pruned) == 3
        assert counted() == (2, 2)
