"""The SQLite connection: opening and inspecting the file, pragmas, group commit, read-only mode."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Self

from flowctl.errors import (
    DatabaseCorruptError,
    DatabaseError,
    DatabaseNotFoundError,
    DiskFullError,
    FlowctlError,
    ReadOnlyDatabaseError,
)
from flowctl.store.sqlite import schema

BUSY_TIMEOUT_MS = 10_000
QUICK_CHECK_MAX_BYTES = 8 * 2**20  # files up to this size get PRAGMA quick_check on open (~30 ms)
# Checkpoint the WAL when it grows past this many pages (1 MiB) and truncate it back to
# WAL_BOUND_BYTES afterwards. At 64 pages (256 KB) a daemon waking 100,000 sleepers
# checkpointed and truncated every ~3 commits, and the wake p99 was 166-1,757 ms; at 256
# pages 18-70 ms (benchmarks/daemon.py --only many). 1 MiB still leaves a full disk
# recoverable with little free space.
WAL_BOUND_PAGES = 256
WAL_BOUND_BYTES = 1024 * 1024
GROUP_MAX_WRITES = 256  # group commit: at most this many writes share one COMMIT
GROUP_MAX_AGE = 0.005  # ... and a group stays open at most this long (seconds)
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
        self._conn, self.read_only = _open(
            self.path, durability, create=create, allow_read_only=allow_read_only
        )
        # The open file's identity: the daemon compares it with the path's (file_replaced).
        self._identity = _identity(self.path)
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
        self._foreign_writes = 0  # commits made outside own_writes() (see data_version)

    # -- plumbing ----------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

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

    def set_parker(self, park: Callable[[], None] | None) -> None:
        """On this thread, leave the COMMIT of a shared group to its caller (the batch
        runner, flowctl.batch): a write whose changes are not yet committed calls `park`
        until they are, instead of committing or waiting itself. `park` must return only
        after a COMMIT (commit_pending) or on a failed group; the write then returns, or
        raises the group's error, as it would have."""
        self._tl.park = park

    def commit_pending(self, *, older_than: float = 0.0) -> bool:
        """COMMIT the open shared group, if any and open at least `older_than` seconds:
        the batch runner's end of a round. True if a COMMIT was made."""
        if not self._txn_open:
            return False
        with self._lock:
            if not self._txn_open or _monotonic() - self._group_started < older_than:
                return False
            self._commit_group()
            return True

    def file_replaced(self) -> str | None:
        """None while the path still names the file this store has open; else one line
        saying it was deleted or replaced (a stat: cheap enough for a periodic check)."""
        if self._identity is None:
            return None
        try:
            now = _identity(self.path, strict=True)
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
        fault = _fault(e, self.path)
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
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if "locked" not in msg and "busy" not in msg:
                raise
            _retry_locked(lambda: self._conn.execute("BEGIN IMMEDIATE"))
        self._txn_open = True
        self._group_id += 1
        self._group_writes = 0
        self._group_started = _monotonic()

    def run_batch(self, calls: Sequence[Callable[[], Any]]) -> list[tuple[bool, Any]]:
        """Make several store calls in one transaction and one COMMIT (the single writer
        of `flowctl daemon --workers N` drains the calls its workers queued).

        Each call runs in its own SAVEPOINT: one that raises is rolled back alone and its
        exception returned as (False, error); the others are (True, result). Returns only
        after the COMMIT, so each result is durable when the caller sees it; when the
        transaction itself fails (a full disk), every call gets that error.
        """
        results: list[tuple[bool, Any]] = []
        try:
            with self._write() as c:
                for call in calls:
                    c.execute("SAVEPOINT flowctl_call")
                    try:
                        results.append((True, call()))
                    except Exception as e:
                        if not c.in_transaction:  # SQLite rolled the whole transaction back
                            raise
                        c.execute("ROLLBACK TO flowctl_call")
                        if isinstance(e, sqlite3.DatabaseError) and not isinstance(
                            e, sqlite3.IntegrityError | sqlite3.ProgrammingError
                        ):
                            e = self._fault(e)
                        results.append((False, e))
                    c.execute("RELEASE flowctl_call")
        except Exception as e:
            return [(False, e)] * len(calls)
        return results

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
                self._txn_open = False
            return
        self._txn_open = False
        if shared and self._group_writes:
            with self._gc:
                self._group_errors[self._group_id] = (error, self._group_writes)
                self._committed_id = self._group_id
                self._gc.notify_all()

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
            self._txn_open = False
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
        other connection can see them): what `_connect` promised, for diagnostics and tests."""
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


# ---------------------------------------------------------------------------
# Opening the file


def _identity(path: str, *, strict: bool = False) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None for ':memory:' (or, unless strict, a
    file that cannot be stat-ed)."""
    if path == ":memory:":
        return None
    try:
        st = os.stat(path)
    except OSError:
        if strict:
            raise
        return None
    return st.st_dev, st.st_ino


def _retry_locked(fn: Any, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> Any:
    """Retry `fn` while SQLite says the database is locked or busy, up to the busy timeout.

    The busy handler does not cover every case (the WAL switch, a deferred transaction
    upgrading), so creation and BEGIN IMMEDIATE are retried here as well.
    """
    import time

    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if ("locked" not in msg and "busy" not in msg) or time.monotonic() >= deadline:
                raise
            import random  # only to retry: every open calls this, and most never wait

            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.05)


def _connect(path: str, durability: str) -> sqlite3.Connection:
    """The read-write connection, with every pragma set in one place.

    Called only once _inspect has found the file new, empty or flowctl's own, so the WAL
    switch never touches another application's file.
    """
    try:
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as e:
        raise DatabaseError(f"cannot open database {path}: {e}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = _retry_locked(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        if path != ":memory:" and str(mode).lower() != "wal":
            raise DatabaseError(f"cannot switch {path} to WAL mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        # A small WAL: checkpointed every WAL_BOUND_PAGES pages and truncated back to
        # WAL_BOUND_BYTES afterwards, so a full disk is recovered from with little free space.
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_BOUND_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_BOUND_BYTES}")
    except sqlite3.Error as e:
        conn.close()
        raise _fault(e, path) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write: `mode=ro`, or `immutable=1` where SQLite could not
    even create the WAL's shared-memory file (a read-only folder or filesystem: no one can
    write there, so nothing can change under us)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if not (wal.exists() and shm.exists()) and not os.access(path.parent, os.W_OK):
        uri += "&immutable=1"
    try:
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        raise _fault(e, str(path)) from None
    return conn


def _inspect(path: Path) -> int:
    """Decide, without changing one byte, whether `path` may be opened: returns its schema
    version (0 for a new or empty SQLite file) or raises a one-line DatabaseError.

    flowctl's own files carry APPLICATION_ID in the header; files written before the
    marker existed are recognised by their version and their runs/journal tables. Small
    files get a `PRAGMA quick_check` here, so corruption is reported on open by every
    command, reads included.
    """
    wal = Path(f"{path}-wal")
    has_wal = wal.exists() and wal.stat().st_size > 0
    if path.stat().st_size == 0 and not has_wal:
        return 0
    # With no WAL to read, look with immutable=1: no lock, no -shm, no -wal is created.
    uri = f"{path.resolve().as_uri()}?mode=ro" + ("" if has_wal else "&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as e:
        raise _fault(e, str(path)) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        run_columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
        if app_id != schema.APPLICATION_ID:
            legacy = (
                app_id == 0
                and {"runs", "journal", "timeline"} <= tables
                and {"fence", "lease_owner", "run_at"} <= run_columns
            )
            if not legacy:
                if app_id == 0 and version == 0 and not tables:
                    return 0  # an empty SQLite database: ours to initialise
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                what = f"its own tables: {shown}" if tables else f"application id {app_id}"
                raise DatabaseError(
                    f"{path} is not a flowctl database (another application's SQLite file with"
                    f" {what}); flowctl leaves it untouched: give --db a new or flowctl file"
                )
        if version > schema.SCHEMA_VERSION:
            raise DatabaseError(
                f"database schema version {version} is newer than this flowctl understands"
                f" ({schema.SCHEMA_VERSION}); upgrade flowctl"
            )
        if version < 1:
            raise DatabaseError(
                f"{path} has an invalid flowctl schema version {version} (valid: 1 to"
                f" {schema.SCHEMA_VERSION}); it was changed by hand: restore a copy"
            )
        if path.stat().st_size + (wal.stat().st_size if has_wal else 0) <= QUICK_CHECK_MAX_BYTES:
            _quick_check(conn, str(path))
    except sqlite3.Error as e:
        raise _fault(e, str(path)) from None
    finally:
        conn.close()
    return version


def _quick_check(conn: sqlite3.Connection, path: str) -> None:
    rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    if [r[0] for r in rows] != ["ok"]:
        raise DatabaseCorruptError(
            f"database disk image is malformed: {path} ({rows[0][0]}); restore a copy, or try"
            f" `sqlite3 {path} .recover`"
        )


def _fault(e: sqlite3.Error, path: str) -> DatabaseError:
    """One line for an SQLite error about the file itself (not a bug in a statement)."""
    name = getattr(e, "sqlite_errorname", "")
    if name.startswith("SQLITE_NOTADB"):
        return DatabaseError(f"{path} is not a flowctl database ({e})")
    if name.startswith("SQLITE_CORRUPT"):
        return DatabaseCorruptError(
            f"database disk image is malformed: {path}; restore a copy, or try"
            f" `sqlite3 {path} .recover`"
        )
    if name.startswith("SQLITE_FULL") or (name.startswith("SQLITE_IOERR") and _no_room(path)):
        # An I/O error on a filesystem with no room left (growing the -shm, say) is one too.
        return DiskFullError(f"database or disk is full: {_free_space(path)}")
    if name.startswith("SQLITE_READONLY"):
        return ReadOnlyDatabaseError(f"read-only database: {path}")
    if name.startswith("SQLITE_CANTOPEN"):
        return DatabaseError(f"cannot open database {path}: {e}")
    return DatabaseError(f"database {path}: {e}")


def _no_room(path: str) -> bool:
    try:
        st = os.statvfs(Path(path).resolve().parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def _free_space(path: str) -> str:
    """'N MB free on MOUNT' for the filesystem that holds `path`."""
    folder = Path(path).resolve().parent
    try:
        st = os.statvfs(folder)
        mount = folder
        dev = folder.stat().st_dev
        while mount.parent != mount and mount.parent.stat().st_dev == dev:
            mount = mount.parent
    except OSError:
        return f"free space unknown on {folder}"
    return f"{st.f_bavail * st.f_frsize / 1e6:.1f} MB free on {mount} (database {path})"


def _make_folder(folder: Path) -> None:
    """Create the database folder and any missing parents, each 0700 whatever the umask."""
    missing: list[Path] = []
    here = folder
    while not here.exists():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
            os.chmod(d, 0o700)
        except FileExistsError:
            continue
        except OSError as e:
            raise DatabaseError(
                f"cannot create the database folder {d}: {e.strerror}; give --db a path"
                " in a folder you can write"
            ) from None
    if not folder.is_dir():
        raise DatabaseError(f"cannot use {folder} as the database folder: it is not a folder")


def _writable(path: Path) -> bool:
    """Can this process write the file and the WAL beside it? (Tried, not guessed from the
    mode bits: root, immutable files and read-only mounts all answer truthfully.)"""
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError:
        return False
    if os.access(path.parent, os.W_OK | os.X_OK):
        return True
    return all(os.access(f"{path}{s}", os.W_OK) for s in ("-wal", "-shm"))


def _make_private(path: Path) -> None:
    """The database, its WAL and SHM are 0600: they hold every input in plain text."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        with contextlib.suppress(OSError):
            if p.stat().st_mode & 0o777 != 0o600:
                os.chmod(p, 0o600)


def _open(
    path: str, durability: str, *, create: bool, allow_read_only: bool
) -> tuple[sqlite3.Connection, bool]:
    """Open `path` as a flowctl database: (connection, read_only).

    Nothing is written before the file is known to be new, empty or flowctl's own at a
    schema this flowctl understands. A missing file is created only with `create`; a
    file this process cannot write is opened read-only only with `allow_read_only`.
    """
    if path == ":memory:":
        conn = _connect(path, durability)
        _retry_locked(lambda: schema.migrate(conn))
        return conn, False
    p = Path(path)
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        st = None  # missing (a component that is a file is said when creating the folder)
    except OSError as e:  # a name too long, a loop of links, no permission to look
        shown = path if len(path) <= 80 else path[:79] + "…"
        raise DatabaseError(f"cannot open database {shown}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise DatabaseError(f"{path} is a folder, not a database file: give a file's path")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # A device, FIFO or socket: reading it could block, and making it private would
        # chmod a shared node such as /dev/null for every user of the machine.
        raise DatabaseError(
            f"{path} is not a regular file: a database is a file; give a file's path"
        )
    if st is None:
        if not create:
            raise DatabaseNotFoundError(path)
        _make_folder(p.parent)
        try:
            os.close(os.open(p, os.O_CREAT | os.O_RDWR, 0o600))
        except OSError as e:
            raise DatabaseError(f"cannot create database {path}: {e.strerror}") from None
        version = 0
    else:
        version = _inspect(p)
    if not _writable(p):
        if not allow_read_only:
            raise ReadOnlyDatabaseError(
                f"read-only database: {path} (this process cannot write it or its folder)"
            )
        if version != schema.SCHEMA_VERSION:
            raise ReadOnlyDatabaseError(
                f"read-only database: {path} has schema version {version}, older than this"
                f" flowctl's {schema.SCHEMA_VERSION}; open it once with write access to upgrade it"
            )
        return _connect_read_only(p), True
    _make_private(p)  # before the WAL and SHM exist: SQLite gives them the file's mode
    conn = _connect(path, durability)
    try:
        _retry_locked(lambda: schema.migrate(conn))
    except sqlite3.Error as e:
        conn.close()
        raise _fault(e, path) from None
    except BaseException:
        conn.close()
        raise
    _make_private(p)
    return conn, False
