"""The PostgreSQL backend: the pool, one transaction per write (run again when the server
rolls it back for a deadlock or a serialization failure), reads, and change notices
(data_version, the in-process broadcast, LISTEN/NOTIFY).

Rows a transaction reads to decide a write are locked by its statements (the dialect's
FOR UPDATE / FOR SHARE), so concurrent writers on many hosts serialise per run exactly
as SQLite's single writer does; claims lock their candidates with FOR UPDATE SKIP LOCKED,
so daemons never wait on each other's claims and never claim the same run.

Change detection: every commit that writes runs, signals, schedules and what a reader
shows NOTIFYs one channel (a trigger, so any client's writes count); `data_version()`
counts those from other processes (LISTEN on a connection of its own), and writes by this
process's stores at once (except this store's own_writes(), as on SQLite);
`refresh_interval` asks the daemon for a bounded safety re-read besides.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

from flowctl.clock import SystemClock
from flowctl.config import mask_password
from flowctl.errors import (
    DatabaseError,
    DatabaseNotFoundError,
    DatabaseUnavailable,
    FlowctlError,
)
from flowctl.model import to_us
from flowctl.store.dialect import POSTGRES
from flowctl.store.postgres import schema
from flowctl.store.postgres.connect import (
    cause,
    connect,
    describe,
    driver,
    session_options,
    unstorable,
)
from flowctl.store.postgres.outage import Availability, is_outage, pool_class, ride_out
from flowctl.store.sql import BaseDatabase, TransactionConflict, Tx

R = TypeVar("R")
Conn = Any  # a psycopg.Connection; Any so that a SQLite-only install type-checks too

CHANNEL = "flowctl_changes"
BACKSTOP_S = 5.0  # the daemon re-reads its wheel at least this often: a bounded safety net
POOL_MAX = 10
POOL_TIMEOUT_S = 15.0
RELISTEN_S = 1.0  # a lost LISTEN connection is reopened at most this often (not every poll)
# deadlock_detected and serialization_failure: the server rolled the transaction back so
# that another could go on; run from the start again, it sees the other's commit.
CONFLICTS = frozenset({"40P01", "40001"})
CONFLICT_TRIES = 5  # in all, the first included
CONFLICT_BACKOFF_S = 0.01  # the first retry waits up to this, doubling each time after
# Every table flowctl keeps (constants: VACUUM takes no parameters).
_TABLES = (
    "runs, journal, versions, timeline, signals, published, output, notifications, daemons,"
    " schedules, schedule_history, meta, run_counts, run_count_deltas, definitions, sources"
)

# The stores open in this process, by URL: a write through one is seen by the others at once.
_OPEN: dict[str, weakref.WeakSet[PostgresDatabase]] = {}
# The server processes of this process's open pooled connections: a NOTIFY from one of
# them is recognised by its sender's pid and ignored (the write was seen at once in
# process). A closed store's pids leave it: the server may give a pid to another client.
_OWN_PIDS: set[int] = set()

log = logging.getLogger(__name__)


def conflict_backoff(attempt: int, rand: float) -> float:
    """Seconds to wait after failed try `attempt` (1, 2, ...), for `rand` in [0, 1): full
    jitter under a doubling cap, so two transactions that deadlocked do not meet again in
    step."""
    return rand * CONFLICT_BACKOFF_S * (1 << (attempt - 1))


def retry_conflicts(once: Callable[[], R], what: str) -> R:
    """`once()`, run again from the start while it raises TransactionConflict, up to
    CONFLICT_TRIES tries in all with jittered backoff between; `what` names it in the log."""
    for attempt in range(1, CONFLICT_TRIES + 1):
        try:
            return once()
        except TransactionConflict as e:
            if attempt == CONFLICT_TRIES:
                raise TransactionConflict(f"{e} (gave up after {attempt} tries)") from None
            wait = conflict_backoff(attempt, random.random())
            log.info("%s: %s; try %d in %.3f s", what, e, attempt + 1, wait)
            time.sleep(wait)
    raise RuntimeError("unreachable")  # the loop returns or raises


class _PgTx(Tx):
    """A transaction in pipeline mode: `send` (and `statement`) queue a statement without
    waiting; everything else waits for the server's answer (a sync), so a rowcount, a
    row or an error belongs to the statement that asked for it."""

    __slots__ = ("_broken", "_pipe", "_unsynced")

    def __init__(self, conn: Conn, pipe: Any = None) -> None:
        super().__init__(conn, POSTGRES)
        self._pipe = pipe  # None: not pipelined (a read), every statement waits anyway
        # A savepoint that could not be rolled back to: the error came from a statement
        # sent before it (its SAVEPOINT was never run), so the transaction is lost whole.
        self._broken = False
        self._unsynced = False  # statements sent since the last sync (their answers due)

    def _sync(self) -> None:
        if self._pipe is not None:
            self._pipe.sync()
        self._unsynced = False

    def execute(self, template: str, params: Sequence[Any] = ()) -> Any:
        cur = self.conn.execute(self._sql(template), params)
        self._sync()
        return cur

    def send(self, template: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(self._sql(template), params)
        self._unsynced = True

    def statement(self, template: str) -> Callable[[Sequence[Any]], Any]:
        sql, execute = self._sql(template), self.conn.execute

        def sent(params: Sequence[Any]) -> None:
            execute(sql, params)
            self._unsynced = True

        return sent

    def many(self, template: str, rows: Sequence[Sequence[Any]]) -> int:
        if not rows:
            return 0
        with self.conn.cursor() as cur:
            cur.executemany(self._sql(template), rows)
            self._sync()  # the rowcount arrives with the results
            return int(cur.rowcount)

    def send_many(self, template: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(template), rows)  # answered by the next sync
            self._unsynced = True

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """As Tx.savepoint, one round trip: the block's statements are sent behind the
        SAVEPOINT and their errors raised by the sync that ends the block (none when the
        block's last statement waited for its answer: nothing is left to hear)."""
        try:
            self.send("SAVEPOINT flowctl_write")
        except BaseException:
            self._broken = True  # an error of a statement sent before it: nothing to go back to
            raise
        try:
            yield
            if self._unsynced:
                self._sync()
        except BaseException:
            if self.alive():
                try:
                    self.send("ROLLBACK TO flowctl_write")
                    self.execute("RELEASE flowctl_write")
                except Exception:
                    # PostgreSQL would answer the COMMIT of this failed transaction with a
                    # ROLLBACK, and no error: said here, so no writer is told it was kept.
                    self._broken = True
                    raise
            raise
        self.send("RELEASE flowctl_write")

    def _settle(self) -> None:
        """Take the answers of what was sent, their errors dropped: the block's own error
        is the one raised (a sent statement's, when it is one, was raised by the sync)."""
        if self._pipe is not None and self._unsynced:
            with contextlib.suppress(driver().Error):
                self._sync()

    def alive(self) -> bool:
        """A transaction is open, if failed (a savepoint's rollback makes it usable again).
        What was sent is answered first: until then the status says only "busy"."""
        from psycopg.pq import TransactionStatus

        if self._broken:
            return False
        self._settle()
        status = self.conn.info.transaction_status
        return status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)


class PostgresDatabase(BaseDatabase):
    """One PostgreSQL database. Thread-safe: each call takes a pooled connection."""

    dialect = POSTGRES
    # NOTIFYs cross a network and a LISTEN connection can drop unseen: the daemon refills
    # its wheel at least this often (seconds, its own clock) as a backstop.
    refresh_interval: float | None = BACKSTOP_S

    def __init__(
        self, url: str, *, durability: str = "full", create: bool = True, pool_max: int = POOL_MAX
    ) -> None:
        """Connect to the database at `url` and create or migrate its schema.

        Without `create`, a database with no flowctl schema is a DatabaseNotFoundError and
        nothing is created. A server that cannot be reached, refuses the login or has no
        such database is one line naming the server and the cause.
        """
        super().__init__()
        self.url = self.location = url.strip()
        self.path = mask_password(
            self.url.strip()
        )  # what messages and front ends show: no password
        self.where = describe(self.url)
        self.availability = Availability(self.where)  # outages said once, going and back
        if durability not in ("full", "normal"):
            raise FlowctlError(f"durability must be 'full' or 'normal', got {durability!r}")
        self.durability = durability
        self.read_only = False  # a login that cannot write is a server-side error on write
        self._pids: set[int] = set()  # the server pids of this store's pooled connections
        # Opening meets a restart like any call: ridden out briefly (outage.ride_out).
        ride_out(lambda: self._migrate(create), "opening the database")
        self._pool = self._open_pool(pool_max)
        self._listen_lock = threading.Lock()
        self._listener: Conn | None = None
        self._listen_at = 0.0  # monotonic time of the last attempt to (re)open it
        self._version = 0
        self._stats_lock = threading.Lock()
        self._listen()
        _OPEN.setdefault(self.url, weakref.WeakSet()).add(self)

    def _migrate(self, create: bool) -> None:
        first = connect(self.url)
        try:
            _configure(first)
            row = first.execute("SELECT to_regclass('flowctl_schema') IS NOT NULL").fetchone()
            if not create and not (row and row[0]):
                raise DatabaseNotFoundError(self.path)
            now_us = lambda: to_us(SystemClock().now())  # noqa: E731  (applied_at)
            try:
                schema.migrate(first, f"PostgreSQL database {self.where}", now_us)
            except driver().errors.InsufficientPrivilege as e:
                raise DatabaseError(
                    f"PostgreSQL at {self.where} refused to create flowctl's tables"
                    f" ({cause(e)}): use a database the login owns, or GRANT CREATE on its"
                    " schema to the login"
                ) from None
            except driver().Error as e:
                raise self.fault(e) from None
        finally:
            first.close()

    def writers(self, n: int) -> None:
        """A connection for each of `n` threads writing at once (a daemon's `--threads`
        handlers): with fewer, a handler waits for another's connection to come back."""
        self._pool.resize(min_size=1, max_size=max(POOL_MAX, n))

    def _open_pool(self, pool_max: int) -> Any:
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 10, **session_options()}
        if self.durability == "normal":  # a commit returns before its WAL is flushed
            kwargs["options"] += " -c synchronous_commit=off"
        return pool_class()(
            self.url,
            min_size=1,
            max_size=pool_max,
            kwargs=kwargs,
            configure=self._configure_pooled,
            timeout=POOL_TIMEOUT_S,
            open=True,
            name=f"flowctl-{self.where}",
        )

    def close(self) -> None:
        _OPEN.get(self.url, weakref.WeakSet()).discard(self)
        with self._listen_lock:
            if self._listener is not None:
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None
        self._pool.close()
        _OWN_PIDS.difference_update(self._pids)

    def _configure_pooled(self, conn: Conn) -> None:
        _configure(conn)
        pid = conn.info.backend_pid
        self._pids.add(pid)
        _OWN_PIDS.add(pid)

    def fault(self, error: Exception) -> Exception:
        """A server error as one line naming the server (others as they are)."""
        pg = driver()
        if not isinstance(error, pg.Error):
            return error
        if getattr(error, "sqlstate", None) in CONFLICTS:
            return TransactionConflict(f"PostgreSQL at {self.where}: {cause(error)}")
        refused = unstorable(error)
        if refused is not None:
            return refused
        if isinstance(error, pg.IntegrityError | pg.ProgrammingError):
            passed: Exception = error  # a statement's own bug: as it is
            return passed
        if isinstance(error, pg.OperationalError | pg.InterfaceError):
            if is_outage(error) or getattr(error, "sqlstate", None) is None:
                return DatabaseUnavailable(
                    f"PostgreSQL at {self.where} is unavailable: {cause(error)}"
                )
            return DatabaseError(
                f"lost the connection to PostgreSQL at {self.where}: {cause(error)}"
            )
        return DatabaseError(f"PostgreSQL at {self.where}: {cause(error)}")

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        """A pooled connection; a driver error as `fault` says, an outage noted (once)."""
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            e: Exception = DatabaseUnavailable(
                f"cannot connect to PostgreSQL at {self.where}: no connection within"
                f" {POOL_TIMEOUT_S:g} s (is the server running?)"
            )
        except driver().Error as error:
            e = self.fault(error)
        else:
            self.availability.answered()
            return
        if isinstance(e, DatabaseUnavailable) and self.availability.lost(e):
            self._drop_dead()  # the first to meet it: the other idle connections are dead too
        raise e from None

    # -- transactions --------------------------------------------------------------

    def transact(self, fn: Callable[[Tx], R], *, single: bool = False, writes: int = 1) -> R:
        """`fn` in one transaction on a pooled connection, committed with a NOTIFY; run
        again from the start, up to CONFLICT_TRIES times with jittered backoff, when the
        server rolls it back for a deadlock or a serialization failure (or `fn` finds a
        concurrent writer got there first). Nested in this thread's transaction, part of
        that one."""
        tx = self._tl.tx
        if tx is not None:
            return fn(tx)
        what = getattr(fn, "__qualname__", "a transaction")
        return ride_out(
            lambda: retry_conflicts(lambda: self._once(fn, writes), what),
            what,
            on_outage=self._drop_dead,
        )

    def _drop_dead(self) -> None:
        """After an outage: test the pool's idle connections now, so that those the server
        ended are discarded (and replaced) together, not each found dead by a later call."""
        with contextlib.suppress(Exception):
            self._pool.check()

    def _once(self, fn: Callable[[Tx], R], writes: int) -> R:
        with self._stats_lock:
            self._pending += 1
        try:
            result = self._commit(fn)
            with self._stats_lock:
                self._commits += 1
                self._writes_committed += writes
            # Stores of this process see it at once, as with SQLite's data_version (the
            # trigger's NOTIFY reaches them a little later and is ignored: it comes from
            # one of this process's connections).
            own = bool(self._tl.own)
            for store in list(_OPEN.get(self.url, ())):
                if store is not self or not own:
                    store._changed()
            return result
        finally:
            with self._stats_lock:
                self._pending -= 1

    def _commit(self, fn: Callable[[Tx], R]) -> R:
        """`fn` in one transaction on a pooled connection. A connection lost before the
        COMMIT was sent is a plain DatabaseUnavailable (the server rolled it back: safe to
        run again); one lost during the COMMIT is `unsure`."""
        committing = False
        try:
            # Pipeline mode: what a transaction only sends (a claim's UPDATE per run, a
            # round's savepoints) rides with the next statement it waits for.
            with self._connection() as conn, conn.pipeline() as pipe:
                self._tl.tx = tx = _PgTx(conn, pipe)
                try:
                    with conn.transaction():
                        result = fn(tx)
                        committing = True  # the block's exit sends the COMMIT
                finally:
                    self._tl.tx = None
            return result
        except DatabaseUnavailable as e:
            if not committing:
                raise
            raise DatabaseUnavailable(
                f"{e}; the connection went during COMMIT, so that write may or may not have"
                " been made",
                unsure=True,
            ) from None

    @contextlib.contextmanager
    def reading(self) -> Iterator[Tx]:
        tx = self._tl.tx
        if tx is not None:
            yield tx
            return
        with self._connection() as conn:
            yield _PgTx(conn)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """Several reads that see one snapshot (REPEATABLE READ, READ ONLY), as one SQLite
        read transaction does; inside this thread's write, that write's transaction."""
        tx = self._tl.tx
        if tx is not None:
            yield tx
            return
        with self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _PgTx(conn)

    # -- change notices ------------------------------------------------------------

    def _listen(self) -> None:
        """(Re)open the LISTEN connection; holding no lock."""
        self._listen_at = time.monotonic()
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
        if listener is None and time.monotonic() - self._listen_at >= RELISTEN_S:
            self._listen()  # at most once a RELISTEN_S while the server is away
        return version

    # -- the server's own ----------------------------------------------------------

    def pragmas(self) -> dict[str, int | str]:
        """The server settings that bear on durability, for diagnostics."""
        with self.reading() as tx:
            rows = tx.all(
                "SELECT name, setting FROM pg_settings WHERE name IN"
                " ('synchronous_commit', 'fsync', 'default_transaction_isolation')"
            )
        return {r[0]: r[1] for r in rows}

    def table_columns(self, table: str) -> list[str]:
        with self.reading() as tx:
            rows = tx.all(
                "SELECT column_name FROM information_schema.columns WHERE table_schema ="
                " current_schema() AND table_name = ? ORDER BY ordinal_position",
                [table],
            )
        return [str(r[0]) for r in rows]

    def vacuum(self) -> tuple[int, int]:
        """VACUUM (ANALYZE) flowctl's tables: the space of deleted rows is reused by new ones
        and the planner's statistics are fresh; writers do not wait (no VACUUM FULL, which
        would lock every daemon out). Returns the database's size before and after."""
        size = "SELECT pg_database_size(current_database())"
        with self._connection() as c:  # autocommit: VACUUM runs outside a transaction
            before = int(c.execute(size).fetchone()[0])
            try:
                c.execute(f"VACUUM (ANALYZE) {_TABLES}")
            except driver().Error as e:
                raise DatabaseError(f"vacuum of PostgreSQL at {self.where} failed: {e}") from None
            return before, int(c.execute(size).fetchone()[0])

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> NoReturn:
        """`flowctl backup` writes a checked SQLite file; a server database is backed up by
        the server's tools, which keep its roles, settings and consistency while the fleet
        writes. Refuses in one line, writing nothing, and says which tool."""
        raise FlowctlError(
            f"flowctl backup copies a SQLite file; {self.path} is a PostgreSQL database:"
            f" back it up with pg_dump (e.g. pg_dump -Fc -f flowctl.dump '{self.path}')"
        )


def _configure(conn: Conn) -> None:
    """json and jsonb arrive as their text, parsed by the same json.loads as in SQLite."""
    from psycopg.types.string import TextLoader

    conn.adapters.register_loader("json", TextLoader)
    conn.adapters.register_loader("jsonb", TextLoader)
