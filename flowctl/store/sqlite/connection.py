"""The SQLite connection: one lock, group commit, the batch runner's rounds, read-only mode.

Opening and inspecting the file is flowctl.store.sqlite.opening."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Self

from flowctl.errors import (
    DiskFullError,
    FlowctlError,
    ReadOnlyDatabaseError,
)
from flowctl.store.sqlite.opening import (
    fault as fault_of,
)
from flowctl.store.sqlite.opening import (
    identity,
    open_database,
    retry_locked,
)

GROUP_MAX_WRITES = 256  # group commit: at most this many writes share one COMMIT
GROUP_MAX_AGE = 0.005  # ... and a group stays open at most this long (seconds)
TURN_SUFFIX = "-lock"  # the lock file daemons take turns on (see take_turns)
_monotonic = time.monotonic


class CommitStats(NamedTuple):
    """Counters of Store.commit_stats(): COMMITs made, and the writes they made durable."""

    commits: int
    writes: int


class _ThreadState(threading.local):
    """Each thread's view of its writes; class defaults, so a thread's first look at one
    raises (and formats) no AttributeError: `_write` looks at them several times a step."""

    depth = 0  # inside this thread's write: a nested write is part of it
    own = 0  # inside own_writes(): this thread's commits do not move data_version
    park: Callable[[], None] | None = None  # the batch runner's parker (set_parker)
    burst: Callable[[], None] | None = None  # ... and its wait for the round's writes


class _Deferred:
    """One deferred write (SqliteConnection.deferred): its statement (or its kind's key)
    and parameters, the function that writes a round's writes of its kind together (None:
    its one statement, by executemany), and once its round has run it, whether it
    applied, its error, and its group."""

    __slots__ = ("applied", "error", "group", "params", "sql", "write")

    def __init__(
        self,
        sql: str,
        params: Any,
        write: Callable[[sqlite3.Connection, list[_Deferred]], None] | None,
    ) -> None:
        self.sql, self.params, self.write = sql, params, write
        self.applied = False
        self.error: BaseException | None = None
        self.group = 0


class SqliteConnection:
    """The connection every job of SqliteStore writes and reads through: one lock, one
    `BEGIN IMMEDIATE` per write (or a shared one under group commit)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        create: bool = True,
        allow_read_only: bool = False,
    ) -> None:
        """Open (with `create`, create) the database at `path`.

        Refuses, changing nothing, a file that is not flowctl's, has a newer or invalid
        schema, or is corrupt. Without `create` a missing file is a DatabaseNotFoundError
        and nothing is created. With `allow_read_only` a file this process cannot write is
        opened read-only (`read_only` is then True and every write raises
        ReadOnlyDatabaseError); without it that is the error at once.
        """
        self.path = str(path)
        if not self.path:
            raise FlowctlError("the database path is empty: give a file name")
        if durability not in ("full", "normal"):
            raise FlowctlError(f"durability must be 'full' or 'normal', got {durability!r}")
        self.durability = durability
        self._lock = threading.RLock()
        self._conn, self.read_only = open_database(
            self.path, durability, create=create, allow_read_only=allow_read_only
        )
        # The open file's identity: the daemon compares it with the path's (file_replaced).
        self._identity = identity(self.path)
        # Group commit (see set_group_commit): writers in flight, the open group, its commit.
        self._group_commit = False
        self._gc = threading.Condition(threading.Lock())
        self._gc_pending = 0
        self._txn_open = False
        self._group_id = 0
        self._group_writes = 0
        self._group_started = 0.0
        self._committed_id = 0
        # A failed group's error and how many of its writers have yet to be told.
        self._group_errors: dict[int, tuple[BaseException, int]] = {}
        self._commits = 0  # COMMITs done and the writes they held: see commit_stats()
        self._writes_committed = 0
        self._tl = _ThreadState()
        self._deferred: list[_Deferred] = []  # the batch runner's, for its round (deferred)
        self._turn: int | None = None  # the lock file's descriptor once take_turns() is on
        self._foreign_writes = 0  # commits made outside own_writes() (see data_version)

    # -- plumbing ----------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._turn is not None:
                os.close(self._turn)
                self._turn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_group_commit(self, on: bool) -> None:
        """Let writers on several threads share one COMMIT, and so one fsync.

        Each writer's statements run in a SAVEPOINT inside a shared BEGIN IMMEDIATE
        transaction; the last writer in flight (or one that finds the group full or
        old) commits it, and every `_write` returns only after the COMMIT that made its
        changes durable. A failed writer rolls back its savepoint only. Durability is
        unchanged; only the number of fsyncs drops. The daemon turns it on when it runs
        several workers.
        """
        self._group_commit = on

    def set_parker(
        self, park: Callable[[], None] | None, burst: Callable[[], None] | None = None
    ) -> None:
        """On this thread, leave the COMMIT of a shared group to its caller (the batch
        runner, flowctl.batch): a write whose changes are not yet committed calls `park`
        until they are, instead of committing or waiting itself. `park` must return only
        after a COMMIT (commit_pending) or on a failed group; the write then returns, or
        raises the group's error, as it would have.

        `burst`, if given, is called by a write that would open a transaction, before it
        does: the runner returns from it when it gathers its round's writes into one
        transaction (or at once, from within that gathering). So the write lock is held
        for the round's statements only, not while its handlers run Python, and another
        process's daemon writes meanwhile (see take_turns)."""
        self._tl.park = park
        self._tl.burst = burst

    def take_turns(self) -> None:
        """Take the lock file `<db>-lock` (flock) around each write transaction.

        SQLite's own lock keeps writers apart, but a writer that finds it taken sleeps in
        SQLite's busy handler (1 ms, then 2, 5, ...): two daemons on one file, each writing
        a round in about a millisecond, spent those sleeps idle. A writer waiting on the
        flock is woken the moment the other's COMMIT ends, so their rounds alternate and
        each runs its handlers' Python while the other writes (issue 14). The file holds
        nothing; a process that dies releases its lock with it. It only orders writers:
        SQLite's lock still decides. Without a file we can create or open (a read-only
        folder), writers wait on SQLite alone, as before.
        """
        if self._turn is not None or self.read_only or self.path == ":memory:":
            return
        try:
            self._turn = os.open(
                self.path + TURN_SUFFIX, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
        except OSError:
            self._turn = None

    def deferred(
        self,
        sql: str,
        params: Any,
        write: Callable[[sqlite3.Connection, list[_Deferred]], None] | None = None,
    ) -> bool | None:
        """Run a write in the batch runner's round, together with the round's other writes
        of the same kind; True if it applied, False if not (its lease was lost).

        By default the write is the one statement `sql` with `params`, run with the
        others by one executemany (its rowcount 1: the statement's own condition, a
        fence check, held). `write` writes a kind of several statements: it is given
        the round's writes with the same `sql` (a key), sets each one's `applied`, and
        raises to fail the whole group (so no write is left half done).

        Only the batch runner's greenlets defer (a parker set, under group commit, not
        inside a write): on None the caller writes itself. The write is durable when this
        returns, as a `_write` is: the greenlet parks until the round's COMMIT, and the
        round runs the deferred writes first (write_deferred). While the write lock is
        held only the statements run: no greenlet switch, no Python of the writer's own.
        """
        tl = self._tl
        park = tl.park if self._group_commit else None
        if park is None or tl.depth or tl.burst is None:
            return None
        item = _Deferred(sql, params, write)
        self._deferred.append(item)
        while item.error is None and (not item.group or self._committed_id < item.group):
            park()  # the runner runs it in its round, and resumes this after the COMMIT
            if item.error is None and not item.group:  # resumed before a round ran it
                self.write_deferred()
                self.commit_pending()
        if item.error is not None:
            raise item.error
        if self._group_errors:
            with self._gc:
                failed = self._group_failure(item.group)
            if failed is not None:
                raise self._commit_failed(failed) from failed
        return item.applied

    def write_deferred(self) -> None:
        """The deferred writes (see deferred) in the open group, each kind together: the
        batch runner's round calls this before its other writers.

        A failure that SQLite does not confine to one write (a full disk, an error in a
        write of several statements) fails the whole group: the transaction is rolled
        back and every write in it, deferred or not, is told, as in `_write`."""
        if not self._deferred:
            return
        items, self._deferred = self._deferred, []
        with self._lock:
            try:
                if not self._txn_open:
                    self._begin()
                kinds: dict[str, list[_Deferred]] = {}
                for item in items:
                    kinds.setdefault(item.sql, []).append(item)
                for sql, same in kinds.items():
                    write = same[0].write
                    if write is None:
                        self._run_deferred(sql, same)
                    else:
                        write(self._conn, same)
            except sqlite3.Error as e:
                if self._txn_open:
                    if self._conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            self._conn.execute("ROLLBACK")
                    self._undo(True, e, False)  # ended; the group's earlier writers are told
                error = self._fault(e)
                for item in items:
                    item.error = error
                return
            for item in items:
                item.group = self._group_id
            self._group_writes += len(items)

    def _run_deferred(self, sql: str, items: list[_Deferred]) -> None:
        """One statement's deferred writes by one executemany (holding self._lock, in the
        open transaction). When it wrote fewer rows than writes (a lease lost), or failed,
        each runs again alone for its own answer: a row already written is written again
        with the same values (a deferred statement inserts or replaces one row), so
        nothing is applied twice. Raises only when SQLite rolled the transaction back."""
        try:
            written = self._conn.executemany(sql, [item.params for item in items]).rowcount
        except sqlite3.Error:
            if not self._conn.in_transaction:
                raise
            written = -1  # SQLite undid the failed row alone: find it below
        if written == len(items):
            for item in items:
                item.applied = True
            return
        for item in items:  # one by one: each its own rowcount (or its own error)
            try:
                item.applied = self._conn.execute(sql, item.params).rowcount == 1
            except sqlite3.Error as e:
                if not self._conn.in_transaction:
                    raise
                # Its own failed statement: integrity and programming errors as they are
                # (as `_write` lets them through), any other as a one-line error.
                integrity = isinstance(e, sqlite3.IntegrityError | sqlite3.ProgrammingError)
                item.error = e if integrity else self._fault(e)

    def commit_pending(self) -> bool:
        """COMMIT the open shared group, if any: the batch runner's end of a round. True if
        a COMMIT was made."""
        if not self._txn_open:
            return False
        with self._lock:
            if not self._txn_open:
                return False
            self._commit_group()
            return True

    def file_identity(self) -> tuple[int, int] | None:
        """(device, inode) of the file opened: a worker process started later checks that
        it opened the same one (None for ':memory:')."""
        return self._identity

    def file_replaced(self) -> str | None:
        """None while the path still names the file this store has open; else one line
        saying it was deleted or replaced (a stat: cheap enough for a periodic check)."""
        if self._identity is None:
            return None
        try:
            now = identity(self.path, strict=True)
        except FileNotFoundError:
            return f"database file {self.path} was deleted"
        except OSError as e:
            return f"database file {self.path} cannot be read any more: {e.strerror}"
        if now != self._identity:
            return f"database file {self.path} was replaced by another file"
        return None

    def free_bytes(self) -> int | None:
        """statvfs of the database's folder: a syscall, cheap enough for a periodic check."""
        try:
            st = os.statvfs(Path(self.path).resolve().parent)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _fault(self, e: sqlite3.Error) -> FlowctlError:
        """An SQLite error as one line; after a full disk, shrink the WAL so that recovery
        needs little free space."""
        fault = fault_of(e, self.path)
        if isinstance(fault, DiskFullError):
            with self._lock, contextlib.suppress(sqlite3.Error):
                if not self._conn.in_transaction:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return fault

    @contextlib.contextmanager
    def own_writes(self) -> Iterator[None]:
        """Mark this thread's writes as the caller's own while the block runs.

        The daemon wraps its loop and workers in this: it keeps its wheel true from what
        its writes return, so they need not show in data_version(). Writes through this
        same Store from any other thread (a test, a client, the TUI in the same process)
        do, as another connection's commits would.
        """
        self._tl.own += 1
        try:
            yield
        finally:
            self._tl.own -= 1

    @contextlib.contextmanager
    def _write(self, *, single: bool = False) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: take the write lock up front, so no deadlock on upgrade.

        `single`: the block changes the database with at most one statement, and nothing
        in it can fail after that statement succeeded. SQLite undoes a failed statement by
        itself (its statement journal) and keeps the transaction, so such a block needs no
        SAVEPOINT of its own in a shared group: two statements fewer per checkpoint.

        SQLite errors about the file (full, read-only, corrupt) come out as one-line
        DatabaseErrors; a failed transaction is rolled back whole, so nothing half-written
        is ever committed. Returns only once the COMMIT that holds the block's changes is
        done (with group commit, that COMMIT may hold other writers' changes too).

        One generator for the whole write (it runs several times per step): the
        transaction's body is inlined here rather than a context manager of its own.
        """
        tl = self._tl
        if tl.depth:  # nested in this thread's write: part of it
            yield self._conn
            return
        if self.read_only:
            raise ReadOnlyDatabaseError(
                f"read-only database: {self.path} (opened read-only: this process cannot write it)"
            )
        # The batch runner's thread (a parker set, under group commit): its round is one
        # shared group that it commits itself (commit_pending), so its writers count no
        # writers in flight, never decide a COMMIT but for a full or old group, and park
        # instead of waiting on the condition (issue 14: a third of the plumbing each
        # checkpoint paid). Another thread's writer may commit the group meanwhile; either
        # way a write returns only after the COMMIT that holds its changes.
        park = tl.park if self._group_commit else None
        if park is not None and not self._txn_open and tl.burst is not None:
            tl.burst()  # the runner resumes this write with its round's others
        try:
            if park is None:
                with self._gc:
                    self._gc_pending += 1
            group = 0
            with self._lock:
                tl.depth = 1
                try:
                    if not self._txn_open:
                        self._begin()
                    shared = self._group_writes > 0 or self._group_commit
                    savepoint = shared and not single
                    if savepoint:
                        self._conn.execute("SAVEPOINT flowctl_write")
                    try:
                        yield self._conn
                    except BaseException as e:
                        self._undo(shared, e, savepoint)
                        raise
                    if savepoint:
                        self._conn.execute("RELEASE flowctl_write")
                    self._group_writes += 1
                    group = self._group_id
                    if not tl.own:
                        self._foreign_writes += 1
                finally:
                    tl.depth = 0
                    last = False  # a parked writer leaves the COMMIT to its round
                    if park is None:
                        with self._gc:
                            self._gc_pending -= 1
                            last = self._gc_pending == 0
                    if self._txn_open and (
                        last
                        or not self._group_commit
                        or self._group_writes >= GROUP_MAX_WRITES
                        or _monotonic() - self._group_started >= GROUP_MAX_AGE
                    ):
                        self._commit_group()
            # Return only once the COMMIT that holds our changes is done.
            if park is not None:
                while self._committed_id < group:
                    park()  # the batch runner resumes this writer after a COMMIT
                if not self._group_errors:
                    return
            with self._gc:
                while self._committed_id < group:
                    self._gc.wait()
                failed = self._group_failure(group) if self._group_errors else None
            if failed is not None:
                raise self._commit_failed(failed) from failed
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                raise
            raise self._fault(e) from None

    def _commit_failed(self, failed: BaseException) -> FlowctlError:
        """The error a writer raises when the COMMIT that held its changes failed."""
        if isinstance(failed, sqlite3.Error):
            return self._fault(failed)
        return FlowctlError(f"could not commit to {self.path}: {failed}")

    def _begin(self) -> None:
        """Open the group's transaction (holding self._lock); retried while locked."""
        if self._turn is not None:
            fcntl.flock(self._turn, fcntl.LOCK_EX)  # see take_turns; released by _ended
        try:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                msg = str(e).lower()
                if "locked" not in msg and "busy" not in msg:
                    raise
                retry_locked(lambda: self._conn.execute("BEGIN IMMEDIATE"))
        except BaseException:
            self._ended()
            raise
        self._txn_open = True
        self._group_id += 1
        self._group_writes = 0
        self._group_started = _monotonic()

    def _group_failure(self, group: int) -> BaseException | None:
        """The error of a failed group, for each of its writers in turn (holding self._gc):
        every writer whose changes the group held is told, not only the first to wake."""
        entry = self._group_errors.get(group)
        if entry is None:
            return None
        error, untold = entry
        if untold <= 1:
            del self._group_errors[group]
        else:
            self._group_errors[group] = (error, untold - 1)
        return error

    def _undo(self, shared: bool, error: BaseException, savepoint: bool) -> None:
        """Roll back a failed writer (holding self._lock): its savepoint in a shared group
        (a `single` writer has none: SQLite undid its one failed statement already), else
        the transaction. When SQLite already rolled the whole transaction back (a full
        disk, an I/O error), every writer of the group is told its write failed."""
        if self._conn.in_transaction:
            if savepoint:
                self._conn.execute("ROLLBACK TO flowctl_write")
                self._conn.execute("RELEASE flowctl_write")
            elif shared:
                pass  # a single-statement writer: nothing of it is left to undo
            else:
                self._conn.execute("ROLLBACK")
                self._ended()
            return
        self._ended()
        if shared and self._group_writes:
            with self._gc:
                self._group_errors[self._group_id] = (error, self._group_writes)
                self._committed_id = self._group_id
                self._gc.notify_all()

    def _ended(self) -> None:
        """The group's transaction is over (committed or rolled back): let the next writer
        of any process have its turn."""
        self._txn_open = False
        if self._turn is not None:
            fcntl.flock(self._turn, fcntl.LOCK_UN)

    def _commit_group(self) -> None:
        """COMMIT the open transaction (holding self._lock) and wake the writers waiting on it."""
        group = self._group_id
        try:
            self._conn.execute("COMMIT")
            self._commits += 1
            self._writes_committed += self._group_writes
        except BaseException as e:
            if self._conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
            if self._group_writes > 1 or self._group_commit:
                with self._gc:
                    self._group_errors[group] = (e, self._group_writes)
            else:
                raise
        finally:
            self._ended()
            with self._gc:
                self._committed_id = group
                self._gc.notify_all()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads, under the lock; a corrupt page or a vanished file
        comes out as one line, not a traceback."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.DatabaseError as e:
                if isinstance(e, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                    raise
                raise self._fault(e) from None

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as c:
            return c.execute(sql, params).fetchall()

    def data_version(self) -> int:
        """Changes when another connection commits, or when this Store is written outside
        own_writes(); a read of a few microseconds."""
        with self._reading() as c:
            pragma = int(c.execute("PRAGMA data_version").fetchone()[0])
            return (pragma << 32) | (self._foreign_writes & 0xFFFFFFFF)

    def integrity_check(self) -> str:
        return str(self._read("PRAGMA integrity_check")[0][0])

    def pragmas(self) -> dict[str, int | str]:
        """This connection's settings as SQLite reports them (they are per connection, so no
        other connection can see them): what opening.py's `_connect` promised, for diagnostics and tests."""
        with self._lock:
            return {
                name: self._conn.execute(f"PRAGMA {name}").fetchone()[0]
                for name in (
                    "journal_mode",
                    "synchronous",
                    "foreign_keys",
                    "busy_timeout",
                    "wal_autocheckpoint",
                    "journal_size_limit",
                )
            }

    def pending_writes(self) -> int:
        """Writers in flight on this store: inside a write or queued for the connection.

        Group commit commits when this drops to zero, so a test can see writers line up.
        """
        with self._gc:
            return self._gc_pending

    def commit_stats(self) -> CommitStats:
        """COMMITs this store has made and the writes they made durable, since it opened.

        With group commit on, `writes` grows faster than `commits`: that is the fsyncs saved.
        """
        with self._lock:
            return CommitStats(self._commits, self._writes_committed)
