"""PostgreSQL write transactions run in pipeline mode (flowctl.store.postgres.connection):
what a transaction only sends (`Tx.send`, `Tx.statement`) rides with the next statement
it waits for. What a procedure reads must still be its own statement's answer: a rowcount,
a row, an error raised where it belongs (at the next read, the end of a savepoint, or the
COMMIT), never lost and never another write's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flowctl.store.postgres.connection import PostgresDatabase
from flowctl.store.sql import Tx


@pytest.fixture
def db(pg_url: str) -> Iterator[PostgresDatabase]:
    database = PostgresDatabase(pg_url)
    database.transact(lambda tx: tx.send("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER)"))
    database.transact(lambda tx: tx.send("INSERT INTO t SELECT g, 0 FROM generate_series(1, 9) g"))
    yield database
    database.close()


def rows(db: PostgresDatabase) -> list[tuple[int, int]]:
    with db.reading() as tx:
        return [(r[0], r[1]) for r in tx.all("SELECT a, b FROM t WHERE b <> 0 ORDER BY a")]


def test_sent_statements_are_written_with_the_transaction(db: PostgresDatabase) -> None:
    def write(tx: Tx) -> int:
        update = tx.statement("UPDATE t SET b = 1 WHERE a = ?")
        for a in (1, 2, 3):
            update([a])
        tx.send("UPDATE t SET b = 2 WHERE a = ?", [4])
        row = tx.one("SELECT COUNT(*) FROM t WHERE b <> 0")  # sees what was sent before it
        assert row is not None
        return int(row[0])

    assert db.transact(write) == 4
    assert rows(db) == [(1, 1), (2, 1), (3, 1), (4, 2)]


def test_a_rowcount_is_its_own_statements_inside_the_pipeline(db: PostgresDatabase) -> None:
    def write(tx: Tx) -> tuple[int, int, int]:
        tx.send("UPDATE t SET b = 5 WHERE a = ?", [1])
        one = tx.execute("UPDATE t SET b = 6 WHERE a = ?", [2]).rowcount
        none = tx.execute("UPDATE t SET b = 6 WHERE a = ?", [99]).rowcount
        many = tx.many("UPDATE t SET b = 7 WHERE a = ?", [[3], [4], [99]])
        return one, none, many

    assert db.transact(write) == (1, 0, 2)


def test_a_sent_statements_error_is_raised_by_the_next_read_and_nothing_is_written(
    db: PostgresDatabase,
) -> None:
    def write(tx: Tx) -> None:
        tx.send("UPDATE t SET b = 1 WHERE a = ?", [1])
        tx.send("INSERT INTO t VALUES (?, 0)", [2])  # a key that is there
        tx.one("SELECT 1")

    with pytest.raises(Exception, match="duplicate key"):
        db.transact(write)
    assert rows(db) == []


def test_a_savepoints_sent_error_is_raised_in_its_block_and_undone_alone(
    db: PostgresDatabase,
) -> None:
    caught: list[str] = []

    def write(tx: Tx) -> None:
        tx.send("UPDATE t SET b = 1 WHERE a = ?", [1])
        try:
            with tx.savepoint():
                tx.send("UPDATE t SET b = 9 WHERE a = ?", [5])
                tx.send("INSERT INTO t VALUES (?, 0)", [2])
        except Exception as e:
            caught.append(str(e))
        assert tx.alive()
        tx.send("UPDATE t SET b = 3 WHERE a = ?", [3])

    db.transact(write)
    assert len(caught) == 1 and "duplicate key" in caught[0]
    assert rows(db) == [(1, 1), (3, 3)]  # a = 5 went with its savepoint


def test_a_blocks_own_error_is_the_one_raised_after_sent_statements(db: PostgresDatabase) -> None:
    def write(tx: Tx) -> None:
        with tx.savepoint():
            tx.send("UPDATE t SET b = 1 WHERE a = ?", [1])
            raise KeyError("the write's own")

    with pytest.raises(KeyError, match="the write's own"):
        db.transact(write)
    assert rows(db) == []


def test_an_error_sent_before_a_savepoint_fails_the_transaction_not_only_the_block(
    db: PostgresDatabase,
) -> None:
    """The SAVEPOINT after a failed sent statement is never run, so the block cannot be
    undone alone: the transaction fails whole, and says so. PostgreSQL answers the COMMIT
    of a failed transaction with a ROLLBACK and no error, so a write caught as its block's
    own failure would otherwise be told the rest was kept."""

    def write(tx: Tx) -> None:
        tx.send("UPDATE t SET b = 1 WHERE a = ?", [1])
        tx.send("INSERT INTO t VALUES (?, 0)", [2])  # a key that is there
        try:
            with tx.savepoint():
                tx.send("UPDATE t SET b = 9 WHERE a = ?", [5])
        except Exception:
            if tx.alive():  # as the round's writes ask (flowctl.store.round.run_alone)
                return
            raise

    with pytest.raises(Exception, match=r"duplicate key|savepoint"):
        db.transact(write)
    assert rows(db) == []


def test_what_nobody_reads_waits_for_nothing_and_a_block_ending_on_an_answer_waits_once(
    db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round's appends (`send_many`) ride with the next statement that waits, and a
    savepoint whose block ended on a statement it waited for does not wait again: two
    waits here (the rowcount, the row), not four."""
    import psycopg

    waits: list[int] = []
    real = psycopg.Pipeline.sync
    monkeypatch.setattr(psycopg.Pipeline, "sync", lambda pipe: waits.append(1) or real(pipe))

    def write(tx: Tx) -> tuple[int, int]:
        before = len(waits)
        tx.send_many("UPDATE t SET b = 1 WHERE a = ?", [[1], [2]])
        with tx.savepoint():
            changed = tx.many("UPDATE t SET b = 2 WHERE a = ?", [[3], [4]])
        row = tx.one("SELECT COUNT(*) FROM t WHERE b <> 0")
        assert row is not None and changed == 2
        return int(row[0]), len(waits) - before

    assert db.transact(write) == (4, 2)
    assert rows(db) == [(1, 1), (2, 1), (3, 2), (4, 2)]
