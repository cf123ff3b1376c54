"""The SQLite backend of the store: one file, WAL, group commit (see `SqliteStore`).

Only flowctl.store (open_store, open_run_list) and the SQLite-specific tests import this
package. `SqliteStore` is loaded on first use, so importing one module of the package
(`flowctl ls` opens listing.py's RunList alone) does not load every job's module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowctl.store.sqlite.store import SqliteStore


def __getattr__(name: str) -> object:
    if name != "SqliteStore":
        raise AttributeError(f"module 'flowctl.store.sqlite' has no attribute {name!r}")
    from flowctl.store.sqlite.store import SqliteStore

    globals()[name] = SqliteStore
    return SqliteStore


__all__ = ["SqliteStore"]
