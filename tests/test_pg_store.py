"""What only the PostgreSQL store has to prove: concurrent first use, schema refusals,
claims that never overlap across connections, and change notices from any writer.

The shared behaviour (every Store promise) is tested on both backends by the parametrised
`store` fixture; these tests are about the server itself.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import wait_until

from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import DatabaseError, DatabaseNotFoundError
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus, to_us
from flowctl.store import NewRun
from flowctl.store.postgres.schema import SCHEMA_VERSION
from flowctl.store.postgres.store import PostgresStore

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
LEASE = timedelta(seconds=15)


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def test_many_stores_opening_an_empty_database_at_once_migrate_it_once(pg_url: str) -> None:
    n = 6
    barrier = threading.Barrier(n)
    opened: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        barrier.wait()
        try:
            opened.append(PostgresStore(pg_url, pool_max=2))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert len(opened) == n
        versions = rows(pg_url, "SELECT version FROM flowctl_schema ORDER BY version")
        assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
        assert opened[0].count_by_status()[RunStatus.QUEUED] == 0
    finally:
        for s in opened:
            s.close()


def test_reading_an_empty_database_creates_nothing(pg_url: str) -> None:
    with pytest.raises(DatabaseNotFoundError, match="no flowctl database at postgresql://"):
        PostgresStore(pg_url, create=False)
    assert rows(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == []


def test_a_newer_schema_is_refused_unchanged(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO flowctl_schema VALUES (%s, 0)", [SCHEMA_VERSION + 1])
    with pytest.raises(DatabaseError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        PostgresStore(pg_url)
    assert rows(pg_url, "SELECT MAX(version) FROM flowctl_schema") == [(SCHEMA_VERSION + 1,)]


def test_a_database_with_someone_elses_runs_table_is_refused(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (id int)")
    with pytest.raises(DatabaseError, match="a table named runs that is not flowctl's"):
        PostgresStore(pg_url)
    assert rows(pg_url, "SELECT to_regclass('journal')") == [(None,)]


def test_two_claimers_at_once_split_the_due_runs_and_never_share_one(pg_url: str) -> None:
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        for i in range(60):
            a.create_run(NewRun(f"r{i:02d}", "wf", "wf.py:wf", "python", {}), T0)
        barrier = threading.Barrier(2)
        got: dict[str, list[str]] = {"a": [], "b": []}

        def claim(name: str, s: PostgresStore) -> None:
            barrier.wait()
            while True:  # until nothing due is left unclaimed
                claims, _ = s.claim_due(name, T0, T0 + LEASE, 4)
                if not claims:
                    return
                got[name].extend(c.run.run_id for c in claims)

        threads = [threading.Thread(target=claim, args=(k, s)) for k, s in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert set(got["a"]).isdisjoint(got["b"])
        assert sorted(got["a"] + got["b"]) == [f"r{i:02d}" for i in range(60)]
        owners = {r.run_id: r.lease_owner for r in a.list_runs(limit=100)}
        assert owners == {**dict.fromkeys(got["a"], "a"), **dict.fromkeys(got["b"], "b")}
    finally:
        a.close()
        b.close()


def test_a_commit_by_any_other_client_changes_data_version_own_writes_do_not(
    pg_url: str,
) -> None:
    s = PostgresStore(pg_url)
    try:
        with s.own_writes():
            s.create_run(NewRun("r1", "wf", "wf.py:wf", "python", {}), T0)
        quiet = s.data_version()
        assert s.data_version() == quiet  # own writes are not news
        with psycopg.connect(pg_url, autocommit=True) as conn:  # another host, say
            conn.execute("UPDATE runs SET run_at = 0 WHERE run_id = 'r1'")
        wait_until(lambda: s.data_version() != quiet, timeout=5)
        seen = s.data_version()
        s.create_run(NewRun("r2", "wf", "wf.py:wf", "python", {}), T0)  # not own: news at once
        assert s.data_version() != seen
    finally:
        s.close()


def test_the_daemon_rereads_every_refresh_interval_even_when_a_notice_is_lost(
    pg_url: str, fake_clock: FakeClock
) -> None:
    """A change whose NOTIFY never comes (here: the trigger dropped, as if the LISTEN
    connection had silently dropped it) is found by the daemon's backstop re-read."""
    s = PostgresStore(pg_url)
    try:
        daemon = Daemon(s, fake_clock, DaemonConfig(concurrency=1))
        assert daemon.tick() == 0
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER runs_changed ON runs")
            now_us = to_us(fake_clock.now())  # another host's write, its notice lost
            conn.execute("INSERT INTO definitions (target, kind) VALUES ('wf.py:wf', 'python')")
            conn.execute(
                "INSERT INTO runs (run_id, workflow, def_id, input, status, run_at, created_at)"
                " SELECT 'r1', 'wf', def_id, '{}', 'queued', %s, %s FROM definitions",
                [now_us, now_us],
            )
        s.data_version()
        fake_clock.advance(timedelta(seconds=s.refresh_interval - 1))
        assert daemon.tick() == 0  # unnoticed: before the backstop
        fake_clock.advance(timedelta(seconds=1))
        claimed = daemon.tick()  # the backstop re-read found it and claimed it
        assert claimed == 1
        (claim,) = [e for e in s.timeline("r1") if e.type == "claimed"]
        assert claim.data["by"] == daemon.owner and claim.at == fake_clock.now()
    finally:
        s.close()


def test_a_parent_parking_while_its_childs_ending_is_in_flight_waits_for_it_and_wakes(
    pg_url: str,
) -> None:
    # The child's ending (another worker's transaction) has written the child's row but not
    # committed, and has yet to look for a waiting parent. The parent's park must wait it out
    # and see the ending, and the two transactions must not deadlock.
    from flowctl.model import CallKind, EntryState, JournalEntry
    from flowctl.transitions import Applied

    store = PostgresStore(pg_url)
    try:
        store.create_run(NewRun("parent", "wf", "wf.py:wf", "python", {}), T0)
        (claim,), _ = store.claim_due("host-a/1/1/aaaa", T0, T0 + LEASE, 1, run_id="parent")
        store.create_run(
            NewRun("child", "wf", "wf.py:wf", "python", {}, parent_run_id="parent"), T0
        )
        pending = JournalEntry(
            "parent",
            0,
            CallKind.STEP,
            "workflow wf.py:wf",
            EntryState.PENDING,
            {"child_run_id": "child"},
        )
        applied: list[Any] = []
        with psycopg.connect(pg_url) as ending:
            ending.execute("UPDATE runs SET status = 'completed' WHERE run_id = 'child'")
            parker = threading.Thread(
                target=lambda: applied.append(
                    store.suspend_run(
                        claim.lease, RunStatus.WAITING, None, T0, 0.1, pending, ("wait", {})
                    )
                )
            )
            parker.start()
            wait_until(
                lambda: rows(
                    pg_url,
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()",
                )
            )
            ending.execute(
                "UPDATE runs SET run_at = 1 WHERE status = 'waiting' AND run_id = 'parent'"
            )
            ending.commit()
            parker.join(30)
        assert applied == [Applied(RunStatus.WAITING, T0)]
        assert store.get_run("parent").run_at == T0
    finally:
        store.close()


def test_a_scheduled_runs_end_waits_for_a_fire_in_flight_and_releases_the_run_it_held(
    pg_url: str, tmp_path: Path
) -> None:
    # overlap=queue: a fire that saw run A active holds its new run H behind A. If A's end
    # committed while that fire was in flight, it found no held run to release, and H would
    # wait for the next fire. A's end takes the schedule's lock, which the fire holds.
    from flowctl.ops import schedules as schedule_ops

    flows = tmp_path / "flows.py"
    flows.write_text("from flowctl import workflow\n\n@workflow\ndef f(ctx):\n    return 1\n")
    store = PostgresStore(pg_url)
    try:
        clock = FakeClock(T0)
        schedule_ops.add_schedule(
            store, "s", f"{flows}:f", clock=clock, every="1h", overlap="queue"
        )
        store.create_run(NewRun("a", "f", f"{flows}:f", "python", {}, schedule="s"), T0)
        (claim,), _ = store.claim_due("host-a/1/1/aaaa", T0, T0 + LEASE, 1, run_id="a")
        done: list[bool] = []
        with psycopg.connect(pg_url) as fire:
            # What a fire holds from its start; then it writes H, held (queued, no run_at).
            fire.execute("SELECT 1 FROM schedules WHERE name = 's' FOR UPDATE")
            ender = threading.Thread(
                target=lambda: done.append(store.complete_run(claim.lease, 1, T0, 0.0))
            )
            ender.start()
            wait_until(  # A's end waits for the fire (or, were it not to, has ended)
                lambda: (
                    not ender.is_alive()
                    or rows(
                        pg_url,
                        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND datname = current_database()",
                    )
                )
            )
            fire.execute("CREATE TEMP TABLE h AS SELECT * FROM runs WHERE run_id = 'a'")
            fire.execute(
                "UPDATE h SET run_id = 'h', status = 'queued', run_at = NULL, fence = 0,"
                " lease_owner = NULL, lease_until = NULL, started_at = NULL"
            )
            fire.execute("INSERT INTO runs SELECT * FROM h")
            fire.commit()
            ender.join(30)
        assert done == [True]
        held = store.get_run("h")
        assert (held.status, held.run_at) == (RunStatus.QUEUED, T0)
        assert [e.data for e in store.timeline("h") if e.type == "released"] == [
            {"schedule": "s", "after": "a"}
        ]
    finally:
        store.close()


def test_prune_deletes_the_rows_of_tables_with_no_foreign_key_to_runs(pg_url: str) -> None:
    """Schema version 12 drops the journal's, timeline's and outbox's foreign key to runs
    (each row is written while its run's row is locked): prune deletes those rows itself,
    and only those of the runs it prunes."""
    tables = ("journal", "timeline", "notifications")
    foreign = rows(pg_url, "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f'")
    store = PostgresStore(pg_url)
    try:
        assert not set(tables) & {t for (t,) in foreign}
        for run_id, ended in (("gone", T0), ("kept", T0 + timedelta(days=2))):
            store.create_run(NewRun(run_id, "wf", "wf.py:wf", "python", {}), T0)
            (claim,), _ = store.claim_due("me", ended, ended + LEASE, 1)
            step = JournalEntry(run_id, 0, CallKind.STEP, "one", EntryState.DONE, 1)
            assert store.record_entry(claim.lease, step, ended)
            assert store.complete_run(claim.lease, 1, ended, 0.0)

        def left(run_id: str) -> list[int]:
            return [
                rows(pg_url, f"SELECT COUNT(*) FROM {t} WHERE run_id = '{run_id}'")[0][0]
                for t in tables
            ]

        assert 0 not in left("gone") and 0 not in left("kept")
        pruned = store.prune_runs([RunStatus.COMPLETED], T0 + timedelta(days=1), 10)
        assert [p.run_id for p in pruned] == ["gone"]
        assert left("gone") == [0, 0, 0]
        assert 0 not in left("kept")
    finally:
        store.close()
