"""The SQLite store: the store's every transaction (flowctl.store.store) over one file."""

from __future__ import annotations

import os

from flowctl.store.sqlite.connection import SqliteDatabase
from flowctl.store.store import SqlStore
from flowctl.store.values import PLAIN, Values


class SqliteStore(SqlStore):
    """One SQLite file. Thread-safe: calls are serialised on one connection."""

    db: SqliteDatabase

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        create: bool = True,
        allow_read_only: bool = False,
        values: Values = PLAIN,
    ) -> None:
        """Open (with `create`, create) the database at `path` (see SqliteDatabase)."""
        super().__init__(
            SqliteDatabase(
                path, durability=durability, create=create, allow_read_only=allow_read_only
            ),
            values,
        )


__all__ = ["SqliteStore"]
