"""`flowctl replicate` and `flowctl restore`: a continuous Litestream replica of the SQLite
database, and a database written back from it (flowctl.replica)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from flowctl.errors import UsageError
from flowctl.replica import litestream
from flowctl.replica.destination import replica_url
from flowctl.store import open_store


@dataclass(frozen=True)
class Restored:
    path: str
    seconds: float  # Litestream's restore, then the integrity check
    integrity: str
    runs: int


def _sqlite_only(db: Path | str, what: str) -> Path:
    if isinstance(db, str):  # resolve_db gives a URL as str
        raise UsageError(
            f"{what} keeps a replica of a SQLite file; a PostgreSQL database has its own"
            " replication (streaming replicas, pg_basebackup)",
            field="db",
        )
    return db


def replicate(db: Path | str, dest: str, *, sync_interval: float = 1.0) -> int:
    """Replicate the database to DEST until stopped; Litestream's exit code. The database
    is opened first (created with its schema in WAL mode if it is missing)."""
    path = _sqlite_only(db, "replicate")
    if sync_interval <= 0:
        raise UsageError("--sync-interval must be positive, e.g. 1s", field="sync_interval")
    url = replica_url(dest)
    open_store(path, masked=True).close()  # the schema and WAL mode, before Litestream
    return litestream.replicate(str(Path(path).resolve()), url, sync_interval)


def restore(dest: str, path: str) -> Restored:
    """Write a database from the replica at DEST to PATH (a new file), checked whole."""
    url = replica_url(dest)
    target = Path(path).expanduser()
    for taken in (target, Path(f"{target}-wal")):
        if taken.exists():
            raise UsageError(
                f"PATH {taken} exists: restore writes a new database; give a new path",
                field="path",
            )
    if not target.parent.is_dir():
        raise UsageError(f"PATH {target}: folder {target.parent} does not exist", field="path")
    seconds = litestream.restore(url, str(target))
    store = open_store(target, create=False, masked=True)
    try:
        integrity = store.integrity_check()
        runs = sum(store.count_by_status().values())
    finally:
        store.close()
    os.chmod(target, 0o600)
    return Restored(str(target), seconds, integrity, runs)
