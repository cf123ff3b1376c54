"""Every SQL statement flowctl runs, and the schema they run against.

One job: turn named state transitions into SQLite transactions. Each write
method is one `BEGIN IMMEDIATE` transaction. Writes made by a worker carry the
fence it was given at claim time and change nothing when the fence has moved
on; that outcome is a return value (False), not an exception, because a lost
lease is expected.

Instants are stored as integer microseconds since the epoch (compare and index
cheaply, never ambiguous); JSON columns hold JSON text, never pickles.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import sqlite_utils

from flowctl.errors import (
    DatabaseCorruptError,
    DatabaseError,
    DatabaseNotFoundError,
    DiskFullError,
    FlowctlError,
    ReadOnlyDatabaseError,
    RunNotFoundError,
    ScheduleError,
    ScheduleNotFoundError,
    SerializationError,
)
from flowctl.model import (
    DUE,
    CallKind,
    Claim,
    EntryState,
    JournalEntry,
    Run,
    RunStatus,
    TimelineEvent,
    from_us,
    mask_secrets,
    to_us,
)
from flowctl.transitions import (
    Action,
    Applied,
    ClaimAction,
    ClaimVerdict,
    cancel_error,
    claim_verdict,
    error_kind,
    guard,
    next_attempt,
    parked_run_at,
    pause,
    resume,
)

BUSY_TIMEOUT_MS = 10_000
APPLICATION_ID = 0x464C4F57  # "FLOW" in the SQLite header: the flowctl schema marker
QUICK_CHECK_MAX_BYTES = 8 * 2**20  # files up to this size get PRAGMA quick_check on open (~30 ms)
WAL_BOUND_PAGES = 64  # checkpoint the WAL when it grows past this many pages (256 KB) ...
WAL_BOUND_BYTES = 256 * 1024  # ... and truncate it back to this size after a checkpoint
GROUP_MAX_WRITES = 256  # group commit: at most this many writes share one COMMIT
GROUP_MAX_AGE = 0.005  # ... and a group stays open at most this long (seconds)
_monotonic = time.monotonic

# ---------------------------------------------------------------------------
# Schema and migrations


def _migration_1(db: sqlite_utils.Database) -> None:
    db.execute(
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            target TEXT NOT NULL,
            kind TEXT NOT NULL,
            source TEXT,
            source_hash TEXT,
            source_path TEXT,
            cwd TEXT,
            input TEXT NOT NULL,
            status TEXT NOT NULL,
            run_at INTEGER,
            created_at INTEGER NOT NULL,
            started_at INTEGER,
            finished_at INTEGER,
            attempt INTEGER NOT NULL DEFAULT 1,
            max_attempts INTEGER NOT NULL DEFAULT 3,
            backoff TEXT,
            deadline INTEGER,
            timeout_us INTEGER,
            exec_spent_us INTEGER NOT NULL DEFAULT 0,
            result TEXT,
            error TEXT,
            lease_owner TEXT,
            lease_until INTEGER,
            fence INTEGER NOT NULL DEFAULT 0,
            reclaims INTEGER NOT NULL DEFAULT 0,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            cancel_reason TEXT,
            key TEXT UNIQUE,
            parent_run_id TEXT,
            schedule TEXT,
            scheduled_at INTEGER
        ) STRICT
        """
    )
    # run_at is "when is this run next due": start/retry time when queued, wake time
    # when sleeping, signal timeout when waiting, lease expiry when running.
    db.execute("CREATE INDEX runs_due ON runs(status, run_at)")
    db.execute("CREATE INDEX runs_created ON runs(created_at)")
    db.execute("CREATE INDEX runs_workflow ON runs(workflow, created_at)")
    db.execute("CREATE INDEX runs_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL")
    db.execute(
        """
        CREATE TABLE journal (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            call_index INTEGER NOT NULL,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            state TEXT NOT NULL,
            value TEXT,
            wake_at INTEGER,
            recorded_at INTEGER NOT NULL,
            resolved_at INTEGER,
            tries INTEGER NOT NULL DEFAULT 0,
            duration_us INTEGER,
            PRIMARY KEY (run_id, call_index)
        ) STRICT, WITHOUT ROWID
        """
    )
    db.execute(
        """
        CREATE TABLE versions (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            change_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            recorded_at INTEGER NOT NULL,
            PRIMARY KEY (run_id, change_id)
        ) STRICT, WITHOUT ROWID
        """
    )
    db.execute(
        """
        CREATE TABLE timeline (
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            at INTEGER NOT NULL,
            type TEXT NOT NULL,
            data TEXT
        ) STRICT
        """
    )
    db.execute("CREATE INDEX timeline_run ON timeline(run_id, seq)")
    db.execute("CREATE INDEX timeline_type_at ON timeline(type, at)")
    db.execute(
        """
        CREATE TABLE signals (
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            payload TEXT,
            sent_at INTEGER NOT NULL,
            consumed_at INTEGER,
            call_index INTEGER
        ) STRICT
        """
    )
    db.execute("CREATE INDEX signals_run ON signals(run_id, name, consumed_at)")
    db.execute(
        """
        CREATE TABLE daemons (
            owner TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            proc_start TEXT,
            started_at INTEGER NOT NULL,
            seen_at INTEGER NOT NULL,
            info TEXT
        ) STRICT
        """
    )


def _migration_2(db: sqlite_utils.Database) -> None:
    """Schedules (issue 7): definitions, fire bookkeeping, and a history of every decision.

    `spec` is ScheduleSpec.to_json(): the store keeps it opaque, the calendar lives in
    schedule.py. `last_fire_at` is the latest scheduled fire time already handled (fired or
    skipped), `next_fire_at` the soonest one not yet handled (NULL while paused): the daemon
    sleeps until MIN(next_fire_at). `active_from` is when the current definition took effect
    (creation, --replace, resume): fires at or before it are never considered, so a resume or
    a redefinition never backfills. `revision` changes with every write, so a fire decided on
    a stale read (another daemon fired, an operator paused) changes nothing.
    """
    db.execute(
        """
        CREATE TABLE schedules (
            name TEXT PRIMARY KEY,
            target TEXT NOT NULL,
            cwd TEXT,
            input TEXT NOT NULL,
            spec TEXT NOT NULL,
            paused INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            active_from INTEGER NOT NULL,
            last_fire_at INTEGER,
            next_fire_at INTEGER,
            revision INTEGER NOT NULL DEFAULT 1,
            source TEXT NOT NULL CHECK (source IN ('cli', 'yaml', 'toml')),
            origin TEXT
        ) STRICT
        """
    )
    db.execute(
        "CREATE INDEX schedules_next ON schedules(next_fire_at) WHERE next_fire_at IS NOT NULL"
    )
    db.execute(
        """
        CREATE TABLE schedule_history (
            seq INTEGER PRIMARY KEY,
            schedule TEXT NOT NULL REFERENCES schedules(name) ON DELETE CASCADE,
            fire_at INTEGER,
            action TEXT NOT NULL CHECK (action IN ('fired', 'skipped-missed', 'skipped-overlap',
                'queued-overlap', 'manual', 'error')),
            run_id TEXT,
            at INTEGER NOT NULL,
            detail TEXT
        ) STRICT
        """
    )
    db.execute("CREATE INDEX schedule_history_name ON schedule_history(schedule, seq)")
    # Overlap checks ("is a run of this schedule still active?") and agenda deadlines.
    db.execute("CREATE INDEX runs_schedule ON runs(schedule, status) WHERE schedule IS NOT NULL")
    db.execute("CREATE INDEX runs_deadline ON runs(deadline) WHERE deadline IS NOT NULL")


def _migration_3(db: sqlite_utils.Database) -> None:
    # Per-status listings (ls --status, the TUI's views) ordered without sorting every row.
    db.execute("CREATE INDEX runs_status_finished ON runs(status, finished_at)")
    db.execute("CREATE INDEX runs_status_created ON runs(status, created_at)")


def _migration_4(db: sqlite_utils.Database) -> None:
    db.execute(
        """
        CREATE TABLE published (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            value TEXT,
            at INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        ) STRICT, WITHOUT ROWID
        """
    )


def _migration_5(db: sqlite_utils.Database) -> None:
    """Facts about the database itself, e.g. when a daemon last ran (`flowctl why`)."""
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT")


def _migration_6(db: sqlite_utils.Database) -> None:
    """Pause and resume (issue 10). `status` is free text, so 'paused' needs no constraint
    change; a paused run keeps the status and run_at that resume gives back."""
    db.execute("ALTER TABLE runs ADD COLUMN pause_requested INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE runs ADD COLUMN paused_status TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN paused_run_at INTEGER")


def _migration_7(db: sqlite_utils.Database) -> None:
    """The step a running run's handler is inside, as its last heartbeat saw it (`why`)."""
    db.execute("ALTER TABLE runs ADD COLUMN current_step TEXT")


def _migration_8(db: sqlite_utils.Database) -> None:
    """The input keys a run's workflow declared secret (a JSON list, NULL for none): front
    ends mask them without importing the workflow, and `ls --search` never matches them."""
    db.execute("ALTER TABLE runs ADD COLUMN secret_keys TEXT")


def _migration_9(db: sqlite_utils.Database) -> None:
    """Poison is charged only to the guilty run (issue 11): a run reclaimed from a dead
    worker is a suspect and runs alone; `solo` says its lease runs it alone, `crashes`
    counts the crashes charged to it since its last checkpoint."""
    db.execute("ALTER TABLE runs ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE runs ADD COLUMN solo INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE runs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0")


def _migration_10(db: sqlite_utils.Database) -> None:
    """The input keys a schedule's workflow declared secret (a JSON list, NULL for none),
    resolved when it was added or synced: `schedule show/ls` mask them without importing
    the workflow. Older rows have NULL until they are added or synced again."""
    db.execute("ALTER TABLE schedules ADD COLUMN secret_keys TEXT")


MIGRATIONS = [
    _migration_1,
    _migration_2,
    _migration_3,
    _migration_4,
    _migration_5,
    _migration_6,
    _migration_7,
    _migration_8,
    _migration_9,
    _migration_10,
]
SCHEMA_VERSION = len(MIGRATIONS)


# ---------------------------------------------------------------------------
# Helpers


def dumps(value: Any, what: str = "value") -> str:
    """JSON text for the store; a value that is not JSON is a clear error, never a pickle."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise SerializationError(
            f"{what} is not JSON-serialisable ({e}); return str, int, float, bool, None, "
            "lists and dicts of those"
        ) from None


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dt(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def _us(when: datetime | None) -> int | None:
    return None if when is None else to_us(when)


_RUN_COLUMNS = (
    "run_id, workflow, target, kind, status, input, created_at, run_at, started_at, finished_at,"
    " attempt, max_attempts, deadline, timeout_us, exec_spent_us, result, error, lease_owner,"
    " lease_until, fence, reclaims, cancel_requested, cancel_reason, key, parent_run_id,"
    " schedule, scheduled_at, cwd, source_hash, source_path, backoff, pause_requested,"
    " paused_status, paused_run_at, current_step, secret_keys, suspect, solo, crashes"
)


def _run_from_row(r: Sequence[Any]) -> Run:
    return Run(
        run_id=r[0],
        workflow=r[1],
        target=r[2],
        kind=r[3],
        status=RunStatus(r[4]),
        input=json.loads(r[5]),
        created_at=from_us(r[6]),
        run_at=_dt(r[7]),
        started_at=_dt(r[8]),
        finished_at=_dt(r[9]),
        attempt=r[10],
        max_attempts=r[11],
        deadline=_dt(r[12]),
        timeout=None if r[13] is None else r[13] / 1e6,
        exec_spent=r[14] / 1e6,
        result=_loads(r[15]),
        error=_loads(r[16]),
        lease_owner=r[17],
        lease_until=_dt(r[18]),
        fence=r[19],
        reclaims=r[20],
        cancel_requested=bool(r[21]),
        cancel_reason=r[22],
        key=r[23],
        parent_run_id=r[24],
        schedule=r[25],
        scheduled_at=_dt(r[26]),
        cwd=r[27],
        source_hash=r[28],
        source_path=r[29],
        backoff=_loads(r[30]),
        pause_requested=bool(r[31]),
        paused_status=None if r[32] is None else RunStatus(r[32]),
        paused_run_at=_dt(r[33]),
        current_step=r[34],
        secret_keys=tuple(_loads(r[35]) or ()),
        suspect=bool(r[36]),
        solo=bool(r[37]),
        crashes=r[38],
    )


# Progress (a checkpoint) or an end: no longer a suspect, the crashes charged forgiven.
_CLEARED = "reclaims = 0, suspect = 0, crashes = 0"

_ENTRY_COLUMNS = (
    "run_id, call_index, kind, name, state, value, wake_at, recorded_at, resolved_at,"
    " tries, duration_us"
)


def _entry_from_row(r: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        run_id=r[0],
        call_index=r[1],
        kind=CallKind(r[2]),
        name=r[3],
        state=EntryState(r[4]),
        value=_loads(r[5]),
        wake_at=_dt(r[6]),
        recorded_at=_dt(r[7]),
        resolved_at=_dt(r[8]),
        tries=r[9],
        duration=None if r[10] is None else r[10] / 1e6,
    )


@dataclass(frozen=True)
class NewRun:
    """Everything needed to create a run; built by ops.start."""

    run_id: str
    workflow: str
    target: str
    kind: str
    input: Any
    source: str | None = None
    source_hash: str | None = None
    source_path: str | None = None
    cwd: str | None = None
    run_at: datetime | None = None
    max_attempts: int = 3
    backoff: dict[str, Any] | None = None
    deadline: datetime | None = None
    timeout: float | None = None
    key: str | None = None
    parent_run_id: str | None = None
    schedule: str | None = None
    scheduled_at: datetime | None = None
    secret_keys: tuple[str, ...] = ()  # input keys shown as *** and never searched


@dataclass(frozen=True)
class HeartbeatReply:
    """What a heartbeat learned about one held run."""

    run_id: str
    lost: bool = False  # the fence moved on: abandon the run
    cancel: bool = False
    deadline: bool = False
    timeout: bool = False
    pause: bool = False  # an operator asked to pause it: park at the next durable call


@dataclass(frozen=True)
class DaemonInfo:
    owner: str
    host: str
    pid: int
    proc_start: str | None
    started_at: datetime
    seen_at: datetime
    info: dict[str, Any]


def _add_event(
    c: sqlite3.Connection, run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> None:
    """Append one timeline event inside the caller's transaction."""
    c.execute(
        "INSERT INTO timeline (run_id, at, type, data) VALUES (?,?,?,?)",
        _event(run_id, at_us, type_, data),
    )


def _event(
    run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> tuple[str, int, str, str | None]:
    return (run_id, at_us, type_, None if not data else json.dumps(data, separators=(",", ":")))


# ---------------------------------------------------------------------------
# The store


class CommitStats(NamedTuple):
    """Counters of Store.commit_stats(): COMMITs made, and the writes they made durable."""

    commits: int
    writes: int


class Store:
    """One SQLite file. Thread-safe: calls are serialised on one connection."""

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
        self._tl = threading.local()
        self._foreign_writes = 0  # commits made outside own_writes() (see data_version)

    # -- plumbing ----------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
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
        self._tl.own = getattr(self._tl, "own", 0) + 1
        try:
            yield
        finally:
            self._tl.own -= 1

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: take the write lock up front, so no deadlock on upgrade.

        SQLite errors about the file (full, read-only, corrupt) come out as one-line
        DatabaseErrors; a failed transaction is rolled back whole, so nothing half-written
        is ever committed.
        """
        if getattr(self._tl, "depth", 0):  # nested in this thread's write: part of it
            yield self._conn
            return
        if self.read_only:
            raise ReadOnlyDatabaseError(
                f"read-only database: {self.path} (opened read-only: this process cannot write it)"
            )
        try:
            with self._write_txn() as conn:
                yield conn
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                raise
            raise self._fault(e) from None

    @contextlib.contextmanager
    def _write_txn(self) -> Iterator[sqlite3.Connection]:
        with self._gc:
            self._gc_pending += 1
        group = 0
        with self._lock:
            self._tl.depth = 1
            try:
                if not self._txn_open:
                    _retry_locked(lambda: self._conn.execute("BEGIN IMMEDIATE"))
                    self._txn_open = True
                    self._group_id += 1
                    self._group_writes = 0
                    self._group_started = _monotonic()
                shared = self._group_writes > 0 or self._group_commit
                if shared:
                    self._conn.execute("SAVEPOINT flowctl_write")
                try:
                    yield self._conn
                except BaseException as e:
                    self._undo(shared, e)
                    raise
                if shared:
                    self._conn.execute("RELEASE flowctl_write")
                self._group_writes += 1
                group = self._group_id
                if not getattr(self._tl, "own", 0):
                    self._foreign_writes += 1
            finally:
                self._tl.depth = 0
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
        with self._gc:
            while self._committed_id < group:
                self._gc.wait()
            failed = self._group_failure(group) if self._group_errors else None
        if failed is not None:
            if isinstance(failed, sqlite3.Error):
                raise self._fault(failed) from failed
            raise FlowctlError(f"could not commit to {self.path}: {failed}") from failed

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

    def _undo(self, shared: bool, error: BaseException) -> None:
        """Roll back a failed writer (holding self._lock): its savepoint in a shared group,
        else the transaction. When SQLite already rolled the whole transaction back (a full
        disk, an I/O error), every writer of the group is told its write failed."""
        if self._conn.in_transaction:
            if shared:
                self._conn.execute("ROLLBACK TO flowctl_write")
                self._conn.execute("RELEASE flowctl_write")
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

    # -- runs: create and read --------------------------------------------

    def create_run(self, new: NewRun, now: datetime) -> tuple[Run, bool]:
        """Insert a queued run. With an idempotency key already used, return that run instead.

        Returns (run, created).
        """
        with self._write() as c:
            return self._insert_run(c, new, to_us(now))

    def fork_run(
        self, new: NewRun, origin: str, upto: int, now: datetime, *, by: str | None = None
    ) -> Run:
        """Create `new` with the journal rows of run `origin` before call index `upto`.

        One transaction: the run, its copied checkpoints and the version markers the origin
        recorded up to the last copied checkpoint appear together or not at all. The origin
        is only read.
        """
        now_us = to_us(now)
        with self._write() as c:
            _load_run(c, origin)  # raises when it does not exist
            run, _ = self._insert_run(c, new, now_us)
            copied = c.execute(
                f"INSERT INTO journal ({_ENTRY_COLUMNS}) SELECT ?, call_index, kind, name, state,"
                " value, wake_at, recorded_at, resolved_at, tries, duration_us FROM journal"
                " WHERE run_id = ? AND call_index < ?",
                [run.run_id, origin, upto],
            ).rowcount
            # A version marker takes no call index: it belongs to the copied part when it was
            # recorded no later than the last checkpoint copied.
            last = c.execute(
                "SELECT recorded_at FROM journal WHERE run_id = ? AND call_index = ?",
                [origin, upto - 1],
            ).fetchone()
            if last is not None:
                c.execute(
                    "INSERT INTO versions (run_id, change_id, version, recorded_at) SELECT ?,"
                    " change_id, version, recorded_at FROM versions WHERE run_id = ?"
                    " AND recorded_at <= ?",
                    [run.run_id, origin, last[0]],
                )
            data: dict[str, Any] = {"from_run": origin, "from_index": upto, "checkpoints": copied}
            if by:
                data["by"] = by
            _add_event(c, run.run_id, now_us, "forked", data)
            return run

    def _insert_run(self, c: sqlite3.Connection, new: NewRun, now_us: int) -> tuple[Run, bool]:
        """create_run inside the caller's transaction (a schedule fire creates its runs in the
        same transaction that records the fire)."""
        # Due at its start time (now, --in, --at) or at its deadline, whichever is first.
        start_at = from_us(now_us) if new.run_at is None else new.run_at
        run_at = to_us(parked_run_at(start_at, deadline=new.deadline) or start_at)
        if new.key is not None:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = ?", [new.key]).fetchone()
            if row is not None:
                return _run_from_row(row), False
        c.execute(
            "INSERT INTO runs (run_id, workflow, target, kind, source, source_hash, source_path,"
            " cwd, input, status, run_at, created_at, max_attempts, backoff, deadline,"
            " timeout_us, key, parent_run_id, schedule, scheduled_at, secret_keys)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                new.run_id,
                new.workflow,
                new.target,
                new.kind,
                new.source,
                new.source_hash,
                new.source_path,
                new.cwd,
                dumps(new.input, "the input"),
                RunStatus.QUEUED,
                run_at,
                now_us,
                new.max_attempts,
                None if new.backoff is None else dumps(new.backoff),
                _us(new.deadline),
                None if new.timeout is None else round(new.timeout * 1e6),
                new.key,
                new.parent_run_id,
                new.schedule,
                _us(new.scheduled_at),
                dumps(sorted(new.secret_keys)) if new.secret_keys else None,
            ],
        )
        data: dict[str, Any] = {"attempt": 1}
        if run_at > now_us:
            data["run_at"] = from_us(run_at).isoformat(timespec="microseconds")
        if new.parent_run_id:
            data["parent"] = new.parent_run_id
        if new.schedule:
            data["schedule"] = new.schedule
        _add_event(c, new.run_id, now_us, "created", data)
        return _load_run(c, new.run_id), True

    def get_run(self, run_id: str) -> Run:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return _run_from_row(rows[0])

    def find_run(self, ref: str) -> Run:
        """A run by full id or unique prefix."""
        ref = ref.strip()
        if not ref:
            raise RunNotFoundError(ref, "a run id is required")
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [ref])
        if rows:
            return _run_from_row(rows[0])
        hi = ref + "\uffff"
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id >= ? AND run_id < ? LIMIT 2", [ref, hi]
        )
        if not rows:
            raise RunNotFoundError(ref)
        if len(rows) > 1:
            raise RunNotFoundError(ref, f"run id prefix {ref!r} is ambiguous: give more characters")
        return _run_from_row(rows[0])

    def get_run_by_key(self, key: str) -> Run | None:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = ?", [key])
        return _run_from_row(rows[0]) if rows else None

    def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        search: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
        order: str = "created_desc",
    ) -> list[Run]:
        where: list[str] = []
        params: list[Any] = []
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            params.extend(str(s) for s in statuses)
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        if since is not None:
            where.append("created_at >= ?")
            params.append(to_us(since))
        if search:
            clause, args = _search_clause(search)
            where.append(clause)
            params.extend(args)
        orders = {
            "created_desc": "created_at DESC, run_id DESC",
            "run_at": "run_at, run_id",
            "finished_desc": "finished_at DESC, run_id DESC",
        }
        sql = f"SELECT {_RUN_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {orders[order]} LIMIT ? OFFSET ?"
        params.extend([limit, offset])
        return [_run_from_row(r) for r in self._read(sql, params)]

    def runs_by_ids(self, run_ids: Sequence[str]) -> list[Run]:
        if not run_ids:
            return []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id IN ({','.join('?' * len(run_ids))})",
            list(run_ids),
        )
        return [_run_from_row(r) for r in rows]

    def count_by_status(self, workflow: str | None = None) -> dict[RunStatus, int]:
        counts = {s: 0 for s in RunStatus}
        if workflow:
            rows = self._read(
                "SELECT status, COUNT(*) FROM runs WHERE workflow = ? GROUP BY status", [workflow]
            )
        else:
            rows = self._read("SELECT status, COUNT(*) FROM runs GROUP BY status")
        for status, n in rows:
            counts[RunStatus(status)] = n
        return counts

    def workflows_seen(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT workflow FROM runs ORDER BY workflow")]

    def run_source(self, run_id: str) -> tuple[str | None, str | None]:
        rows = self._read("SELECT source, source_hash FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return rows[0][0], rows[0][1]

    def journal(self, run_id: str) -> dict[int, JournalEntry]:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = ? ORDER BY call_index", [run_id]
        )
        return {r[1]: _entry_from_row(r) for r in rows}

    def versions(self, run_id: str) -> dict[str, int]:
        rows = self._read("SELECT change_id, version FROM versions WHERE run_id = ?", [run_id])
        return {r[0]: r[1] for r in rows}

    def versions_detail(self, run_id: str) -> list[tuple[str, int, datetime]]:
        rows = self._read(
            "SELECT change_id, version, recorded_at FROM versions WHERE run_id = ? ORDER BY recorded_at",
            [run_id],
        )
        return [(r[0], r[1], from_us(r[2])) for r in rows]

    def timeline(self, run_id: str, limit: int | None = None) -> list[TimelineEvent]:
        sql = "SELECT run_id, at, type, data FROM timeline WHERE run_id = ? ORDER BY seq"
        params: list[Any] = [run_id]
        if limit is not None:
            sql = (
                "SELECT * FROM (SELECT run_id, at, type, data, seq FROM timeline WHERE run_id = ?"
                " ORDER BY seq DESC LIMIT ?) ORDER BY seq"
            )
            params.append(limit)
        return [
            TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})
            for r in self._read(sql, params)
        ]

    def pending_signals(self, run_id: str) -> list[tuple[str, Any, datetime]]:
        rows = self._read(
            "SELECT name, payload, sent_at FROM signals WHERE run_id = ? AND consumed_at IS NULL"
            " ORDER BY seq",
            [run_id],
        )
        return [(r[0], _loads(r[1]), from_us(r[2])) for r in rows]

    def recent_wakes(self, since: datetime, limit: int = 10_000) -> list[float]:
        """Lateness (seconds) of recent timer wakes, from the timeline."""
        rows = self._read(
            "SELECT data FROM timeline WHERE type = 'woke' AND at >= ? ORDER BY at DESC LIMIT ?",
            [to_us(since), limit],
        )
        out = []
        for (data,) in rows:
            d = _loads(data) or {}
            if "late_ms" in d:
                out.append(float(d["late_ms"]) / 1000.0)
        return out

    # -- the daemon's view ---------------------------------------------------

    def next_due(self, limit: int) -> list[tuple[int, str]]:
        """The soonest (run_at µs, run_id) pairs over every claimable status, in order."""
        out: list[tuple[int, str]] = []
        with self._reading() as c:
            for status in DUE:
                out.extend(
                    c.execute(
                        "SELECT run_at, run_id FROM runs WHERE status = ? AND run_at IS NOT NULL"
                        " ORDER BY run_at LIMIT ?",
                        [str(status), limit],
                    ).fetchall()
                )
        out.sort()
        return out[:limit]

    def running_owners(self) -> list[str]:
        rows = self._read(
            "SELECT DISTINCT lease_owner FROM runs WHERE status = 'running' AND lease_owner IS NOT NULL"
        )
        return [r[0] for r in rows]

    def expire_owner(self, owner: str, now: datetime) -> int:
        """Make every lease held by a provably dead owner due for reclaim now."""
        now_us = to_us(now)
        with self._write() as c:
            cur = c.execute(
                "UPDATE runs SET lease_until = ?, run_at = ? WHERE status = 'running'"
                " AND lease_owner = ? AND lease_until > ?",
                [now_us, now_us, owner, now_us],
            )
            c.execute("DELETE FROM daemons WHERE owner = ?", [owner])
            return cur.rowcount

    def release_runs(
        self, owner: str, held: Sequence[tuple[str, int]], now: datetime, reason: str
    ) -> int:
        """A stopping daemon hands back the runs (run_id, fence) it still holds: due now.

        Fenced: a run another worker has claimed since is left alone.
        """
        now_us = to_us(now)
        released = 0
        with self._write() as c:
            for run_id, fence in held:
                cur = c.execute(
                    "UPDATE runs SET lease_until = ?, run_at = ?, solo = 0 WHERE run_id = ?"
                    " AND fence = ? AND status = 'running' AND lease_owner = ?",
                    [now_us, now_us, run_id, fence, owner],
                )
                if cur.rowcount == 1:
                    released += 1
                    _add_event(c, run_id, now_us, "released", {"by": owner, "reason": reason})
        return released

    def runs_due_between(self, lo: datetime, hi: datetime, *, limit: int) -> list[str]:
        """Ids of active runs whose run_at lies in [lo, hi] (e.g. passed over by a clock jump)."""
        out: list[str] = []
        with self._reading() as c:
            for status in sorted(DUE):
                out.extend(
                    r[0]
                    for r in c.execute(
                        "SELECT run_id FROM runs WHERE status = ? AND run_at BETWEEN ? AND ?"
                        " ORDER BY run_at LIMIT ?",
                        [str(status), to_us(lo), to_us(hi), limit],
                    )
                )
        return out[:limit]

    def cancels_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to cancel (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND cancel_requested = 1"
            f" AND run_id IN ({','.join('?' * len(run_ids))})",
            list(run_ids),
        )
        return [r[0] for r in rows]

    def claim_due(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        *,
        run_id: str | None = None,
        alone: bool = False,
    ) -> tuple[list[Claim], list[str]]:
        """Claim up to `limit` due runs in one transaction, bumping each fence.

        Applies claim_verdict(): runs past their deadline, cancelled while their worker
        died, or poison are ended here instead of claimed; a run reclaimed from a dead
        worker becomes a suspect, claimed only by a claimer that runs it `alone` (see
        claim_suspect). Returns the claims and the ids of runs ended.
        """
        now_us, lease_us = to_us(now), to_us(lease_until)
        claims: list[Claim] = []
        ended: list[str] = []
        with self._write() as c:
            if run_id is not None:
                candidates = c.execute(
                    "SELECT run_id FROM runs WHERE run_id = ? AND status IN"
                    " ('queued','sleeping','waiting','running','paused') AND run_at <= ?",
                    [run_id, now_us],
                ).fetchall()
            else:
                candidates = []
                for status in ("queued", "sleeping", "waiting", "running", "paused"):
                    candidates.extend(
                        c.execute(
                            "SELECT run_at, run_id FROM runs WHERE status = ? AND run_at <= ?"
                            " ORDER BY run_at LIMIT ?",
                            [status, now_us, limit + 16],
                        ).fetchall()
                    )
                candidates.sort()
                candidates = [(rid,) for _, rid in candidates]
            for (rid,) in candidates:
                if len(claims) >= limit:
                    break
                claim = self._claim_one(c, rid, owner, now_us, lease_us, ended, alone)
                if claim is not None:
                    claims.append(claim)
        return claims, ended

    def claim_suspect(
        self, owner: str, now: datetime, lease_until: datetime
    ) -> tuple[Claim | None, list[str]]:
        """Claim one due suspect (a run whose worker died under it) for a claimer that runs
        it alone, the one with the fewest crashes charged first. Returns the claim (or None)
        and the ids of runs ended on the way (poison, deadline, cancelled)."""
        now_us, lease_us = to_us(now), to_us(lease_until)
        ended: list[str] = []
        with self._write() as c:
            rows = c.execute(
                "SELECT run_id FROM runs WHERE status = 'running' AND run_at <= ?"
                " ORDER BY crashes, run_at LIMIT 16",
                [now_us],
            ).fetchall()
            for (rid,) in rows:
                claim = self._claim_one(c, rid, owner, now_us, lease_us, ended, True)
                if claim is not None:
                    return claim, ended
        return None, ended

    def suspect_due(self, now: datetime) -> bool:
        """Whether a run whose worker died under it is due (a read): it waits to run alone."""
        rows = self._read(
            "SELECT 1 FROM runs WHERE status = 'running' AND run_at <= ? LIMIT 1", [to_us(now)]
        )
        return bool(rows)

    def _claim_one(
        self,
        c: sqlite3.Connection,
        rid: str,
        owner: str,
        now_us: int,
        lease_us: int,
        ended: list[str],
        alone: bool,
    ) -> Claim | None:
        run = _load_run(c, rid)
        prev = run.status
        if prev not in DUE or run.run_at is None or to_us(run.run_at) > now_us:
            return None
        verdict = claim_verdict(run, from_us(now_us), alone=alone)
        if verdict.action is ClaimAction.SKIP:
            return None
        if verdict.action is ClaimAction.SUSPECT:
            # Held for a claimer that runs it alone. Record the charge once (solo cleared).
            if not run.suspect or verdict.charged:
                c.execute(
                    "UPDATE runs SET suspect = 1, solo = 0, crashes = ? WHERE run_id = ?",
                    [verdict.crashes, rid],
                )
                _add_event(c, rid, now_us, "suspect", _suspect_data(run, verdict))
            return None
        if verdict.action is ClaimAction.PAUSE:
            # Its worker died with a pause requested: the pause takes effect here.
            self._park_paused(c, run, RunStatus.QUEUED, now_us, now_us)
            ended.append(rid)
            return None
        if verdict.action is ClaimAction.END:
            assert verdict.status is not None
            self._end(c, run, verdict.status, verdict.error, now_us)
            ended.append(rid)
            return None
        if verdict.action is ClaimAction.FAIL:
            assert verdict.error is not None
            self._fail(c, run, verdict.error, now_us, timeline_extra={"lease": "lapsed"})
            ended.append(rid)
            return None
        reclaims = verdict.reclaims
        fence = run.fence + 1
        c.execute(
            "UPDATE runs SET status = 'running', lease_owner = ?, lease_until = ?, run_at = ?,"
            " fence = ?, reclaims = ?, started_at = COALESCE(started_at, ?), current_step = NULL,"
            " suspect = ?, solo = ?, crashes = ? WHERE run_id = ?",
            [
                owner,
                lease_us,
                lease_us,
                fence,
                reclaims,
                now_us,
                int(verdict.suspect),
                int(alone),
                verdict.crashes,
                rid,
            ],
        )
        events = []
        if prev is RunStatus.RUNNING:
            data: dict[str, Any] = {"from": run.lease_owner, "by": owner, "fence": fence}
            if verdict.suspect:
                data.update(alone=alone, crashes=verdict.crashes)
            events.append(_event(rid, now_us, "reclaimed", data))
        else:
            if prev in (RunStatus.SLEEPING, RunStatus.WAITING) or (
                prev is RunStatus.QUEUED
                and run.run_at is not None
                and to_us(run.run_at) > to_us(run.created_at)
            ):
                scheduled = to_us(run.run_at)
                events.append(
                    _event(
                        rid,
                        now_us,
                        "woke",
                        {
                            "from": str(prev),
                            "scheduled": from_us(scheduled).isoformat(timespec="microseconds"),
                            "late_ms": round((now_us - scheduled) / 1000, 3),
                        },
                    )
                )
            events.append(
                _event(
                    rid, now_us, "claimed", {"by": owner, "fence": fence, "attempt": run.attempt}
                )
            )
        c.executemany("INSERT INTO timeline (run_id, at, type, data) VALUES (?,?,?,?)", events)
        # Sleeps whose deadline has passed resolve now; their resolved_at records the actual wake.
        c.execute(
            "UPDATE journal SET state = 'done', resolved_at = ? WHERE run_id = ? AND kind = 'sleep'"
            " AND state = 'pending' AND wake_at <= ?",
            [now_us, rid, now_us],
        )
        # The row as just written, without reading it back (one statement fewer per claim).
        claimed = dataclasses.replace(
            run,
            status=RunStatus.RUNNING,
            lease_owner=owner,
            lease_until=from_us(lease_us),
            run_at=from_us(lease_us),
            fence=fence,
            reclaims=reclaims,
            started_at=run.started_at or from_us(now_us),
            suspect=verdict.suspect,
            solo=alone,
            crashes=verdict.crashes,
        )
        return Claim(run=claimed, fence=fence, owner=owner, woke_from=prev)

    # -- fenced writes by the worker holding a run --------------------------

    def _fenced(self, c: sqlite3.Connection, run_id: str, fence: int) -> bool:
        row = c.execute(
            "SELECT 1 FROM runs WHERE run_id = ? AND fence = ? AND status = 'running'",
            [run_id, fence],
        ).fetchone()
        return row is not None

    def record_entry(
        self,
        run_id: str,
        fence: int,
        entry: JournalEntry,
        now: datetime,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
    ) -> bool:
        """Journal one call's outcome (insert or replace its row). False: the lease is lost."""
        now_us = to_us(now)
        with self._write() as c:
            if not self._fenced(c, run_id, fence):
                return False
            c.execute(
                f"INSERT OR REPLACE INTO journal ({_ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    run_id,
                    entry.call_index,
                    str(entry.kind),
                    entry.name,
                    str(entry.state),
                    None
                    if entry.value is None
                    else dumps(entry.value, f"result of {entry.name!r}"),
                    _us(entry.wake_at),
                    now_us,
                    _us(entry.resolved_at),
                    entry.tries,
                    None if entry.duration is None else round(entry.duration * 1e6),
                ],
            )
            # Progress: a suspect is cleared, and the crashes charged to it forgiven.
            c.execute(
                f"UPDATE runs SET {_CLEARED} WHERE run_id = ? AND (reclaims != 0 OR suspect != 0)",
                [run_id],
            )
            if event is not None:
                _add_event(c, run_id, now_us, event[0], event[1])
            return True

    def consume_signal(
        self, run_id: str, fence: int, name: str, call_index: int, now: datetime
    ) -> tuple[bool, Any, bool]:
        """Take the oldest buffered signal `name` and journal it at `call_index`.

        Returns (lease_ok, payload, found).
        """
        now_us = to_us(now)
        with self._write() as c:
            if not self._fenced(c, run_id, fence):
                return False, None, False
            row = c.execute(
                "SELECT seq, payload FROM signals WHERE run_id = ? AND name = ? AND consumed_at IS NULL"
                " ORDER BY seq LIMIT 1",
                [run_id, name],
            ).fetchone()
            if row is None:
                return True, None, False
            seq, payload_text = row
            c.execute(
                "UPDATE signals SET consumed_at = ?, call_index = ? WHERE seq = ?",
                [now_us, call_index, seq],
            )
            value = {"payload": _loads(payload_text), "timed_out": False}
            c.execute(
                f"INSERT OR REPLACE INTO journal ({_ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    run_id,
                    call_index,
                    "signal",
                    name,
                    "done",
                    dumps(value),
                    None,
                    now_us,
                    now_us,
                    0,
                    None,
                ],
            )
            c.execute(f"UPDATE runs SET {_CLEARED} WHERE run_id = ?", [run_id])
            _add_event(c, run_id, now_us, "signal received", {"name": name, "index": call_index})
            return True, value["payload"], True

    def record_version(
        self, run_id: str, fence: int, change_id: str, version: int, now: datetime
    ) -> bool:
        with self._write() as c:
            if not self._fenced(c, run_id, fence):
                return False
            c.execute(
                "INSERT OR IGNORE INTO versions (run_id, change_id, version, recorded_at) VALUES (?,?,?,?)",
                [run_id, change_id, version, to_us(now)],
            )
            return True

    def publish(self, run_id: str, fence: int, key: str, value: Any, now: datetime) -> bool:
        """Set a status value the run shows to operators (`ctx.publish`); last write wins."""
        text = dumps(value, f"published value {key!r}")
        with self._write() as c:
            if not self._fenced(c, run_id, fence):
                return False
            c.execute(
                "INSERT OR REPLACE INTO published (run_id, key, value, at) VALUES (?,?,?,?)",
                [run_id, key, text, to_us(now)],
            )
            return True

    def published(self, run_id: str) -> dict[str, tuple[Any, datetime]]:
        rows = self._read(
            "SELECT key, value, at FROM published WHERE run_id = ? ORDER BY key", [run_id]
        )
        return {r[0]: (_loads(r[1]), from_us(r[2])) for r in rows}

    def heartbeat(
        self,
        owner: str,
        held: Sequence[tuple[str, int, float]],
        lease_until: datetime,
        now: datetime,
        steps: Mapping[str, str | None] | None = None,
    ) -> list[HeartbeatReply]:
        """Extend the leases of held runs (run_id, fence, exec_spent) in one transaction.

        Persists the execution time spent, so a budget survives restarts, and the step each
        handler is inside (`steps`, for `why`); reports what each live handler must be told:
        lease lost, cancel or pause requested, deadline passed, budget used up.
        """
        now_us, lease_us = to_us(now), to_us(lease_until)
        replies = []
        with self._write() as c:
            c.execute("UPDATE daemons SET seen_at = ? WHERE owner = ?", [now_us, owner])
            for run_id, fence, spent in held:
                row = c.execute(
                    "SELECT fence, status, cancel_requested, deadline, timeout_us,"
                    " pause_requested FROM runs WHERE run_id = ?",
                    [run_id],
                ).fetchone()
                if row is None or row[0] != fence or row[1] != "running":
                    replies.append(HeartbeatReply(run_id, lost=True))
                    continue
                _, _, cancel, deadline, timeout_us, pause_requested = row
                spent_us = round(spent * 1e6)
                c.execute(
                    "UPDATE runs SET lease_until = ?, run_at = ?, exec_spent_us = ?,"
                    " current_step = ? WHERE run_id = ?",
                    [lease_us, lease_us, spent_us, (steps or {}).get(run_id), run_id],
                )
                replies.append(
                    HeartbeatReply(
                        run_id,
                        cancel=bool(cancel),
                        deadline=deadline is not None and deadline <= now_us,
                        timeout=timeout_us is not None and spent_us >= timeout_us,
                        pause=bool(pause_requested),
                    )
                )
        return replies

    def suspend_run(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        run_at: datetime | None,
        now: datetime,
        exec_spent: float,
        entry: JournalEntry | None,
        event: tuple[str, dict[str, Any]],
    ) -> Applied | None:
        """Park a run (sleeping, waiting, or queued for a step retry), journaling its pending call.

        Clears the lease: a suspended run holds no worker. Returns what it applied (the
        effective run_at: `run_at` clamped to the deadline, or now if a signal it waits
        for is already buffered), or None when the lease is lost.
        """
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute(
                "SELECT deadline, pause_requested FROM runs WHERE run_id = ? AND fence = ?"
                " AND status = 'running'",
                [run_id, fence],
            ).fetchone()
            if row is None:
                return None
            if status is RunStatus.PAUSED:  # stopped at a durable call to honour a pause
                status, run_at = RunStatus.QUEUED, now
            at = _us(parked_run_at(run_at, deadline=_dt(row[0])))
            if entry is not None:
                c.execute(
                    f"INSERT OR REPLACE INTO journal ({_ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        run_id,
                        entry.call_index,
                        str(entry.kind),
                        entry.name,
                        str(entry.state),
                        None if entry.value is None else dumps(entry.value),
                        _us(entry.wake_at),
                        now_us,
                        None,
                        entry.tries,
                        None if entry.duration is None else round(entry.duration * 1e6),
                    ],
                )
            c.execute(
                "UPDATE runs SET status = ?, run_at = ?, lease_owner = NULL, lease_until = NULL,"
                f" exec_spent_us = ?, solo = 0, {_CLEARED} WHERE run_id = ?",
                [str(status), at, round(exec_spent * 1e6), run_id],
            )
            _add_event(c, run_id, now_us, event[0], event[1])
            # A buffered signal that arrived while we ran must not be missed.
            if status is RunStatus.WAITING and entry is not None:
                has = c.execute(
                    "SELECT 1 FROM signals WHERE run_id = ? AND name = ? AND consumed_at IS NULL",
                    [run_id, entry.name],
                ).fetchone()
                if has:
                    at = now_us
                    c.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [at, run_id])
            if row[1]:  # a pause was requested: it takes effect at this durable call
                return self._park_paused(c, _load_run(c, run_id), status, at, now_us)
            return Applied(status, _dt(at))

    def complete_run(
        self, run_id: str, fence: int, result: Any, now: datetime, exec_spent: float
    ) -> bool:
        now_us = to_us(now)
        result_text = dumps(result, "the workflow's result")
        with self._write() as c:
            cur = c.execute(
                "UPDATE runs SET status = 'completed', result = ?, error = NULL, finished_at = ?,"
                " run_at = NULL, lease_owner = NULL, lease_until = NULL, exec_spent_us = ?,"
                f" pause_requested = 0, solo = 0, {_CLEARED}"
                " WHERE run_id = ? AND fence = ? AND status = 'running'",
                [result_text, now_us, round(exec_spent * 1e6), run_id, fence],
            )
            if cur.rowcount != 1:
                return False
            _add_event(c, run_id, now_us, "completed", {})
            _wake_parent(c, run_id, now_us)
            _release_held(c, run_id, now_us)
            return True

    def fail_attempt(
        self,
        run_id: str,
        fence: int,
        error: dict[str, Any],
        now: datetime,
        exec_spent: float,
        retry_at: datetime | None,
    ) -> Applied | None:
        """End the current attempt with `error`: queue the next attempt at `retry_at` (or
        after the run's backoff), or dead-letter the run. Returns what it applied, or None
        when the lease is lost."""
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]
            ).fetchone()
            if row is None:
                return None
            run = _run_from_row(row)
            if run.fence != fence or run.status is not RunStatus.RUNNING:
                return None
            c.execute(
                "UPDATE runs SET exec_spent_us = ? WHERE run_id = ?",
                [round(exec_spent * 1e6), run_id],
            )
            return self._fail(c, run, error, now_us, retry_at=_us(retry_at))

    def _fail(
        self,
        c: sqlite3.Connection,
        run: Run,
        error: dict[str, Any],
        now_us: int,
        *,
        retry_at: int | None = None,
        timeline_extra: dict[str, Any] | None = None,
    ) -> Applied:
        """Apply next_attempt(): queue the next attempt, or dead-letter the run."""
        verdict = next_attempt(run, error, from_us(now_us), retry_at=_dt(retry_at))
        error = verdict.error
        kind = error_kind(error)
        data = {"attempt": run.attempt, "kind": str(kind), "error": _first_line(error)}
        data.update(timeline_extra or {})
        events = [_event(run.run_id, now_us, kind.label, data)]
        if verdict.retry_at is not None:
            at = to_us(verdict.retry_at)
            # A new attempt starts from the first recorded step error: checkpoints before it stand.
            c.execute(
                "DELETE FROM journal WHERE run_id = ? AND call_index >= (SELECT MIN(call_index)"
                " FROM journal WHERE run_id = ? AND state = 'error')",
                [run.run_id, run.run_id],
            )
            c.execute(
                "UPDATE runs SET status = 'queued', run_at = ?, attempt = attempt + 1, error = ?,"
                f" exec_spent_us = 0, lease_owner = NULL, lease_until = NULL, solo = 0, {_CLEARED}"
                " WHERE run_id = ?",
                [at, dumps(error), run.run_id],
            )
            events.append(
                _event(
                    run.run_id,
                    now_us,
                    "retry scheduled",
                    {
                        "attempt": run.attempt + 1,
                        "at": from_us(at).isoformat(timespec="microseconds"),
                    },
                )
            )
            c.executemany("INSERT INTO timeline (run_id, at, type, data) VALUES (?,?,?,?)", events)
            if run.pause_requested:  # it stopped: the requested pause takes effect now
                return self._park_paused(c, _load_run(c, run.run_id), RunStatus.QUEUED, at, now_us)
            return Applied(RunStatus.QUEUED, from_us(at))
        c.executemany("INSERT INTO timeline (run_id, at, type, data) VALUES (?,?,?,?)", events)
        self._end(c, run, RunStatus.DEAD, error, now_us)
        return Applied(RunStatus.DEAD, None)

    def _park_paused(
        self,
        c: sqlite3.Connection,
        run: Run,
        status: RunStatus,
        at_us: int | None,
        now_us: int,
        *,
        by: str | None = None,
    ) -> Applied:
        """Park `run` paused inside the caller's transaction: `status` and `at_us` are what
        resume gives back; meanwhile run_at is its deadline (for the deadline check only)."""
        parked = pause(status, _dt(at_us), run.deadline)
        if by is None:  # a requested pause taking effect: who asked for it
            asked = c.execute(
                "SELECT data FROM timeline WHERE run_id = ? AND type = 'pause requested'"
                " ORDER BY seq DESC LIMIT 1",
                [run.run_id],
            ).fetchone()
            by = (_loads(asked[0]) or {}).get("by") if asked else None
        c.execute(
            "UPDATE runs SET status = 'paused', paused_status = ?, paused_run_at = ?, run_at = ?,"
            " pause_requested = 0, lease_owner = NULL, lease_until = NULL, solo = 0,"
            f" {_CLEARED} WHERE run_id = ?",
            [str(parked.paused_status), _us(parked.paused_run_at), _us(parked.run_at), run.run_id],
        )
        data: dict[str, Any] = {"by": by, "was": str(status)}
        if parked.paused_run_at is not None:
            data["due"] = from_us(to_us(parked.paused_run_at)).isoformat(timespec="microseconds")
        _add_event(c, run.run_id, now_us, "paused", data)
        return Applied(RunStatus.PAUSED, parked.run_at)

    def request_pause(self, run_id: str, by: str, now: datetime) -> Run:
        """Pause a run: parked at once unless running; a running run is asked to park at its
        next durable call (nothing is interrupted). Pausing it again changes nothing."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.PAUSE, run_id, run.status)
            if run.status is RunStatus.RUNNING:
                if not run.pause_requested:
                    c.execute("UPDATE runs SET pause_requested = 1 WHERE run_id = ?", [run_id])
                    _add_event(c, run_id, now_us, "pause requested", {"by": by})
            else:
                self._park_paused(c, run, run.status, _us(run.run_at), now_us, by=by)
            return _load_run(c, run_id)

    def resume(self, run_id: str, by: str, now: datetime) -> Run:
        """Give a paused run back its status, due at once if its wake passed meanwhile, else
        at its wake; for a running run, withdraw the pause it was asked for."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.RESUME, run_id, run.status, pause_requested=run.pause_requested)
            if run.status is RunStatus.RUNNING:
                c.execute("UPDATE runs SET pause_requested = 0 WHERE run_id = ?", [run_id])
                _add_event(c, run_id, now_us, "resumed", {"by": by, "was": "pause requested"})
                return _load_run(c, run_id)
            back = resume(run, from_us(now_us))
            c.execute(
                "UPDATE runs SET status = ?, run_at = ?, paused_status = NULL,"
                " paused_run_at = NULL WHERE run_id = ?",
                [str(back.status), _us(back.run_at), run_id],
            )
            data: dict[str, Any] = {"by": by, "status": str(back.status)}
            if back.run_at is not None:
                data["due"] = back.run_at.isoformat(timespec="microseconds")
            _add_event(c, run_id, now_us, "resumed", data)
            if run.schedule is not None and back.run_at is None:
                _release_next(c, run.schedule, now_us, after=None)  # a held run: never stranded
            return _load_run(c, run_id)

    def pauses_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to pause (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND pause_requested = 1"
            f" AND run_id IN ({','.join('?' * len(run_ids))})",
            list(run_ids),
        )
        return [r[0] for r in rows]

    def _end(
        self,
        c: sqlite3.Connection,
        run: Run,
        status: RunStatus,
        error: dict[str, Any] | None,
        now_us: int,
    ) -> None:
        c.execute(
            "UPDATE runs SET status = ?, error = ?, finished_at = ?, run_at = NULL, lease_owner = NULL,"
            " lease_until = NULL, pause_requested = 0, paused_status = NULL, paused_run_at = NULL,"
            f" solo = 0, {_CLEARED} WHERE run_id = ?",
            [str(status), None if error is None else dumps(error), now_us, run.run_id],
        )
        label = "dead-lettered" if status is RunStatus.DEAD else str(status)
        data = {} if error is None else {"kind": error.get("kind"), "error": _first_line(error)}
        _add_event(c, run.run_id, now_us, label, data)
        _wake_parent(c, run.run_id, now_us)
        _release_held(c, run.run_id, now_us)

    def end_run(
        self,
        run_id: str,
        fence: int,
        status: RunStatus,
        error: dict[str, Any] | None,
        now: datetime,
        exec_spent: float,
    ) -> bool:
        """End a held run terminally (cancelled, or dead without retry)."""
        with self._write() as c:
            row = c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]
            ).fetchone()
            if row is None:
                return False
            run = _run_from_row(row)
            if run.fence != fence or run.status is not RunStatus.RUNNING:
                return False
            c.execute(
                "UPDATE runs SET exec_spent_us = ? WHERE run_id = ?",
                [round(exec_spent * 1e6), run_id],
            )
            self._end(c, run, status, error, to_us(now))
            return True

    def add_event(self, run_id: str, type_: str, data: dict[str, Any], now: datetime) -> None:
        with self._write() as c:
            _add_event(c, run_id, to_us(now), type_, data)

    def add_events(
        self, run_ids: Sequence[str], type_: str, data: dict[str, Any], now: datetime
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            c.executemany(
                "INSERT INTO timeline (run_id, at, type, data) VALUES (?,?,?,?)",
                [_event(rid, now_us, type_, data) for rid in run_ids],
            )

    # -- operator actions ----------------------------------------------------

    def send_signal(self, run_id: str, name: str, payload: Any, now: datetime) -> RunStatus:
        """Buffer a signal; a run waiting for a signal becomes due now."""
        now_us = to_us(now)
        text = dumps(payload, "the signal payload")
        with self._write() as c:
            row = c.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            status = RunStatus(row[0])
            guard(Action.SIGNAL, run_id, status)
            c.execute(
                "INSERT INTO signals (run_id, name, payload, sent_at) VALUES (?,?,?,?)",
                [run_id, name, text, now_us],
            )
            c.execute(
                "UPDATE runs SET run_at = ? WHERE run_id = ? AND status = 'waiting'",
                [now_us, run_id],
            )
            c.execute(  # paused while waiting: due at once when resumed
                "UPDATE runs SET paused_run_at = ? WHERE run_id = ? AND status = 'paused'"
                " AND paused_status = 'waiting'",
                [now_us, run_id],
            )
            _add_event(c, run_id, now_us, "signal sent", {"name": name})
            return status

    def request_cancel(self, run_id: str, reason: str | None, by: str, now: datetime) -> RunStatus:
        """Cancel at once unless running; a running run gets the request at its next heartbeat.

        Returns the status after the call (cancelled, or running when only requested).
        """
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.CANCEL, run_id, run.status)
            data = {"by": by, **({"reason": reason} if reason else {})}
            if run.status is RunStatus.RUNNING:
                c.execute(
                    "UPDATE runs SET cancel_requested = 1, cancel_reason = ? WHERE run_id = ?",
                    [reason, run_id],
                )
                _add_event(c, run_id, now_us, "cancel requested", data)
                return RunStatus.RUNNING
            c.execute(
                "UPDATE runs SET cancel_requested = 1, cancel_reason = ? WHERE run_id = ?",
                [reason, run_id],
            )
            self._end(c, run, RunStatus.CANCELLED, cancel_error(reason, by), now_us)
            return RunStatus.CANCELLED

    def redrive(self, run_id: str, by: str, now: datetime) -> Run:
        """Put a dead (or cancelled) run back in the queue with a fresh attempt budget."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.REDRIVE, run_id, run.status)
            # Like a retry, start again at the first step error (a step waiting to retry
            # gets a fresh budget too). Pending sleeps and signal waits are kept: a recorded
            # deadline stands, a redrive is not a restart of the sleep.
            c.execute(
                "DELETE FROM journal WHERE run_id = ? AND call_index >= (SELECT MIN(call_index)"
                " FROM journal WHERE run_id = ? AND state IN ('error', 'retrying'))",
                [run_id, run_id],
            )
            c.execute(
                "UPDATE runs SET status = 'queued', run_at = ?, attempt = 1, deadline = NULL,"
                " exec_spent_us = 0, finished_at = NULL, cancel_requested = 0, cancel_reason = NULL,"
                f" {_CLEARED}, solo = 0, lease_owner = NULL, lease_until = NULL WHERE run_id = ?",
                [now_us, run_id],
            )
            _add_event(c, run_id, now_us, "redriven", {"by": by, "was": str(run.status)})
            return _load_run(c, run_id)

    def wake_now(self, run_id: str, by: str, now: datetime) -> Run:
        """End a sleep early (operator action); the recorded wake_at is kept for history."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.WAKE, run_id, run.status)
            c.execute(
                "UPDATE journal SET state = 'done', resolved_at = ? WHERE run_id = ? AND kind = 'sleep'"
                " AND state = 'pending'",
                [now_us, run_id],
            )
            c.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [now_us, run_id])
            _add_event(
                c, run_id, now_us, "woken by operator", {"by": by, "was_due": _iso_us(run.run_at)}
            )
            return _load_run(c, run_id)

    # -- daemons registry ---------------------------------------------------

    def register_daemon(
        self,
        owner: str,
        host: str,
        pid: int,
        proc_start: str | None,
        now: datetime,
        info: dict[str, Any],
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            c.execute(
                "INSERT OR REPLACE INTO daemons (owner, host, pid, proc_start, started_at, seen_at, info)"
                " VALUES (?,?,?,?,?,?,?)",
                [owner, host, pid, proc_start, now_us, now_us, dumps(info)],
            )

    def unregister_daemon(self, owner: str, now: datetime | None = None) -> None:
        """Forget a daemon, remembering when it was last seen (`now`, else its last heartbeat)."""
        with self._write() as c:
            row = c.execute("SELECT seen_at FROM daemons WHERE owner = ?", [owner]).fetchone()
            if row is not None:
                seen = row[0] if now is None else max(row[0], to_us(now))
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('daemon_last_seen', ?) ON CONFLICT(key)"
                    " DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS"
                    " INTEGER))",
                    [str(seen)],
                )
            c.execute("DELETE FROM daemons WHERE owner = ?", [owner])

    def daemon_last_seen(self) -> datetime | None:
        """When a daemon was last seen on this database: a stopped one's last moment, or the
        latest heartbeat of one still registered."""
        rows = self._read(
            "SELECT MAX(v) FROM (SELECT CAST(value AS INTEGER) AS v FROM meta"
            " WHERE key = 'daemon_last_seen' UNION ALL SELECT MAX(seen_at) FROM daemons)"
        )
        return _dt(rows[0][0])

    def daemons(self) -> list[DaemonInfo]:
        rows = self._read(
            "SELECT owner, host, pid, proc_start, started_at, seen_at, info FROM daemons ORDER BY started_at"
        )
        return [
            DaemonInfo(r[0], r[1], r[2], r[3], from_us(r[4]), from_us(r[5]), _loads(r[6]) or {})
            for r in rows
        ]

    def due_ahead(self, run_id: str, run_at: datetime) -> int:
        """How many runs the claim order (run_at, then run id) puts before one due at run_at."""
        at_us = to_us(run_at)
        total = 0
        for status in ("queued", "sleeping", "waiting", "running"):
            total += int(
                self._read(
                    "SELECT COUNT(*) FROM runs WHERE status = ? AND run_at <= ?"
                    " AND (run_at < ? OR run_id < ?)",
                    [status, at_us, at_us, run_id],
                )[0][0]
            )
        return total

    def last_event(self, run_id: str, types: Sequence[str]) -> TimelineEvent | None:
        """The run's newest timeline event of one of these types."""
        rows = self._read(
            f"SELECT run_id, at, type, data FROM timeline WHERE run_id = ? AND type IN"
            f" ({','.join('?' * len(types))}) ORDER BY seq DESC LIMIT 1",
            [run_id, *types],
        )
        if not rows:
            return None
        r = rows[0]
        return TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})

    def held_count(self, owner: str) -> int:
        return int(
            self._read(
                "SELECT COUNT(*) FROM runs WHERE status = 'running' AND lease_owner = ?", [owner]
            )[0][0]
        )

    # -- TUI support ---------------------------------------------------------

    def count_by_status_matching(
        self, workflow: str | None, search: str | None
    ) -> dict[RunStatus, int]:
        """Counts per status under the same workflow/search narrowing as list_runs.

        The TUI's tab counts must agree with the rows it lists when a search is active.
        """
        where: list[str] = []
        params: list[Any] = []
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        if search:
            clause, args = _search_clause(search)
            where.append(clause)
            params.extend(args)
        sql = "SELECT status, COUNT(*) FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        counts = {s: 0 for s in RunStatus}
        for status, n in self._read(sql + " GROUP BY status", params):
            counts[RunStatus(status)] = n
        return counts

    def pending_calls(self, run_ids: Sequence[str]) -> dict[str, tuple[CallKind, str]]:
        """The unresolved call (kind, name) each run is parked on: what a waiting run waits for.

        One query for a page of runs, so a list can show it without reading whole journals.
        """
        if not run_ids:
            return {}
        rows = self._read(
            "SELECT run_id, kind, name FROM journal WHERE state = 'pending' AND run_id IN"
            f" ({','.join('?' * len(run_ids))}) ORDER BY call_index",
            list(run_ids),
        )
        return {r[0]: (CallKind(r[1]), r[2]) for r in rows}

    # -- schedules -----------------------------------------------------------
    # Definitions, fires and history (issue 7). The calendar (which instants fire) is
    # computed by flowctl.schedule / flowctl.scheduler; the store only records decisions,
    # each fire in the same transaction as the run it creates.

    def add_schedule(
        self, new: NewSchedule, now: datetime, *, replace: bool = False
    ) -> ScheduleRow:
        """Insert a schedule, or with `replace` redefine an existing one.

        A redefinition keeps the name's history, creation time, pause state and last fire, and
        takes effect from `now` (active_from): it never backfills fires of the old definition.
        """
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute("SELECT paused FROM schedules WHERE name = ?", [new.name]).fetchone()
            if row is not None and not replace:
                raise ScheduleError(
                    f"schedule {new.name!r} already exists: use --replace to redefine it,"
                    " or choose another name"
                )
            if row is None:
                c.execute(
                    "INSERT INTO schedules (name, target, cwd, input, spec, paused, created_at,"
                    " updated_at, active_from, last_fire_at, next_fire_at, revision, source, origin,"
                    " secret_keys) VALUES (?,?,?,?,?,0,?,?,?,NULL,?,1,?,?,?)",
                    [
                        new.name,
                        new.target,
                        new.cwd,
                        dumps(new.input, "the schedule's input"),
                        new.spec,
                        now_us,
                        now_us,
                        now_us,
                        _us(new.next_fire_at),
                        new.source,
                        new.origin,
                        _secret_keys_json(new.secret_keys),
                    ],
                )
            else:
                c.execute(
                    "UPDATE schedules SET target = ?, cwd = ?, input = ?, spec = ?, updated_at = ?,"
                    " active_from = ?, next_fire_at = CASE WHEN paused THEN NULL ELSE ? END,"
                    " revision = revision + 1, source = ?, origin = ?, secret_keys = ?"
                    " WHERE name = ?",
                    [
                        new.target,
                        new.cwd,
                        dumps(new.input, "the schedule's input"),
                        new.spec,
                        now_us,
                        now_us,
                        _us(new.next_fire_at),
                        new.source,
                        new.origin,
                        _secret_keys_json(new.secret_keys),
                        new.name,
                    ],
                )
            return _schedule_row(c, new.name)

    def get_schedule(self, name: str) -> ScheduleRow:
        with self._reading() as c:
            return _schedule_row(c, name)

    def list_schedules(self) -> list[ScheduleRow]:
        rows = self._read(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules ORDER BY name")
        return [_schedule_from_row(r) for r in rows]

    def set_schedule_paused(
        self, name: str, paused: bool, next_fire_at: datetime | None, now: datetime
    ) -> ScheduleRow:
        """Pause (no fires at all) or resume. A resume takes effect from `now`: fires that fell
        in the pause are not missed fires, they are not fires."""
        now_us = to_us(now)
        with self._write() as c:
            _schedule_row(c, name)  # raises when it does not exist
            if paused:
                c.execute(
                    "UPDATE schedules SET paused = 1, next_fire_at = NULL, updated_at = ?,"
                    " revision = revision + 1 WHERE name = ?",
                    [now_us, name],
                )
            else:
                c.execute(
                    "UPDATE schedules SET paused = 0, next_fire_at = ?, active_from = ?,"
                    " updated_at = ?, revision = revision + 1 WHERE name = ? AND paused = 1",
                    [_us(next_fire_at), now_us, now_us, name],
                )
            return _schedule_row(c, name)

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule and its history. Its runs stay, still naming it."""
        with self._write() as c:
            cur = c.execute("DELETE FROM schedules WHERE name = ?", [name])
            if cur.rowcount == 0:
                raise ScheduleNotFoundError(name)

    def schedule_history(self, name: str, limit: int = 20) -> list[ScheduleEvent]:
        """The most recent `limit` decisions for a schedule, oldest first."""
        rows = self._read(
            f"SELECT * FROM (SELECT {_HISTORY_COLUMNS}, h.seq FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id WHERE h.schedule = ?"
            " ORDER BY h.seq DESC LIMIT ?) ORDER BY seq",
            [name, limit],
        )
        return [_history_from_row(r) for r in rows]

    def last_schedule_events(self) -> dict[str, ScheduleEvent]:
        """Each schedule's latest history row (for `schedule ls`), with its run's status."""
        rows = self._read(
            f"SELECT {_HISTORY_COLUMNS} FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id"
            " WHERE h.seq IN (SELECT MAX(seq) FROM schedule_history GROUP BY schedule)"
        )
        return {r[0]: _history_from_row(r) for r in rows}

    def due_schedules(self, now: datetime) -> list[ScheduleRow]:
        rows = self._read(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE next_fire_at <= ? AND paused = 0"
            " ORDER BY next_fire_at",
            [to_us(now)],
        )
        return [_schedule_from_row(r) for r in rows]

    def next_schedule_fire(self) -> datetime | None:
        """The soonest unhandled fire over all active schedules: when the daemon must wake."""
        row = self._read(
            "SELECT MIN(next_fire_at) FROM schedules WHERE next_fire_at IS NOT NULL AND paused = 0"
        )
        return _dt(row[0][0])

    def fire_schedule(
        self,
        name: str,
        revision: int,
        plans: Sequence[FirePlan],
        *,
        overlap: str,
        last_fire_at: datetime | None,
        next_fire_at: datetime | None,
        now: datetime,
    ) -> list[FireOutcome] | None:
        """Carry out one tick's decisions for a schedule in ONE transaction: create the runs
        (idempotency key per fire), write the history, advance last/next fire.

        Returns None, changing nothing, when the schedule changed since `revision` was read
        (another daemon fired it, an operator paused or redefined it): the caller re-reads.
        Because runs, history and bookkeeping commit together, a crash before the commit
        leaves the fire due (it fires on restart) and a crash after leaves it done; and a run
        whose key already exists is never created again.
        """
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute(
                "SELECT revision, paused FROM schedules WHERE name = ?", [name]
            ).fetchone()
            if row is None or row[0] != revision or row[1]:
                return None
            outcomes = [_fire_plan(self, c, name, plan, overlap, now_us) for plan in plans]
            c.execute(
                "UPDATE schedules SET last_fire_at = ?, next_fire_at = ?, revision = revision + 1"
                " WHERE name = ?",
                [_us(last_fire_at), _us(next_fire_at), name],
            )
            # Keep the newest HISTORY_KEEP rows: a 15-minute schedule adds 35,000 a year.
            c.execute(
                "DELETE FROM schedule_history WHERE schedule = ? AND seq < (SELECT seq FROM"
                " schedule_history WHERE schedule = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                [name, name, HISTORY_KEEP - 1],
            )
            return outcomes

    def trigger_schedule(
        self, name: str, plan: FirePlan, *, overlap: str, now: datetime
    ) -> FireOutcome:
        """A manual fire (`flowctl schedule trigger`): like a scheduled one, under the same
        overlap policy, but it does not move last/next fire."""
        with self._write() as c:
            _schedule_row(c, name)
            return _fire_plan(self, c, name, plan, overlap, to_us(now))

    def agenda_runs(self, until: datetime, limit: int) -> list[tuple[datetime, str, Run]]:
        """(when, kind, run) for every active run's next due time and deadline up to `until`,
        soonest first; overdue ones are included. Kinds: start, retry, wake, timeout, deadline.

        Held runs (overlap=queue, run_at NULL) have no time and are not listed.
        """
        until_us = to_us(until)
        out: list[tuple[datetime, str, Run]] = []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS}, EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id"
            " AND j.state = 'retrying') FROM runs WHERE status IN ('queued', 'sleeping', 'waiting')"
            " AND run_at IS NOT NULL AND run_at <= ? ORDER BY run_at LIMIT ?",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.run_at is not None
            if run.status is RunStatus.SLEEPING:
                kind = "wake"
            elif run.status is RunStatus.WAITING:
                kind = "timeout"
            else:
                kind = "retry" if (r[-1] or run.attempt > 1) else "start"
            out.append((run.run_at, kind, run))
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE deadline IS NOT NULL AND deadline <= ?"
            " AND status IN ('queued', 'running', 'sleeping', 'waiting', 'paused')"
            " ORDER BY deadline LIMIT ?",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.deadline is not None
            out.append((run.deadline, "deadline", run))
        out.sort(key=lambda item: (item[0], item[2].run_id))
        return out[:limit]


def _search_clause(search: str) -> tuple[str, list[Any]]:
    """`ls --search`: the run id, or the input as shown, with every secret value replaced
    by "***" before matching, so a secret never matches."""
    pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    clause = (
        "(run_id LIKE ? ESCAPE '\\' OR (CASE WHEN secret_keys IS NULL THEN input ELSE"
        " json_patch(input, (SELECT json_group_object(value, '***')"
        " FROM json_each(runs.secret_keys))) END) LIKE ? ESCAPE '\\')"
    )
    return clause, [pattern, pattern]


def _load_run(c: sqlite3.Connection, run_id: str) -> Run:
    """The run as it is inside this transaction."""
    row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    return _run_from_row(row)


def _iso_us(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat(timespec="microseconds")


def _first_line(error: dict[str, Any]) -> str:
    msg = str(error.get("message") or "")
    first = msg.splitlines()[0] if msg else ""
    return f"{error.get('type', 'Error')}: {first}" if first else str(error.get("type", "Error"))


def _suspect_data(run: Run, verdict: ClaimVerdict) -> dict[str, Any]:
    note = (
        "its worker died while running it alone: the crash is charged to it"
        if verdict.charged
        else "its worker died with other runs in flight: it runs alone next, to tell"
    )
    return {"from": run.lease_owner, "crashes": verdict.crashes, "note": note}


def _wake_parent(c: sqlite3.Connection, run_id: str, now_us: int) -> None:
    """A child run ended: its waiting parent becomes due (when resumed, if it is paused)."""
    c.execute(
        "UPDATE runs SET run_at = ? WHERE status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = ?)",
        [now_us, run_id],
    )
    c.execute(
        "UPDATE runs SET paused_run_at = ? WHERE status = 'paused' AND paused_status = 'waiting'"
        " AND run_id = (SELECT parent_run_id FROM runs WHERE run_id = ?)",
        [now_us, run_id],
    )


# ---------------------------------------------------------------------------
# Connecting


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
    import random
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
        if app_id != APPLICATION_ID:
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
        if version > SCHEMA_VERSION:
            raise DatabaseError(
                f"database schema version {version} is newer than this flowctl understands"
                f" ({SCHEMA_VERSION}); upgrade flowctl"
            )
        if version < 1:
            raise DatabaseError(
                f"{path} has an invalid flowctl schema version {version} (valid: 1 to"
                f" {SCHEMA_VERSION}); it was changed by hand: restore a copy"
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
        _migrate(conn)
        return conn, False
    p = Path(path)
    if p.is_dir():
        raise DatabaseError(f"{path} is a folder; --db takes a database file")
    if not p.exists():
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
        if version != SCHEMA_VERSION:
            raise ReadOnlyDatabaseError(
                f"read-only database: {path} has schema version {version}, older than this"
                f" flowctl's {SCHEMA_VERSION}; open it once with write access to upgrade it"
            )
        return _connect_read_only(p), True
    _make_private(p)  # before the WAL and SHM exist: SQLite gives them the file's mode
    conn = _connect(path, durability)
    try:
        _migrate(conn)
    except sqlite3.Error as e:
        conn.close()
        raise _fault(e, path) from None
    except BaseException:
        conn.close()
        raise
    _make_private(p)
    return conn, False


def _migrate(conn: sqlite3.Connection) -> None:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == SCHEMA_VERSION and _has_marker(conn):
        return  # the common case: no sqlite-utils import on a command's start-up path
    import sqlite_utils

    db = sqlite_utils.Database(conn)

    def run() -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if current > SCHEMA_VERSION or current < 0:  # changed since _inspect looked
                raise DatabaseError(
                    f"database schema version {current} is not one this flowctl understands"
                    f" (1 to {SCHEMA_VERSION})"
                )
            for i in range(current, SCHEMA_VERSION):
                MIGRATIONS[i](db)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    _retry_locked(run)


def _has_marker(conn: sqlite3.Connection) -> bool:
    return int(conn.execute("PRAGMA application_id").fetchone()[0]) == APPLICATION_ID


# ---------------------------------------------------------------------------
# Schedules: rows and the fire transaction's pieces


@dataclass(frozen=True)
class NewSchedule:
    """A schedule definition to store; built by ops (CLI, sync)."""

    name: str
    target: str  # canonical workflow target (absolute path or module:function)
    cwd: str | None
    input: dict[str, Any]
    spec: str  # ScheduleSpec.to_json()
    source: str = "cli"  # cli | yaml | toml
    origin: str | None = None  # the file that declares it (yaml/toml)
    next_fire_at: datetime | None = None
    secret_keys: tuple[str, ...] = ()  # the workflow's secret inputs, masked when shown


@dataclass(frozen=True)
class ScheduleRow:
    name: str
    target: str
    cwd: str | None
    input: dict[str, Any]
    spec: str
    paused: bool
    created_at: datetime
    updated_at: datetime
    active_from: datetime
    last_fire_at: datetime | None
    next_fire_at: datetime | None
    revision: int
    source: str
    origin: str | None
    secret_keys: tuple[str, ...] = ()  # input keys shown as ***; fired runs get the real values

    @property
    def shown_input(self) -> dict[str, Any]:
        """The input as every front end shows it: secret values replaced by SECRET_MASK."""
        shown: dict[str, Any] = mask_secrets(self.input, self.secret_keys)
        return shown


@dataclass(frozen=True)
class ScheduleEvent:
    """One history row: what was decided for one fire time (or for a failure)."""

    schedule: str
    fire_at: datetime | None
    action: str  # fired | skipped-missed | skipped-overlap | queued-overlap | manual | error
    run_id: str | None
    at: datetime
    detail: str | None
    run_status: RunStatus | None = None  # the run's status now, when there is a run


@dataclass(frozen=True)
class FirePlan:
    """One decision handed to fire_schedule: `run` is set for fired/manual, None for
    skipped-missed and error (history only)."""

    fire_at: datetime | None
    action: str
    run: NewRun | None = None
    detail: str | None = None


@dataclass(frozen=True)
class FireOutcome:
    fire_at: datetime | None
    action: str  # as written to the history; "duplicate" when the key already had a run
    run_id: str | None
    created: bool
    detail: str | None = None


_SCHEDULE_COLUMNS = (
    "name, target, cwd, input, spec, paused, created_at, updated_at, active_from, last_fire_at,"
    " next_fire_at, revision, source, origin, secret_keys"
)
HISTORY_KEEP = 1000  # history rows kept per schedule
_HISTORY_COLUMNS = "h.schedule, h.fire_at, h.action, h.run_id, h.at, h.detail, r.status"
_ACTIVE_SQL = "('queued', 'running', 'sleeping', 'waiting', 'paused')"
# A run of a schedule that is active and not held behind another (overlap=queue). A held
# run is queued with run_at NULL, which no claim and no timer wheel ever picks up.
_RUNNING_OF_SCHEDULE = (
    f"schedule = ? AND status IN {_ACTIVE_SQL} AND NOT (status = 'queued' AND run_at IS NULL)"
    " AND NOT (status = 'paused' AND paused_status = 'queued' AND paused_run_at IS NULL)"
)


def _schedule_from_row(r: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(
        name=r[0],
        target=r[1],
        cwd=r[2],
        input=json.loads(r[3]),
        spec=r[4],
        paused=bool(r[5]),
        created_at=from_us(r[6]),
        updated_at=from_us(r[7]),
        active_from=from_us(r[8]),
        last_fire_at=_dt(r[9]),
        next_fire_at=_dt(r[10]),
        revision=r[11],
        source=r[12],
        origin=r[13],
        secret_keys=tuple(_loads(r[14]) or ()),
    )


def _secret_keys_json(keys: tuple[str, ...]) -> str | None:
    """The secret_keys column: a sorted JSON list, NULL for none (as for runs)."""
    return dumps(sorted(keys)) if keys else None


def _schedule_row(c: sqlite3.Connection, name: str) -> ScheduleRow:
    row = c.execute(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE name = ?", [name]).fetchone()
    if row is None:
        raise ScheduleNotFoundError(name)
    return _schedule_from_row(row)


def _history_from_row(r: Sequence[Any]) -> ScheduleEvent:
    return ScheduleEvent(
        schedule=r[0],
        fire_at=_dt(r[1]),
        action=r[2],
        run_id=r[3],
        at=from_us(r[4]),
        detail=r[5],
        run_status=None if r[6] is None else RunStatus(r[6]),
    )


def _add_history(
    c: sqlite3.Connection,
    name: str,
    fire_at: datetime | None,
    action: str,
    run_id: str | None,
    now_us: int,
    detail: str | None,
) -> None:
    c.execute(
        "INSERT INTO schedule_history (schedule, fire_at, action, run_id, at, detail)"
        " VALUES (?,?,?,?,?,?)",
        [name, _us(fire_at), action, run_id, now_us, detail],
    )


def _fire_plan(
    store: Store, c: sqlite3.Connection, name: str, plan: FirePlan, overlap: str, now_us: int
) -> FireOutcome:
    """Apply one fire decision inside the caller's transaction, under the overlap policy.

    overlap=queue: the new run is created `queued` with run_at NULL ("held"); the
    transaction that ends the schedule's running run releases the oldest held one
    (_release_held), so held runs start one after another, in fire order.
    """
    if plan.run is None:
        _add_history(c, name, plan.fire_at, plan.action, None, now_us, plan.detail)
        return FireOutcome(plan.fire_at, plan.action, None, False, plan.detail)
    new = plan.run
    if new.key is not None:
        row = c.execute("SELECT run_id FROM runs WHERE key = ?", [new.key]).fetchone()
        if row is not None:
            return FireOutcome(plan.fire_at, "duplicate", row[0], False, "already fired")
    if overlap == "queue":
        _release_next(c, name, now_us, after=None)  # self-heal: never hold behind nothing
    active = c.execute(
        f"SELECT run_id, status FROM runs WHERE {_RUNNING_OF_SCHEDULE}"
        " ORDER BY created_at DESC LIMIT 1",
        [name],
    ).fetchone()
    detail = plan.detail
    if active is not None and overlap == "skip":
        why = f"run {active[0]} is still {active[1]}"
        if plan.action == "manual":
            why = f"manual trigger: {why}"
        _add_history(c, name, plan.fire_at, "skipped-overlap", None, now_us, why)
        return FireOutcome(plan.fire_at, "skipped-overlap", None, False, why)
    run, created = store._insert_run(c, new, now_us)
    action = plan.action
    if active is not None and overlap == "queue":
        c.execute("UPDATE runs SET run_at = NULL WHERE run_id = ?", [run.run_id])
        _add_event(c, run.run_id, now_us, "held", {"schedule": name, "behind": active[0]})
        held = f"held until run {active[0]} ends"
        detail = f"{detail}; {held}" if detail else held
        if action == "fired":
            action = "queued-overlap"
    _add_history(c, name, plan.fire_at, action, run.run_id, now_us, detail)
    return FireOutcome(plan.fire_at, action, run.run_id, created, detail)


def _release_next(c: sqlite3.Connection, schedule: str, now_us: int, after: str | None) -> None:
    """Make the oldest held run of `schedule` due now, unless one of its runs still runs."""
    if c.execute(f"SELECT 1 FROM runs WHERE {_RUNNING_OF_SCHEDULE} LIMIT 1", [schedule]).fetchone():
        return
    row = c.execute(
        "SELECT run_id FROM runs WHERE schedule = ? AND status = 'queued' AND run_at IS NULL"
        " ORDER BY scheduled_at, created_at, run_id LIMIT 1",
        [schedule],
    ).fetchone()
    if row is None:
        return
    c.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [now_us, row[0]])
    data = {"schedule": schedule, **({"after": after} if after else {})}
    _add_event(c, row[0], now_us, "released", data)


def _release_held(c: sqlite3.Connection, run_id: str, now_us: int) -> None:
    """A run ended: if it belongs to a schedule with held runs (overlap=queue), start the next.

    Called in the same transaction as every terminal transition, so no held run is ever
    stranded and no two runs of a queue schedule ever overlap.
    """
    row = c.execute("SELECT schedule FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is not None and row[0] is not None:
        _release_next(c, row[0], now_us, after=run_id)
