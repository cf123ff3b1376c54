"""A transaction as the store's procedures see it (`Tx`), and what a backend offers to
run them (`Database`).

A procedure is a function of a `Tx`: it runs statement templates (flowctl.store.dialect)
and decides nothing about BEGIN or COMMIT. The backend runs it: `Database.transact(fn)`
is one write transaction, durable when it returns (SQLite: BEGIN IMMEDIATE under the
file's write lock, or a savepoint in a shared group commit; PostgreSQL: a pooled
connection's transaction, run again from the start when the server rolls it back for a
deadlock). So each transaction is written once, and where it commits is the backend's
one COMMIT.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple, Protocol, TypeVar

from flowctl.errors import DatabaseError
from flowctl.store.dialect import Dialect

R = TypeVar("R")
Row = Sequence[Any]


class TransactionConflict(DatabaseError):
    """Another writer got there first in a way this transaction cannot see past (a
    PostgreSQL deadlock or serialization failure, or a key inserted concurrently): nothing
    of it was written, and the backend runs it again from the start."""


class CommitStats(NamedTuple):
    """COMMITs made, and the writes they made durable (group commit: writes > commits)."""

    commits: int
    writes: int


class Tx:
    """One open transaction, or a read, on a backend's connection.

    Statements are templates (see flowctl.store.dialect): `?` placeholders and `{token}`s,
    turned into this backend's statement once per template. Not thread-safe: it lives
    inside one transaction on one thread.
    """

    __slots__ = ("_cache", "conn", "dialect")

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn = conn
        self.dialect = dialect
        self._cache = dialect._cache

    def _sql(self, template: str) -> str:
        sql = self._cache.get(template)
        return sql if sql is not None else self.dialect.sql(template)

    def execute(self, template: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; the driver's cursor (rowcount, fetchone, fetchall, iteration)."""
        sql = self._cache.get(template)
        return self.conn.execute(sql if sql is not None else self.dialect.sql(template), params)

    def send(self, template: str, params: Sequence[Any] = ()) -> None:
        """Run one statement whose result nobody reads. A backend that pipelines
        (PostgreSQL) sends it without waiting for the server: its error, if any, is
        raised by the transaction's next statement that is read, by the end of the
        enclosing savepoint, or by the COMMIT — so only where such an error may fail the
        transaction (or that savepoint) as a whole."""
        sql = self._cache.get(template)
        self.conn.execute(sql if sql is not None else self.dialect.sql(template), params)

    def statement(self, template: str) -> Callable[[Sequence[Any]], Any]:
        """`template` made this backend's statement once, as a callable of its parameters
        (a C-level partial: no Python frame per call), for one run's statement in a loop
        over many (a claim's UPDATE per run). Sent as `send` sends: its result is not
        read. Valid inside this transaction only."""
        return functools.partial(self.conn.execute, self._sql(template))

    def one(self, template: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self.execute(template, params).fetchone()
        return row

    def all(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        rows: list[Row] = self.execute(template, params).fetchall()
        return rows

    def many(self, template: str, rows: Sequence[Sequence[Any]]) -> int:
        """One statement for each of `rows`; how many rows they changed in all."""
        if not rows:
            return 0
        cur = self.conn.cursor()
        try:
            cur.executemany(self._sql(template), rows)
            return int(cur.rowcount)
        finally:
            cur.close()

    def send_many(self, template: str, rows: Sequence[Sequence[Any]]) -> None:
        """`many`, for rows whose results nobody reads: sent as `send` sends (PostgreSQL
        does not wait for the server), so only where an error may fail the transaction,
        or the enclosing savepoint, as a whole."""
        self.many(template, rows)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """The block's statements undone alone if it raises; the transaction goes on."""
        self.conn.execute("SAVEPOINT flowctl_write")
        try:
            yield
        except BaseException:
            if self.alive():
                self.conn.execute("ROLLBACK TO flowctl_write")
                self.conn.execute("RELEASE flowctl_write")
            raise
        self.conn.execute("RELEASE flowctl_write")

    def alive(self) -> bool:
        """Whether the transaction is still open and usable after an error (SQLite rolls
        the whole transaction back on a full disk; a backend says)."""
        return True


class Database(Protocol):
    """A backend: its connection(s), how it runs a transaction, and what only it can do
    (the file of SQLite, the server of PostgreSQL). flowctl.store.core.StoreCore runs
    every procedure through one of these."""

    dialect: Dialect

    @property
    def path(self) -> str: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def location(self) -> str:
        """What another process opens to reach the same database (see Store.location)."""
        ...

    @property
    def durability(self) -> str: ...

    @property
    def refresh_interval(self) -> float | None:
        """Seconds after which the daemon re-reads its wheel even when data_version() has
        not moved (change notices that cross a network can be lost), or None."""
        ...

    def transact(self, fn: Callable[[Tx], R], *, single: bool = False, writes: int = 1) -> R:
        """Run `fn` as one write transaction, durable when this returns; nested in this
        thread's transaction, part of that one. `single`: `fn` needs no savepoint of its
        own in a shared group where a failed statement is undone alone: it changes the
        database with at most one statement and nothing fails after it, or (a write
        round) with writes that are each whole or undone on their own. `writes`: how many
        callers' writes `fn` makes durable (a round's), for commit_stats."""
        ...

    def reading(self) -> AbstractContextManager[Tx]:
        """A Tx for reads (inside this thread's write transaction, that one)."""
        ...

    def snapshot(self) -> AbstractContextManager[Tx]:
        """A Tx for several reads that see one snapshot."""
        ...

    def fault(self, error: Exception) -> Exception:
        """A driver error as the one-line error a caller gets (others unchanged)."""
        ...

    def close(self) -> None: ...

    def data_version(self) -> int: ...

    def own_writes(self) -> AbstractContextManager[None]: ...

    def set_group_commit(self, on: bool) -> None: ...

    def take_turns(self) -> None: ...

    def writers(self, n: int) -> None: ...

    def file_replaced(self) -> str | None: ...

    def file_identity(self) -> tuple[int, int] | None: ...

    def free_bytes(self) -> int | None: ...

    def integrity_check(self) -> str: ...

    def pragmas(self) -> dict[str, int | str]: ...

    def pending_writes(self) -> int: ...

    def commit_stats(self) -> CommitStats: ...

    def vacuum(self) -> tuple[int, int]: ...

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> None: ...

    def table_columns(self, table: str) -> list[str]:
        """A table's columns in order (flowctl copy)."""
        ...


class _ThreadState(threading.local):
    """Each thread's view of its writes; class defaults, so a first look raises nothing."""

    depth = 0  # inside this thread's write transaction: a nested write is part of it
    own = 0  # inside own_writes(): this thread's commits do not move data_version
    tx: Any = None  # this thread's open transaction (PostgreSQL: on a pooled connection)


class BaseDatabase:
    """What both backends keep alike: own_writes, the commit counters, and the defaults
    of what only one of them can do (a file's identity, free space, turn-taking)."""

    refresh_interval: float | None = None
    path: str
    location: str
    durability: str
    read_only: bool

    def __init__(self) -> None:
        self._tl = _ThreadState()
        self._pending = 0  # writers in flight
        self._commits = 0  # COMMITs done, and the writes they held: see commit_stats()
        self._writes_committed = 0

    @contextmanager
    def own_writes(self) -> Iterator[None]:
        """Mark this thread's writes as the caller's own while the block runs.

        The daemon wraps its loop and workers in this: it keeps its wheel true from what
        its writes return, so they need not show in data_version(). Writes through this
        same store from any other thread (a test, a client, the TUI in the same process)
        do, as another connection's commits would."""
        self._tl.own += 1
        try:
            yield
        finally:
            self._tl.own -= 1

    def pending_writes(self) -> int:
        """Writers in flight: inside a write or queued for a connection (a test sees
        writers line up)."""
        return self._pending

    def commit_stats(self) -> CommitStats:
        """COMMITs made and the writes they made durable, since this store opened."""
        return CommitStats(self._commits, self._writes_committed)

    def set_group_commit(self, on: bool) -> None:
        """Let concurrent writers share one commit (where the backend can)."""

    def take_turns(self) -> None:
        """Take turns with other processes' writers (where the backend can)."""

    def writers(self, n: int) -> None:
        """`n` threads of this process may write at once (where each needs a connection)."""

    def file_replaced(self) -> str | None:
        """A server database has no file to be deleted or replaced under the daemon."""
        return None

    def file_identity(self) -> tuple[int, int] | None:
        return None

    def free_bytes(self) -> int | None:
        """None: the server's disk is the server's to watch."""
        return None

    def integrity_check(self) -> str:
        return "ok"
