"""The SQLite backend of the store: one file, WAL, group commit (see `SqliteStore`).

Only flowctl.store (open_store) and the SQLite-specific tests import this package.
"""

from flowctl.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
