"""Opening a SQLite database file: inspecting it, creating it, its pragmas, one-line faults."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

from flowctl.errors import (
    DatabaseCorruptError,
    DatabaseError,
    DatabaseNotFoundError,
    DiskFullError,
    ReadOnlyDatabaseError,
)
from flowctl.store.sqlite import migrating, schema

BUSY_TIMEOUT_MS = 10_000
QUICK_CHECK_MAX_BYTES = 8 * 2**20  # files up to this size get PRAGMA quick_check on open (~30 ms)
# Checkpoint the WAL when it grows past this many pages (1 MiB) and truncate it back to
# WAL_BOUND_BYTES afterwards. At 64 pages (256 KB) a daemon waking 100,000 sleepers
# checkpointed and truncated every ~3 commits, and the wake p99 was 166-1,757 ms; at 256
# pages 18-70 ms (benchmarks/daemon.py --only many). 1 MiB still leaves a full disk
# recoverable with little free space.
WAL_BOUND_PAGES = 256
WAL_BOUND_BYTES = 1024 * 1024


def identity(path: str, *, strict: bool = False) -> tuple[int, int] | None:
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


def retry_locked(fn: Any, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> Any:
    """Retry `fn` while SQLite says the database is locked or busy, up to the busy timeout.

    The busy handler does not cover every case (the WAL switch, a deferred transaction
    upgrading), so creation and BEGIN IMMEDIATE are retried here as well.
    """

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
        mode = retry_locked(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
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
        raise fault(e, path) from None
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
        raise fault(e, str(path)) from None
    return conn


def _inspect(path: Path) -> int:
    """Decide, without changing one byte, whether `path` may be opened: returns its schema
    version (0 for a new or empty SQLite file) or raises a one-line DatabaseError.

    flowctl's own files carry APPLICATION_ID in the header; files written before the
    marker existed are recognised by their version and their runs/journal tables. Small
    files get a `PRAGMA quick_check` here, so corruption is reported on open by every
    command, reads included.
    """
    wal_bytes = _bytes(Path(f"{path}-wal"))
    has_wal = wal_bytes > 0
    if path.stat().st_size == 0 and not has_wal:
        return 0
    # With no WAL to read, look with immutable=1: no lock, no -shm, no -wal is created.
    uri = f"{path.resolve().as_uri()}?mode=ro" + ("" if has_wal else "&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as e:
        raise fault(e, str(path)) from None
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
        if path.stat().st_size + wal_bytes <= QUICK_CHECK_MAX_BYTES:
            _quick_check(conn, str(path))
    except sqlite3.Error as e:
        raise fault(e, str(path)) from None
    finally:
        conn.close()
    return version


def _bytes(path: Path) -> int:
    """A file's size, 0 when it is not there: another process's last connection to close
    removes the WAL, so it can go between a look and a stat (a daemon started as another
    was killed failed to start, with a traceback, on that race)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _quick_check(conn: sqlite3.Connection, path: str) -> None:
    rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    if [r[0] for r in rows] != ["ok"]:
        raise DatabaseCorruptError(
            f"database disk image is malformed: {path} ({rows[0][0]}); restore a copy, or try"
            f" `sqlite3 {path} .recover`"
        )


def fault(e: sqlite3.Error, path: str) -> DatabaseError:
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


def open_database(
    path: str, durability: str, *, create: bool, allow_read_only: bool
) -> tuple[sqlite3.Connection, bool]:
    """Open `path` as a flowctl database: (connection, read_only).

    Nothing is written before the file is known to be new, empty or flowctl's own at a
    schema this flowctl understands. A missing file is created only with `create`; a
    file this process cannot write is opened read-only only with `allow_read_only`.
    """
    if path == ":memory:":
        conn = _connect(path, durability)
        retry_locked(lambda: migrating.migrate(conn))
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
        retry_locked(lambda: migrating.migrate(conn))
    except sqlite3.Error as e:
        conn.close()
        raise fault(e, path) from None
    except BaseException:
        conn.close()
        raise
    _make_private(p)
    return conn, False
