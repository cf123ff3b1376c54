"""Care of a long-lived file: a consistent backup, retention (prune) and giving space back.

None of these change a run that is not finished: prune deletes only terminal runs, and
re-checks that in the DELETE itself, so a run redriven between a listing and the delete
is never lost.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from flowctl.errors import DatabaseError, FlowctlError
from flowctl.model import RunStatus, from_us, to_us
from flowctl.store.records import PrunedRun
from flowctl.store.sqlite.connection import SqliteConnection
from flowctl.store.sqlite.schema import APPLICATION_ID

_FINISHED = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.DEAD)


def _finished_only(statuses: Sequence[RunStatus]) -> list[str]:
    wanted = [str(s) for s in statuses]
    if not wanted or any(s not in _FINISHED for s in statuses):
        raise FlowctlError(
            f"prune takes finished statuses only (completed, cancelled, dead), got {wanted}"
        )
    return wanted


class Maintenance(SqliteConnection):
    """backup_to, prunable_runs / prune_runs, vacuum."""

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write a consistent copy of the database to `dest` with VACUUM INTO (one read
        transaction: a snapshot that writers in other processes do not wait for), check it
        with PRAGMA integrity_check, and only then move it to `dest` (a rename in the same
        folder): on any failure `dest` is untouched and no partial file is left."""
        target = Path(dest)
        if target.exists() and not overwrite:
            raise FlowctlError(f"{target} already exists; give --force to overwrite it")
        if target.exists() and self.path != ":memory:" and os.path.samefile(target, self.path):
            raise FlowctlError(f"{target} is the database itself: give the backup another path")
        if target.exists() and not target.is_file():
            # A rename onto it would replace the node itself: `backup /dev/null --force` as
            # root turned /dev/null into a regular file (the CLI fuzz found it).
            raise FlowctlError(
                f"{target} is not a regular file (a folder, a device or a pipe): give a file's"
                " path for the backup"
            )
        if self.path != ":memory:":
            # Its write-ahead log, shared memory or journal: overwriting one corrupts the
            # live database, whether or not the file exists right now.
            own = {os.path.abspath(self.path) + suffix for suffix in ("-wal", "-shm", "-journal")}
            if os.path.abspath(target) in own or (
                target.exists()
                and any(os.path.exists(p) and os.path.samefile(target, p) for p in own)
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
        tmp = target.with_name(f".{target.name}.flowctl-backup-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except OSError as e:
            raise DatabaseError(
                f"cannot write the backup in {target.parent}: {e.strerror}"
            ) from None
        try:
            with self._reading() as conn:
                conn.execute("VACUUM INTO ?", [str(tmp)])
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

    def prunable_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        wanted = _finished_only(statuses)
        rows = self._read(
            f"SELECT run_id, workflow, status, finished_at FROM runs"
            f" WHERE status IN ({','.join('?' * len(wanted))}) AND finished_at < ?"
            " ORDER BY finished_at, run_id LIMIT ?",
            [*wanted, to_us(before), limit],
        )
        return [PrunedRun(r[0], r[1], RunStatus(r[2]), from_us(r[3])) for r in rows]

    def prune_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        wanted = _finished_only(statuses)
        marks = ",".join("?" * len(wanted))
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT run_id, workflow, status, finished_at FROM runs"
                f" WHERE status IN ({marks}) AND finished_at < ?"
                " ORDER BY finished_at, run_id LIMIT ?",
                [*wanted, to_us(before), limit],
            ).fetchall()
            ids = [r[0] for r in rows]
            if ids:
                # The journal, timeline, signals, versions, published values and logs go
                # with the run (ON DELETE CASCADE). The status test is repeated here.
                conn.execute(
                    f"DELETE FROM runs WHERE run_id IN ({','.join('?' * len(ids))})"
                    f" AND status IN ({marks})",
                    [*ids, *wanted],
                )
        return [PrunedRun(r[0], r[1], RunStatus(r[2]), from_us(r[3])) for r in rows]

    def vacuum(self) -> tuple[int, int]:
        with self._reading() as conn:
            before = _size(conn)
            try:
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.OperationalError as e:
                raise DatabaseError(f"vacuum of {self.path} failed: {e}") from None
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
