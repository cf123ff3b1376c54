"""Transactions the server rolls back for a deadlock (40P01) or a serialization failure
(40001) are run again from the start, a bounded number of times with jittered backoff,
in one place: the connection layer's `retried`, which every write operation carries.

The deadlock is a real one, between the store and another client of the server; the
server's deadlock detector (deadlock_timeout, 1 s by default) picks the victim, so the
test waits about that long for the server, never for a sleep of its own.
"""

from __future__ import annotations

import inspect
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
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
    ConflictError,
    conflict_backoff,
    retried,
)
from flowctl.store.postgres.store import PostgresStore

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def waiting_on_a_lock(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_a_real_deadlock_is_retried_and_the_write_happens_once(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text("from flowctl import workflow\n\n@workflow\ndef w(ctx):\n    return 1\n")
    clock = FakeClock(T0)
    with PostgresStore(pg_url) as store:
        for _ in range(2):
            ops.start(store, f"{flows}:w", {}, clock=clock)
        claims, _ = store.claim_due("w-1", T0, T0 + timedelta(seconds=15), 2)
        first, second = sorted((c.lease for c in claims), key=lambda lease: lease.run_id)
        released: list[int] = []
        errors: list[BaseException] = []

        def release() -> None:  # locks `first`, then waits for `second`
            try:
                released.append(store.release_runs([first, second], T0, "deadlock test"))
            except BaseException as e:
                errors.append(e)

        caplog.set_level(logging.INFO, logger=connection.__name__)
        other = psycopg.connect(pg_url, autocommit=True)
        try:
            other.execute("BEGIN")
            other.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", [second.run_id])
            worker = threading.Thread(target=release)
            worker.start()
            wait_until(lambda: waiting_on_a_lock(pg_url) == 1)
            # The cycle: the store holds `first` and waits for `second`; we hold `second`
            # and now wait for `first`. The store waited first, so its deadlock check
            # fires first and its transaction is the one rolled back; ours goes on.
            other.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", [first.run_id])
            other.execute("COMMIT")
            worker.join(30)
        finally:
            other.close()
        assert errors == []
        assert released == [2]  # the second try released both runs
        retries = [r.getMessage() for r in caplog.records if r.name == connection.__name__]
        assert len(retries) == 1 and "deadlock detected" in retries[0], retries
        assert "release_runs" in retries[0] and "try 2" in retries[0]
        for lease in (first, second):  # the rolled-back try left nothing behind
            events = [e for e in store.timeline(lease.run_id) if e.type == "released"]
            assert [e.data for e in events] == [{"by": "w-1", "reason": "deadlock test"}]
            assert store.get_run(lease.run_id).lease_until == T0


class Flaky:
    """The smallest holder of `retried`: its operation fails with a conflict `fails` times."""

    def __init__(self, fails: int) -> None:
        self._tl = threading.local()
        self.fails = fails
        self.calls = 0

    def enter_a_transaction(self) -> None:
        """As `_write` marks this thread's transaction open."""
        self._tl.conn = object()

    @retried
    def op(self, value: str) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise ConflictError("PostgreSQL at h: deadlock detected")
        return value


def test_the_retries_are_bounded_and_jittered(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(connection.time, "sleep", waits.append)
    ok = Flaky(fails=CONFLICT_TRIES - 1)
    assert ok.op("done") == "done"  # type: ignore[arg-type]
    assert ok.calls == CONFLICT_TRIES
    assert len(waits) == CONFLICT_TRIES - 1
    assert all(0 <= w <= conflict_backoff(i + 1, 1.0) for i, w in enumerate(waits))
    hopeless = Flaky(fails=10)
    with pytest.raises(
        DatabaseError, match=rf"deadlock detected \(gave up after {CONFLICT_TRIES} tries\)$"
    ):
        hopeless.op("never")  # type: ignore[arg-type]
    assert hopeless.calls == CONFLICT_TRIES
    nested = Flaky(fails=1)  # inside a transaction the outermost operation retries, not this
    nested.enter_a_transaction()
    with pytest.raises(ConflictError):
        nested.op("x")  # type: ignore[arg-type]
    assert nested.calls == 1


def test_the_backoff_doubles_its_cap_and_spreads_under_it() -> None:
    assert conflict_backoff(1, 0.0) == 0.0
    caps = [conflict_backoff(n, 1.0) for n in range(1, CONFLICT_TRIES)]
    assert caps == [caps[0] * 2**i for i in range(len(caps))]
    assert conflict_backoff(3, 0.5) == caps[2] / 2
    assert sum(caps) < 1.0  # the whole retry budget stays well under a second


def test_every_write_operation_retries_conflicts() -> None:
    """A write operation without `retried` would surface a deadlock as an error."""
    missing: list[str] = []
    checked = 0
    for name, member in inspect.getmembers(PostgresStore, inspect.isfunction):
        inner: Any = inspect.unwrap(member)
        if name.startswith("_") and name != "_read":
            continue
        opens = "self._write()" in inspect.getsource(inner) or name == "_read"
        checked += opens
        if opens and not getattr(member, "retries_conflicts", False):
            missing.append(name)
    assert checked > 30  # every write operation (and the read) was found
    assert missing == []
