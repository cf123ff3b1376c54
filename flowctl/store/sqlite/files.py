"""Care of the database file itself: a consistent backup, and giving space back.

None of these change a run; a backup is checked whole before it appears at its path."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from flowctl.errors import DatabaseError, FlowctlError
from flowctl.store.sqlite.schema import APPLICATION_ID


def backup(
    path: str,
    dest: str | os.PathLike[str],
    *,
    overwrite: bool,
    copy: Callable[[Path], None],
) -> None:
    """Write a consistent copy of the database to `dest` with VACUUM INTO (one read
    transaction: a snapshot that writers in other processes do not wait for), check it
    with PRAGMA integrity_check, and only then move it to `dest` (a rename in the same
    folder): on any failure `dest` is untouched and no partial file is left."""
    target = Path(dest)
    _refuse_target(path, target, overwrite)
    tmp = target.with_name(f".{target.name}.flowctl-backup-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as e:
        raise DatabaseError(f"cannot write the backup in {target.parent}: {e.strerror}") from None
    try:
        copy(tmp)  # VACUUM INTO, on the live connection
        _forget_daemons(tmp)
        _check_copy(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails if `dest` appeared meanwhile: never overwritten
            tmp.unlink()
        _fsync_dir(target.parent)
    except FileExistsError:
        raise FlowctlError(f"{target} already exists; give --force to overwrite it") from None
    except OSError as e:
        raise DatabaseError(f"cannot write the backup {target}: {e.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _refuse_target(path: str, target: Path, overwrite: bool) -> None:
    """A backup's destination that must not be written: one that exists (unless
    `overwrite`), the database itself or one of its files, a node that is not a file, a
    database in use."""
    if target.exists() and not overwrite:
        raise FlowctlError(f"{target} already exists; give --force to overwrite it")
    if target.exists() and path != ":memory:" and os.path.samefile(target, path):
        raise FlowctlError(f"{target} is the database itself: give the backup another path")
    if target.exists() and not target.is_file():
        # A rename onto it would replace the node itself: `backup /dev/null --force` as
        # root turned /dev/null into a regular file (the CLI fuzz found it).
        raise FlowctlError(
            f"{target} is not a regular file (a folder, a device or a pipe): give a file's"
            " path for the backup"
        )
    if path != ":memory:":
        # Its write-ahead log, shared memory or journal: overwriting one corrupts the
        # live database, whether or not the file exists right now.
        own = {os.path.abspath(path) + suffix for suffix in ("-wal", "-shm", "-journal")}
        if os.path.abspath(target) in own or (
            target.exists() and any(os.path.exists(p) and os.path.samefile(target, p) for p in own)
        ):
            raise FlowctlError(
                f"{target} is a file of the live database ({target.name}): give the backup"
                " another path"
            )
    wal = Path(f"{target}-wal")
    if target.exists() and wal.exists() and wal.stat().st_size > 0:
        raise FlowctlError(
            f"{target} has a write-ahead log ({wal}): it is in use or was not closed"
            " cleanly; stop what uses it, or give the backup another path"
        )


def vacuum(conn: sqlite3.Connection, path: str) -> tuple[int, int]:
    """VACUUM and truncate the WAL: (bytes before, bytes after)."""
    before = _size(conn)
    try:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError as e:
        raise DatabaseError(f"vacuum of {path} failed: {e}") from None
    return before, _size(conn)


def _size(conn: sqlite3.Connection) -> int:
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    return pages * int(conn.execute("PRAGMA page_size").fetchone()[0])


def _forget_daemons(path: Path) -> None:
    """The copy is served by no daemon: drop the registrations VACUUM INTO copied, else
    `status` on it names a daemon that serves the original, and `copy` from it is refused
    as live. Runs it held stay `running` under their leases, reclaimed once those lapse."""
    try:
        conn = sqlite3.connect(str(path))
        try:
            with conn:
                conn.execute("DELETE FROM daemons")
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise DatabaseError(f"the backup failed its check: {e}") from None


def _check_copy(path: Path) -> None:
    """The copy must be whole and flowctl's: PRAGMA integrity_check says ok, the marker is set."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise DatabaseError(f"the backup failed its check: {e}") from None
    if result != ["ok"]:
        raise DatabaseError(f"the backup failed PRAGMA integrity_check: {result[0]}")
    if app_id != APPLICATION_ID:
        raise DatabaseError("the backup lacks the flowctl marker; it was not written whole")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
