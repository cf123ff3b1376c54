"""The write round: many handlers' writes in one transaction, one COMMIT.

The daemon's batch runner executes many runs on one thread. Each store write a handler
makes while a round is open on that thread (`Store.write_round`) is queued here as a
`Write` — a procedure and its arguments, nothing run yet — and its handler waits (the
runner's `wait`, which parks it) until the runner calls `commit()`. `commit()` runs every
queued write in one transaction through `Database.transact`, so the round has one COMMIT
and one fsync, and the write lock is held only while the round's statements run, never
while handlers run their Python. Durability is unchanged: a write returns to its handler
only after the COMMIT that holds it.

Writes of one kind (a checkpoint, a plain completion) carry a `Batch`: the round hands
all of its kind to that function together, which runs each statement once for them all
(executemany) and tells each write its own answer. Every other write runs alone, in a
savepoint, so one that fails is undone alone and the rest of the round commits. A
failure of the transaction as a whole (a full disk, a lost connection) fails every write
of the round, each told the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from flowctl.store.sql import Database, TransactionConflict, Tx

R = TypeVar("R")

# Writes a round writes together: given the round's writes of the kind, sets each one's
# `result` (or `error`); raises only when the transaction itself can no longer go on.
Batch = Callable[[Tx, "list[Write[Any]]"], None]


class Write(Generic[R]):
    """One write of a round: `run` alone, or with its kind (`batch`, `params`)."""

    __slots__ = ("batch", "done", "error", "params", "result", "run", "single")

    def __init__(
        self,
        run: Callable[[Tx], R],
        batch: Batch | None = None,
        params: Any = None,
        single: bool = False,
    ) -> None:
        self.run = run
        self.batch = batch
        self.params = params
        self.single = single  # at most one statement, nothing fails after it
        self.done = False
        self.result: Any = None
        self.error: Exception | None = None


class WriteRound:
    """The writes queued on one thread since the last commit (see the module docstring).

    `wait()` is the runner's: it returns once the runner has called `commit()` (a handler
    greenlet parks in it; the runner's own greenlet commits at once)."""

    def __init__(self, db: Database, wait: Callable[[], None]) -> None:
        self._db = db
        self._wait = wait
        self._pending: list[Write[Any]] = []
        self._committing = False

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, write: Write[R]) -> R:
        """Queue `write` and return its result once a commit has made it durable (made
        while the round commits, it is part of the round's transaction)."""
        if self._committing:
            return self._db.transact(write.run, single=write.single)
        self._pending.append(write)
        while not write.done:
            self._wait()
        if write.error is None:
            result: R = write.result
            return result
        error = self._db.fault(write.error)
        if isinstance(error, TransactionConflict):  # met another writer: again, alone
            return self._db.transact(write.run, single=write.single)
        raise error

    def commit(self) -> int:
        """Write everything queued in one transaction; the number of writes committed (or
        failed). Every writer is then done: the runner resumes them."""
        writes, self._pending = self._pending, []
        if not writes:
            return 0
        self._committing = True
        try:
            # Each write is whole or undone on its own: the round needs no savepoint.
            self._db.transact(lambda tx: _write_all(tx, writes), single=True, writes=len(writes))
        except Exception as e:  # the transaction failed whole: nothing of it was kept
            for write in writes:
                write.error = e
        finally:
            self._committing = False
        for write in writes:
            write.done = True
        return len(writes)


def _write_all(tx: Tx, writes: list[Write[Any]]) -> None:
    """The round's transaction: each kind together, then each other write alone. Run
    again from the start when the backend retries the transaction."""
    kinds: dict[Batch, list[Write[Any]]] = {}
    for write in writes:
        write.error = None
        if write.batch is not None:
            kinds.setdefault(write.batch, []).append(write)
    for batch, same in kinds.items():
        batch(tx, same)
    for write in writes:
        if write.batch is None:
            run_alone(tx, write)


def run_alone(tx: Tx, write: Write[Any]) -> None:
    """One write in the round's transaction: its result, or its own error (undone alone).
    Raises only when the transaction can no longer go on."""
    try:
        if write.single and tx.dialect.statement_atomic:
            write.result = write.run(tx)  # a failed statement is undone alone
        else:
            with tx.savepoint():
                write.result = write.run(tx)
    except Exception as e:
        if not tx.alive():
            raise
        write.error = e


def run_batched(tx: Tx, sql: str, writes: list[Write[Any]]) -> None:
    """Writes that are each the one statement `sql` with their `params`, whose rowcount 1
    says it applied (its own condition, a fence check, held): one executemany for all.

    When it changed fewer rows than writes (a lease lost), or failed, each runs again
    alone for its own answer: a row already written is written again with the same
    values (such a statement inserts or replaces one row), so nothing applies twice."""
    if all_applied(tx, sql, [w.params for w in writes]):
        for write in writes:
            write.result = True
        return
    for write in writes:
        write.run = _statement(sql, write.params)
        write.single = True
        run_alone(tx, write)


def all_applied(tx: Tx, sql: str, rows: list[Any]) -> bool:
    """One executemany of `sql` for `rows`: whether each changed its one row. False too
    when it failed and the transaction goes on (its rows undone where a failed statement
    aborts the transaction): the caller then runs each alone, for its own answer."""
    try:
        if tx.dialect.statement_atomic:  # rows before a failed one stand: written again
            return tx.many(sql, rows) == len(rows)
        with tx.savepoint():
            return tx.many(sql, rows) == len(rows)
    except Exception:
        if not tx.alive():
            raise
        return False


def _statement(sql: str, params: Any) -> Callable[[Tx], bool]:
    return lambda tx: bool(tx.execute(sql, params).rowcount == 1)


class _Partial(Exception):
    """Some row of an all-or-none executemany did not apply: the statement is undone."""


def all_or_none(
    tx: Tx, sql: str, rows: list[Any], *, then: tuple[str, list[Any]] | None = None
) -> bool:
    """One executemany of `sql` for `rows`, kept only if each changed its one row; else
    (or when it failed and the transaction goes on) undone whole and False: for a
    statement that cannot simply run again for the rows that applied (it moves a fence),
    so the caller then runs each write alone, for its own answer.

    `then`: a second statement with a row for each write, run when `sql` (whose rows may
    be for some of the writes only) left some unchanged. A row that one of the two
    changed, the other does not match: together they must change each write's once."""
    expected = len(rows) if then is None else len(then[1])
    try:
        with tx.savepoint():
            changed = tx.many(sql, rows) if rows else 0
            if changed < expected and then is not None:
                changed += tx.many(*then)
            if changed != expected:
                raise _Partial
    except Exception:
        if not tx.alive():
            raise
        return False
    return True
