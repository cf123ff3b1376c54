"""Run counts and `--search` on both stores: counts kept by the store's own transactions
(triggers) agree with the runs after every kind of transition, without reading runs; a
search reads a bounded window of the newest runs plus an exact id; PostgreSQL's
folded counts and their deltas add up however the fold falls, and migrating a database
that has runs counts them."""

from __future__ import annotations

import importlib
import threading
import traceback
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import open_same

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import Store

FLOWS = """\
from flowctl import workflow

@workflow
def quick(ctx, user: str = "u"):
    return ctx.step("fetch", lambda: user)

@workflow
def nap(ctx, user: str = "u"):
    ctx.sleep(3600)
    return user

@workflow(max_attempts=1)
def fail(ctx, user: str = "u"):
    def boom():
        raise RuntimeError("no")
    ctx.step("boom", boom)

@workflow(secret_inputs=["token"])
def secretive(ctx, token: str = "", user: str = "u"):
    return user
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def server(url: str, sql: str) -> list[tuple[Any, ...]]:
    """A statement on a connection of its own, as another client of the server."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def alter(url: str, sql: str) -> None:
    """A statement with no result on a connection of its own."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def is_pg(store: Store) -> bool:
    return store.location.startswith("postgres")


def truth(store: Store, workflow: str | None = None) -> dict[RunStatus, int]:
    runs = store.list_runs(workflow=workflow, limit=10_000)
    real = Counter(r.status for r in runs)
    return {s: real.get(s, 0) for s in RunStatus}


def check(store: Store) -> None:
    assert store.count_by_status() == truth(store)
    for workflow in ("quick", "nap", "fail", "nothing"):
        assert store.count_by_status(workflow) == truth(store, workflow)
    seen = sorted({r.workflow for r in store.list_runs(limit=10_000)})
    assert store.workflows_seen() == seen
    snap = store.metrics_snapshot((), ())
    per = Counter((str(r.status), r.workflow) for r in store.list_runs(limit=10_000))
    assert {(s, w): n for s, w, n in snap.runs} == dict(per)
    events = Counter(
        e.type for r in store.list_runs(limit=10_000) for e in store.timeline(r.run_id)
    )
    assert (snap.claims, snap.reclaims) == (events["claimed"], events["reclaimed"])


def test_counts_follow_every_transition(store: Store, flows: Path, fake_clock: FakeClock) -> None:
    def start(fn: str, **kw: object) -> str:
        return ops.start(store, f"{flows}:{fn}", {}, clock=fake_clock, **kw).run.run_id  # type: ignore[arg-type]

    ids = [start(fn) for fn in ("quick", "nap", "fail", "quick", "nap")]
    check(store)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=4))
    daemon.tick()
    check(store)  # completed, sleeping, dead
    ops.pause(store, ids[4], clock=fake_clock)
    check(store)
    ops.resume(store, ids[4], clock=fake_clock)
    ops.cancel(store, ids[1], clock=fake_clock)
    ops.redrive(store, ids[2], clock=fake_clock)
    check(store)
    fake_clock.advance(3601)
    while daemon.tick():
        pass
    check(store)
    fake_clock.advance(timedelta(days=2))
    store.prune_runs([RunStatus.COMPLETED], fake_clock.now(), 2)
    check(store)
    late = start("quick", run_at=fake_clock.now() + timedelta(hours=1))
    assert store.get_run(late).status is RunStatus.QUEUED
    check(store)


def test_counts_stay_exact_under_concurrent_writers(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    """Four connections start and run work at once: every delta lands in its own writer's
    transaction, so the counts add up (on PostgreSQL, however the folds fall)."""
    others = [open_same(store) for _ in range(4)]
    barrier = threading.Barrier(len(others))
    errors: list[str] = []  # each writer's failure, with its traceback

    def writer(s: Store, i: int) -> None:
        try:
            barrier.wait()
            for j in range(15):
                fn = ("quick", "nap", "fail")[(i + j) % 3]
                ops.start(s, f"{flows}:{fn}", {"user": f"{i}-{j}"}, clock=fake_clock)
            Daemon(s, fake_clock, DaemonConfig(concurrency=2)).tick()
        except BaseException:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=writer, args=(s, i)) for i, s in enumerate(others)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for s in others:
        s.close()
    assert errors == []
    assert sum(store.count_by_status().values()) == 60
    check(store)
    if is_pg(store):  # fold what is left: the counts do not move, the deltas are gone
        assert server(store.location, "SELECT flowctl_fold_run_counts()") == [("",)]
        assert server(store.location, "SELECT COUNT(*) FROM run_count_deltas") == [(0,)]
        check(store)


def test_search_reads_a_bounded_window_and_exact_ids_and_keys(
    store: Store, flows: Path, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.import_module("flowctl.store.rows"), "SEARCH_WINDOW", 5)

    def start(fn: str, inp: dict[str, str], **kw: object) -> str:
        fake_clock.advance(timedelta(seconds=1))
        return ops.start(store, f"{flows}:{fn}", inp, clock=fake_clock, **kw).run.run_id  # type: ignore[arg-type]

    old = start("quick", {"user": "needle"}, key="order-7")
    hidden = start("secretive", {"token": "needle-token", "user": "x"})
    # 'l' and 'o' are not in the run ids' alphabet: "hayloft" never matches a random id
    for i in range(10):
        start("quick", {"user": f"hayloft{i}"})
    new = start("quick", {"user": "needle"})
    shown = start("secretive", {"token": "needle", "user": "pin"})
    ids = lambda **kw: [r.run_id for r in store.list_runs(**kw)]  # noqa: E731
    assert ids(search="needle") == [new]  # the old one and the secret are out of the window
    assert ids(search="pin") == [shown]  # found by a value that is not secret
    assert ids(search="needle", workflow="secretive") == []  # its token never matches
    assert ids(search=old) == [old]  # an exact id, however old
    assert ids(search="order-7") == [old]  # an exact key, however old
    assert ids(search="order-") == []  # a key matches whole, not as a part
    assert ids(search=new) == [new]  # an id in the window
    assert ids(search=hidden) == [hidden]
    assert store.count_by_status_matching(None, "needle")[RunStatus.QUEUED] == 1
    assert store.count_by_status_matching(None, "hayloft")[RunStatus.QUEUED] == 3  # hayloft7..9
    assert store.count_by_status_matching("quick", "hayloft")[RunStatus.QUEUED] == 3
    assert store.count_by_status_matching(None, old)[RunStatus.QUEUED] == 1
    assert store.count_by_status_matching(None, None) == store.count_by_status()
    assert (
        ids(search="hayloft", statuses=[RunStatus.QUEUED], limit=2, offset=1)
        == ids(search="hayloft", limit=3)[1:3]
    )


def test_migrating_a_database_with_runs_counts_them(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs stored before run_counts existed (schema v3) are counted by the migration that
    adds them, and stay counted through the later ones (v7 moves their definitions out)."""
    from flowctl.store.postgres import schema
    from flowctl.store.postgres.store import PostgresStore

    with monkeypatch.context() as m:  # a database at schema v3, before run_counts
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:3])
        m.setattr(schema, "SCHEMA_VERSION", 3)
        PostgresStore(pg_url).close()
    stored = [("quick", "completed"), ("nap", "sleeping"), ("nap", "sleeping"), ("fail", "dead")]
    for i, (workflow, status) in enumerate(stored):  # as that version's store wrote runs
        alter(
            pg_url,
            "INSERT INTO runs (run_id, workflow, target, kind, input, status, created_at)"
            f" VALUES ('r{i}', '{workflow}', 'f.py:{workflow}', 'python', '{{}}', '{status}',"
            f" {i})",
        )
    assert server(pg_url, "SELECT to_regclass('run_counts')") == [(None,)]
    with PostgresStore(pg_url) as store:
        check(store)
        assert store.count_by_status()[RunStatus.SLEEPING] == 2
        assert store.count_by_status("nap")[RunStatus.SLEEPING] == 2
        assert (store.get_run("r1").target, store.get_run("r1").kind) == ("f.py:nap", "python")


def test_claims_and_reclaims_are_counted_however_they_are_written(
    store: Store, flows: Path, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """Claims, woken sleepers, suspects reclaimed alone, events added by hand, and a copy
    into SQLite all keep the run counts and the claim counts exact (on SQLite a claim moves
    its batch in run_counts itself since migration 20, not by a trigger per row)."""
    from flowctl.store import open_store
    from flowctl.store.copy import copy_rows

    ids = [
        ops.start(store, f"{flows}:{fn}", {}, clock=fake_clock).run.run_id
        for fn in ("quick", "nap", "nap", "quick")
    ]
    now = fake_clock.now()
    store.claim_due("gone/1/1/0", now, now + timedelta(seconds=15), 2)  # a worker that dies
    check(store)
    fake_clock.advance(60)  # its leases lapse: those runs are suspects, run alone
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=4))
    while daemon.tick():
        check(store)
    fake_clock.advance(3601)  # the sleepers wake
    while daemon.tick():
        check(store)
    assert {store.get_run(i).status for i in ids} == {RunStatus.COMPLETED}
    snap = store.metrics_snapshot((), ())
    assert snap.reclaims >= 1 and snap.claims >= 4
    store.add_event(ids[0], "claimed", {"by": "hand"}, fake_clock.now())
    store.add_events(ids[1:3], "reclaimed", {"by": "hand"}, fake_clock.now())
    check(store)
    copy = open_store(tmp_path / "copy.db")
    try:
        copy_rows(store, copy, ops.plan_copy(store, copy, clock=fake_clock))
        check(copy)
        assert copy.metrics_snapshot((), ()).claims == store.metrics_snapshot((), ()).claims
    finally:
        copy.close()
