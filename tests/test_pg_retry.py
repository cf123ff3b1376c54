"""Transactions the server rolls back for a deadlock (40P01) or a serialization failure
(40001) are run again from the start, a bounded number of times with jittered backoff,
in one place: the PostgreSQL backend's `transact` (retry_conflicts), which every write
of the store, and every write round, runs through.

The deadlock is a real one, between the store and another client of the server; the
server's deadlock detector (deadlock_timeout, 1 s by default) picks the victim, so the
test waits about that long for the server, never for a sleep of its own.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from helpers import wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.errors import DatabaseError
from flowctl.store.postgres import connection
from flowctl.store.postgres.connection import (
    CONFLICT_TRIES,
    conflict_backoff,
    retry_conflicts,
)
from flowctl.store.postgres.store import PostgresStore
from flowctl.store.records import Lease
from flowctl.store.sql import TransactionConflict

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def deadlock_round(
    store: PostgresStore, url: str, first: Lease, second: Lease, clock: FakeClock
) -> tuple[bool, list[int], list[BaseException]]:
    """One real deadlock: the store's release_runs holds `first` and waits for `second`,
    which another client holds and which then asks for `first`. Returns whether the
    server rolled back the other client (not the store), and what release_runs gave."""
    released: list[int] = []
    errors: list[BaseException] = []
    ours = threading.Event()

    def release() -> None:  # locks `first`, then waits for `second`
        try:
            released.append(store.release_runs([first, second], clock.now(), "deadlock test"))
        except BaseException as e:
            errors.append(e)

    def waiting(monitor: psycopg.Connection[Any]) -> bool:
        row = monitor.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
        return row is not None and row[0] == 1

    with (
        psycopg.connect(url, autocommit=True) as other,
        psycopg.connect(url, autocommit=True) as monitor,
    ):
        other.execute("BEGIN")
        other.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", [second.run_id])
        # The retry's backoff waits until our side holds `first`: else the retry could
        # lock it again before we are woken, and the next deadlock would pick us.
        with_sleep = connection.time
        connection.time = SimpleNamespace(sleep=lambda s: ours.wait(30))  # type: ignore[assignment]
        worker = threading.Thread(target=release)
        worker.start()
        try:
            wait_until(lambda: waiting(monitor), interval=0.005)
            # The cycle. The store waited first, so its deadlock check (deadlock_timeout
            # after its wait began) normally fires first and rolls its own try back.
            other.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", [first.run_id])
            ours.set()
            other.execute("COMMIT")
            store_was_rolled_back = True
        except psycopg.errors.DeadlockDetected:
            # A loaded machine let the store's check pass before we asked: ours fired.
            other.execute("ROLLBACK")
            store_was_rolled_back = False
        finally:
            ours.set()
            worker.join(30)
            connection.time = with_sleep  # type: ignore[assignment]
    return store_was_rolled_back, released, errors


def test_a_real_deadlock_is_retried_and_the_write_happens_once(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text("from flowctl import workflow\n\n@workflow\ndef w(ctx):\n    return 1\n")
    clock = FakeClock(T0)
    caplog.set_level(logging.INFO, logger=connection.__name__)
    with PostgresStore(pg_url) as store:
        for _round in range(5):  # until the server picks the store's transaction
            clock.advance(timedelta(seconds=1))
            for _ in range(2):
                ops.start(store, f"{flows}:w", {}, clock=clock)
            claims, _ = store.claim_due("w-1", clock.now(), clock.now() + timedelta(seconds=15), 2)
            first, second = sorted((c.lease for c in claims), key=lambda lease: lease.run_id)
            caplog.clear()
            picked_store, released, errors = deadlock_round(store, pg_url, first, second, clock)
            assert errors == []
            assert released == [2]
            if picked_store:
                break
        else:
            pytest.fail("in 5 rounds the server never rolled back the store's transaction")
        retries = [r.getMessage() for r in caplog.records if r.name == connection.__name__]
        assert len(retries) == 1 and "deadlock detected" in retries[0], retries
        assert "release_runs" in retries[0] and "try 2" in retries[0]
        for lease in (first, second):  # the rolled-back try left nothing behind
            events = [e for e in store.timeline(lease.run_id) if e.type == "released"]
            assert [e.data for e in events] == [{"by": "w-1", "reason": "deadlock test"}]
            assert store.get_run(lease.run_id).lease_until == clock.now()


class Flaky:
    """A transaction that fails with a conflict `fails` times."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls = 0

    def once(self) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise TransactionConflict("PostgreSQL at h: deadlock detected")
        return "done"


def test_the_retries_are_bounded_and_jittered(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(connection.time, "sleep", waits.append)
    ok = Flaky(fails=CONFLICT_TRIES - 1)
    assert retry_conflicts(ok.once, "ok") == "done"
    assert ok.calls == CONFLICT_TRIES
    assert len(waits) == CONFLICT_TRIES - 1
    assert all(0 <= w <= conflict_backoff(i + 1, 1.0) for i, w in enumerate(waits))
    hopeless = Flaky(fails=10)
    with pytest.raises(
        DatabaseError, match=rf"deadlock detected \(gave up after {CONFLICT_TRIES} tries\)$"
    ):
        retry_conflicts(hopeless.once, "hopeless")
    assert hopeless.calls == CONFLICT_TRIES


def test_a_transaction_nested_in_this_threads_runs_inside_it_and_is_not_retried(
    pg_url: str,
) -> None:
    """Inside a transaction the outermost one retries: a nested transact is part of it."""
    with PostgresStore(pg_url) as store:
        calls: list[int] = []

        def inner(tx: object) -> None:
            calls.append(1)
            raise TransactionConflict("nested conflict")

        def outer(tx: object) -> None:
            store.db.transact(inner)

        with pytest.raises(TransactionConflict, match="gave up"):
            store.db.transact(outer)
        assert len(calls) == CONFLICT_TRIES  # once per try of the outer transaction


def test_the_backoff_doubles_its_cap_and_spreads_under_it() -> None:
    assert conflict_backoff(1, 0.0) == 0.0
    caps = [conflict_backoff(n, 1.0) for n in range(1, CONFLICT_TRIES)]
    assert caps == [caps[0] * 2**i for i in range(len(caps))]
    assert conflict_backoff(3, 0.5) == caps[2] / 2
    assert sum(caps) < 1.0  # the whole retry budget stays well under a second
