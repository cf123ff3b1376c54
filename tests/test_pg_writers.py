"""A daemon's `--threads` handlers on PostgreSQL each have a connection of their own (issue
38, item 5): the store keeps as many connections as threads write at once (`writers`),
rather than a pool of 10 that 64 handler threads queue for."""

from __future__ import annotations

import threading

from flowctl.store.postgres.connection import POOL_MAX, PostgresDatabase
from flowctl.store.sql import Tx

WRITERS = POOL_MAX + 14


def all_inside_at_once(db: PostgresDatabase, n: int) -> list[int]:
    """`n` threads each open a transaction and stay in it until all `n` are in theirs: it
    needs `n` connections at once. What each transaction returned (1), in any order."""
    inside = threading.Barrier(n, timeout=10)
    results: list[int] = []

    def write(tx: Tx) -> int:
        row = tx.one("SELECT 1")
        inside.wait()
        return int(row[0]) if row is not None else 0

    def writer() -> None:
        results.append(db.transact(write))

    threads = [threading.Thread(target=writer) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_as_many_transactions_run_at_once_as_writers_were_asked_for(pg_url: str) -> None:
    db = PostgresDatabase(pg_url)
    try:
        db.writers(WRITERS)
        assert all_inside_at_once(db, WRITERS) == [1] * WRITERS
    finally:
        db.close()
