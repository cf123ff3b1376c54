"""The PostgreSQL store's connection layer: the pool, one transaction per write, reads,
retries of transactions the server rolled back for a deadlock or a serialization failure,
and change notices (data_version, the in-process broadcast, LISTEN)."""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from flowctl.errors import (
    DatabaseError,
    DatabaseNotFoundError,
    FlowctlError,
)
from flowctl.store.postgres import schema
from flowctl.store.postgres.connect import (
    cause,
    connect,
    describe,
    driver,
    redact,
    session_options,
    unstorable,
)
from flowctl.store.postgres.rows import (
    _OWN_PIDS,
    BACKSTOP_S,
    CHANNEL,
    POOL_MAX,
    POOL_TIMEOUT_S,
    Conn,
    _configure,
    _configure_pooled,
    _has_schema,
    to_us_now,
)
from flowctl.store.sqlite.connection import CommitStats

# The stores open in this process, by URL: a write through one is seen by the others at once.
_OPEN: dict[str, weakref.WeakSet[PostgresConnection]] = {}

log = logging.getLogger(__name__)

# deadlock_detected and serialization_failure: the server rolled the transaction back so
# that another could go on; run from the start again, it sees the other's commit.
CONFLICTS = frozenset({"40P01", "40001"})
CONFLICT_TRIES = 5  # in all, the first included
CONFLICT_BACKOFF_S = 0.01  # the first retry waits up to this, doubling each time after


class ConflictError(DatabaseError):
    """A transaction the server rolled back for a deadlock or a serialization failure
    (nothing of it was written); retried() runs it again, a bounded number of times."""


def conflict_backoff(attempt: int, rand: float) -> float:
    """Seconds to wait after failed try `attempt` (1, 2, ...), for `rand` in [0, 1): full
    jitter under a doubling cap, so two transactions that deadlocked do not meet again in
    step."""
    return rand * CONFLICT_BACKOFF_S * (1 << (attempt - 1))


S = TypeVar("S", bound="PostgresConnection")
P = ParamSpec("P")
R = TypeVar("R")


def retried(op: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Make a store operation (one transaction: one `with self._write()`, and nothing it
    does outside it) run again from the start when the server rolls its transaction back
    for a deadlock or a serialization failure, up to CONFLICT_TRIES tries in all, with
    jittered backoff between. Called inside this thread's transaction, it is part of that
    one: the outermost operation is the one retried. Every write operation of the store
    carries it (tests/test_pg_retry.py checks that none lacks it)."""

    @functools.wraps(op)
    def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if getattr(self._tl, "conn", None) is not None:
            return op(self, *args, **kwargs)
        for attempt in range(1, CONFLICT_TRIES + 1):
            try:
                return op(self, *args, **kwargs)
            except ConflictError as e:
                if attempt == CONFLICT_TRIES:
                    raise ConflictError(f"{e} (gave up after {attempt} tries)") from None
                wait = conflict_backoff(attempt, random.random())
                log.info("%s: %s; try %d in %.3f s", op.__name__, e, attempt + 1, wait)
                time.sleep(wait)
        raise AssertionError("unreachable")  # the loop returns or raises

    run.retries_conflicts = True  # type: ignore[attr-defined]
    return run


class PostgresConnection:
    """One PostgreSQL database. Thread-safe: each call takes a pooled connection."""

    """One PostgreSQL database. Thread-safe: each call takes a pooled connection."""

    # NOTIFYs cross a network and a LISTEN connection can drop unseen: the daemon refills
    # its wheel at least this often (seconds, its own clock) as a backstop.
    refresh_interval = BACKSTOP_S

    def __init__(
        self,
        url: str,
        *,
        durability: str = "full",
        create: bool = True,
        allow_read_only: bool = False,
        pool_max: int = POOL_MAX,
    ) -> None:
        """Connect to the database at `url` and create or migrate its schema.

        Without `create`, a database with no flowctl schema is a DatabaseNotFoundError and
        nothing is created. A server that cannot be reached, refuses the login or has no
        such database is one line naming the server and the cause.
        """
        self.url = url.strip()
        self.path = redact(self.url)  # what messages and front ends show: no password
        self.where = describe(self.url)
        if durability not in ("full", "normal"):
            raise FlowctlError(f"durability must be 'full' or 'normal', got {durability!r}")
        self.durability = durability
        self.read_only = False
        del allow_read_only  # a login that cannot write is a server-side error on write
        first = connect(self.url)
        try:
            _configure(first)
            if not create and not _has_schema(first):
                raise DatabaseNotFoundError(self.path)
            try:
                schema.migrate(first, f"PostgreSQL database {self.where}", lambda: to_us_now())
            except driver().Error as e:
                raise self._fault(e) from None
        finally:
            first.close()
        from psycopg_pool import ConnectionPool

        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 10, **session_options()}
        if durability == "normal":  # a commit returns before its WAL is flushed
            kwargs["options"] += " -c synchronous_commit=off"
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=pool_max,
            kwargs=kwargs,
            configure=_configure_pooled,
            timeout=POOL_TIMEOUT_S,
            open=True,
            name=f"flowctl-{self.where}",
        )
        self._tl = threading.local()
        self._listen_lock = threading.Lock()
        self._listener: Conn | None = None
        self._version = 0
        self._commits = 0
        self._stats_lock = threading.Lock()
        self._pending = 0
        self._listen()
        _OPEN.setdefault(self.url, weakref.WeakSet()).add(self)

    def close(self) -> None:
        _OPEN.get(self.url, weakref.WeakSet()).discard(self)
        with self._listen_lock:
            if self._listener is not None:
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_group_commit(self, on: bool) -> None:
        """Nothing to do: PostgreSQL commits concurrent writers' transactions together."""

    def free_bytes(self) -> int | None:
        """None: the server's disk is the server's to watch."""
        return None

    def file_replaced(self) -> str | None:
        """A server database has no file to be deleted or replaced under the daemon."""
        return None

    def _fault(self, e: BaseException) -> FlowctlError:
        """A server error as one line naming the server."""
        pg = driver()
        if isinstance(e, pg.OperationalError | pg.InterfaceError):
            return DatabaseError(f"lost the connection to PostgreSQL at {self.where}: {cause(e)}")
        return DatabaseError(f"PostgreSQL at {self.where}: {cause(e)}")

    @contextlib.contextmanager
    def own_writes(self) -> Iterator[None]:
        """Mark this thread's writes as the caller's own while the block runs: they are not
        counted by this store's data_version() (as in the SQLite store)."""
        self._tl.own = getattr(self._tl, "own", 0) + 1
        try:
            yield
        finally:
            self._tl.own -= 1

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        pg = driver()
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {self.where}: no connection within"
                f" {POOL_TIMEOUT_S:g} s (is the server running?)"
            ) from None
        except pg.Error as e:
            if getattr(e, "sqlstate", None) in CONFLICTS:
                raise ConflictError(f"PostgreSQL at {self.where}: {cause(e)}") from None
            if isinstance(e, pg.OperationalError | pg.InterfaceError):
                raise self._fault(e) from None
            refused = unstorable(e)
            if refused is not None:
                raise refused from None
            raise

    @contextlib.contextmanager
    def _write(self) -> Iterator[Conn]:
        """One transaction; nested in this thread's write it is part of that one. Commits
        with a NOTIFY, so other stores' data_version() see the change."""
        conn = getattr(self._tl, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._stats_lock:
            self._pending += 1
        try:
            with self._connection() as conn:
                self._tl.conn = conn
                try:
                    with conn.transaction():
                        yield conn
                finally:
                    self._tl.conn = None
            with self._stats_lock:
                self._commits += 1
            # Stores of this process see it at once, as with SQLite's data_version (the
            # trigger's NOTIFY reaches them a little later and is ignored: it comes from one
            # of this process's connections).
            own = bool(getattr(self._tl, "own", 0))
            for store in list(_OPEN.get(self.url, ())):
                if store is not self or not own:
                    store._changed()
        finally:
            with self._stats_lock:
                self._pending -= 1

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Conn]:
        conn = getattr(self._tl, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[Conn]:
        """Several reads that see one snapshot (REPEATABLE READ, READ ONLY), as one SQLite
        read transaction does; inside this thread's write, that write's transaction."""
        conn = getattr(self._tl, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    @retried  # a read under SERIALIZABLE can fail with a serialization failure too
    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as c:
            rows: list[Any] = c.execute(sql, params).fetchall()
            return rows

    def _listen(self) -> None:
        """(Re)open the LISTEN connection; holding no lock."""
        try:
            conn = connect(self.url)
            conn.execute(f"LISTEN {CHANNEL}")
        except FlowctlError:
            conn = None
        with self._listen_lock:
            self._listener = conn

    def _changed(self) -> None:
        with self._listen_lock:
            self._version += 1

    def data_version(self) -> int:
        """Changes when another writer commits, or when this store is written outside
        own_writes(); reads the queued NOTIFYs, no query. A lost LISTEN connection counts
        as a change (notices may have been missed) and is reopened."""
        with self._listen_lock:
            listener = self._listener
            changed = False
            if listener is not None:
                try:
                    for n in listener.notifies(timeout=0):
                        if n.pid not in _OWN_PIDS:  # a writer outside this process's stores
                            changed = True
                except driver().Error:
                    listener = self._listener = None
                    changed = True
            if changed:
                self._version += 1
            version = self._version
        if listener is None:
            self._listen()
        return version

    def integrity_check(self) -> str:
        return "ok"

    def pragmas(self) -> dict[str, int | str]:
        """The server settings that bear on durability, for diagnostics."""
        rows = self._read(
            "SELECT name, setting FROM pg_settings WHERE name IN"
            " ('synchronous_commit', 'fsync', 'default_transaction_isolation')"
        )
        return {r[0]: r[1] for r in rows}

    def pending_writes(self) -> int:
        with self._stats_lock:
            return self._pending

    def commit_stats(self) -> CommitStats:
        with self._stats_lock:
            return CommitStats(self._commits, self._commits)
