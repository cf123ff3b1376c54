"""The SQLite backend: one connection, one lock, group commit, turn-taking with other
processes, read-only mode. Opening and inspecting the file is opening.py; a backup and
VACUUM are files.py."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from flowctl.errors import DiskFullError, FlowctlError, ReadOnlyDatabaseError
from flowctl.store.dialect import SQLITE
from flowctl.store.sql import BaseDatabase, Tx
from flowctl.store.sqlite import files
from flowctl.store.sqlite.opening import fault as fault_of
from flowctl.store.sqlite.opening import identity, open_database, retry_locked

R = TypeVar("R")

GROUP_MAX_WRITES = 256  # group commit: at most this many writes share one COMMIT
GROUP_MAX_AGE = 0.005  # ... and a group stays open at most this long (seconds)
TURN_SUFFIX = "-lock"  # the lock file daemons take turns on (see take_turns)
_monotonic = time.monotonic
_PASSED = (sqlite3.IntegrityError, sqlite3.ProgrammingError)  # a statement's own bug: as is


class _SqliteTx(Tx):
    __slots__ = ()

    def alive(self) -> bool:
        return bool(self.conn.in_transaction)


class SqliteDatabase(BaseDatabase):
    """One SQLite file: every transaction `BEGIN IMMEDIATE` (or a savepoint in a shared
    group under group commit), on one connection under one lock."""

    dialect = SQLITE

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
        super().__init__()
        self.path = str(path)
        if not self.path:
            raise FlowctlError("the database path is empty: give a file name")
        self.location = self.path if self.path == ":memory:" else os.path.abspath(self.path)
        if durability not in ("full", "normal"):
            raise FlowctlError(f"durability must be 'full' or 'normal', got {durability!r}")
        self.durability = durability
        self._lock = threading.RLock()
        self._conn, self.read_only = open_database(
            self.path, durability, create=create, allow_read_only=allow_read_only
        )
        self._tx = _SqliteTx(self._conn, SQLITE)
        # The open file's identity: the daemon compares it with the path's (file_replaced).
        self._identity = identity(self.path)
        # Group commit (see set_group_commit): the open group, its commit.
        self._group_commit = False
        self._gc_lock = threading.Lock()  # the counters; the condition's own lock
        self._gc = threading.Condition(self._gc_lock)
        self._txn_open = False
        self._group_id = 0
        self._group_writes = 0
        self._group_weight = 0
        self._group_started = 0.0
        self._committed_id = 0
        # A failed group's error and how many of its writers have yet to be told.
        self._group_errors: dict[int, tuple[BaseException, int]] = {}
        self._turn: int | None = None  # the lock file's descriptor once take_turns() is on
        self._foreign_writes = 0  # commits made outside own_writes() (see data_version)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._turn is not None:
                os.close(self._turn)
                self._turn = None

    def set_group_commit(self, on: bool) -> None:
        """Let writers on several threads share one COMMIT, and so one fsync.

        Each writer's statements run in a SAVEPOINT inside a shared BEGIN IMMEDIATE
        transaction; the last writer in flight (or one that finds the group full or old)
        commits it, and every transact returns only after the COMMIT that made its
        changes durable. A failed writer rolls back its savepoint only. The daemon turns
        it on when it runs several handlers."""
        self._group_commit = on

    def take_turns(self) -> None:
        """Take the lock file `<db>-lock` (flock) around each write transaction.

        SQLite's own lock keeps writers apart, but a writer that finds it taken sleeps in
        SQLite's busy handler (1 ms, then 2, 5, ...): two daemons on one file, each writing
        a round in about a millisecond, spent those sleeps idle. A writer waiting on the
        flock is woken the moment the other's COMMIT ends, so their rounds alternate and
        each runs its handlers' Python while the other writes. The file holds nothing; a
        process that dies releases its lock with it. It only orders writers: SQLite's
        lock still decides. Without a file we can create or open (a read-only folder),
        writers wait on SQLite alone."""
        if self._turn is not None or self.read_only or self.path == ":memory:":
            return
        try:
            self._turn = os.open(
                self.path + TURN_SUFFIX, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
        except OSError:
            self._turn = None

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

    def fault(self, error: Exception) -> Exception:
        """An SQLite error as one line (a statement's own integrity or programming error
        as it is); after a full disk, the WAL is shrunk so that recovery needs little
        free space."""
        if not isinstance(error, sqlite3.Error) or isinstance(error, _PASSED):
            return error
        one_line = fault_of(error, self.path)
        if isinstance(one_line, DiskFullError):
            with self._lock, contextlib.suppress(sqlite3.Error):
                if not self._conn.in_transaction:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return one_line

    # -- transactions ------------------------------------------------------------

    def transact(self, fn: Callable[[Tx], R], *, single: bool = False, writes: int = 1) -> R:
        """BEGIN IMMEDIATE ... COMMIT around `fn`: the write lock is taken up front, so no
        deadlock on upgrade. Under group commit `fn` runs in a SAVEPOINT of a shared
        transaction (none when `single`: SQLite undoes a failed statement by itself).

        SQLite errors about the file (full, read-only, corrupt) come out as one-line
        errors; a failed transaction is rolled back whole, so nothing half-written is
        ever committed. Returns only once the COMMIT that holds fn's changes is done."""
        if self._tl.depth:  # nested in this thread's write: part of it
            return fn(self._tx)
        if self.read_only:
            raise ReadOnlyDatabaseError(
                f"read-only database: {self.path} (opened read-only: this process cannot write it)"
            )
        try:
            result, group = self._run(fn, single, writes)
            if self._committed_id >= group and not self._group_errors:
                return result  # committed by its own writer: nothing to wait for
            with self._gc:
                while self._committed_id < group:
                    self._gc.wait()
                failed = self._group_failure(group) if self._group_errors else None
            if failed is not None:
                raise self._commit_failed(failed) from failed
            return result
        except sqlite3.DatabaseError as e:
            raise self.fault(e) from None

    def _run(self, fn: Callable[[Tx], R], single: bool, writes: int) -> tuple[R, int]:
        """fn in the open group (opened if none), under the lock; the group it is in. The
        group is committed here when fn's writer is the last in flight, or the group is
        full or old (or group commit is off)."""
        tl = self._tl
        with self._gc_lock:  # the lock alone (the Condition's enter is Python-level)
            self._pending += 1
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
                    result = fn(self._tx)
                except BaseException as e:
                    self._undo(shared, e, savepoint)
                    raise
                if savepoint:
                    self._conn.execute("RELEASE flowctl_write")
                self._group_writes += 1  # its writers, each told the group's outcome
                self._group_weight += writes  # the callers' writes it holds (a round's)
                if not tl.own:
                    self._foreign_writes += 1
                return result, self._group_id
            finally:
                tl.depth = 0
                with self._gc_lock:
                    self._pending -= 1
                    last = self._pending == 0
                if self._txn_open and (
                    last
                    or not self._group_commit
                    or self._group_writes >= GROUP_MAX_WRITES
                    or _monotonic() - self._group_started >= GROUP_MAX_AGE
                ):
                    self._commit_group()

    def _commit_failed(self, failed: BaseException) -> Exception:
        """The error a writer raises when the COMMIT that held its changes failed."""
        if isinstance(failed, sqlite3.Error):
            return self.fault(failed)
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
        self._group_writes = self._group_weight = 0
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
            elif not shared:
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
        """COMMIT the open transaction (holding self._lock) and wake the writers waiting
        on it: the one place a write transaction of this store commits."""
        group = self._group_id
        try:
            self._conn.execute("COMMIT")
            self._commits += 1
            self._writes_committed += self._group_weight
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

    # -- reads ---------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[Tx]:
        """The connection for reads, under the lock; a corrupt page or a vanished file
        comes out as one line, not a traceback."""
        with self._lock:
            try:
                yield self._tx
            except sqlite3.DatabaseError as e:
                raise self.fault(e) from None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """Several reads in one read transaction (inside an open write, that one)."""
        with self.reading() as tx:
            if self._conn.in_transaction:
                yield tx
                return
            self._conn.execute("BEGIN")
            try:
                yield tx
            finally:
                self._conn.execute("COMMIT")

    def data_version(self) -> int:
        """Changes when another connection commits, or when this store is written outside
        own_writes(); a read of a few microseconds."""
        with self.reading() as tx:
            pragma = int(tx.execute("PRAGMA data_version").fetchone()[0])
            return (pragma << 32) | (self._foreign_writes & 0xFFFFFFFF)

    def integrity_check(self) -> str:
        with self.reading() as tx:
            return str(tx.execute("PRAGMA integrity_check").fetchone()[0])

    def pragmas(self) -> dict[str, int | str]:
        """This connection's settings as SQLite reports them (they are per connection, so
        no other connection can see them): what opening.py's `_connect` promised."""
        names = "journal_mode synchronous foreign_keys busy_timeout wal_autocheckpoint"
        names += " journal_size_limit"
        with self.reading() as tx:
            return {name: tx.execute(f"PRAGMA {name}").fetchone()[0] for name in names.split()}

    def table_columns(self, table: str) -> list[str]:
        with self.reading() as tx:
            return [str(r[0]) for r in tx.all("SELECT name FROM pragma_table_info(?)", [table])]

    # -- the file ------------------------------------------------------------------

    def vacuum(self) -> tuple[int, int]:
        with self._lock:
            return files.vacuum(self._conn, self.path)

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write a consistent copy of the database to `dest` (see files.backup)."""
        files.backup(self.path, dest, overwrite=overwrite, copy=self._vacuum_into)

    def _vacuum_into(self, tmp: Path) -> None:
        with self.reading() as tx:
            tx.execute("VACUUM INTO ?", [str(tmp)])
