"""How the SQLite schema's migrations (flowctl.store.sqlite.schema) are applied: all that a
database lacks, in one BEGIN IMMEDIATE transaction, foreign keys checked before it commits."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

from flowctl.errors import DatabaseError
from flowctl.store.sqlite import schema  # its names read at each call: tests stand in others


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to SCHEMA_VERSION in one BEGIN IMMEDIATE transaction (nothing to do
    when it is there). The caller retries it while another connection holds the lock."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == schema.SCHEMA_VERSION and _has_marker(conn):
        return  # the common case: no sqlite-utils import on a command's start-up path
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    # Off for the migrations (a table rebuilt by copy, as migration 19's runs, must not
    # cascade when its old copy is dropped), checked before the commit; it can change only
    # outside a transaction.
    enforced = int(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        _migrate_in_transaction(conn, db)
    finally:
        conn.execute(f"PRAGMA foreign_keys = {enforced}")


def _migrate_in_transaction(conn: sqlite3.Connection, db: sqlite_utils.Database) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if current > schema.SCHEMA_VERSION or current < 0:  # changed since _inspect looked
            raise DatabaseError(
                f"database schema version {current} is not one this flowctl understands"
                f" (1 to {schema.SCHEMA_VERSION})"
            )
        for i in range(current, schema.SCHEMA_VERSION):
            schema.MIGRATIONS[i](db)
        broken = conn.execute("PRAGMA foreign_key_check").fetchone()
        if broken is not None:
            raise DatabaseError(
                f"migrating to schema {schema.SCHEMA_VERSION} would leave a {broken[0]} row whose"
                f" {broken[2]} is missing; nothing was changed"
            )
        conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
        conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _has_marker(conn: sqlite3.Connection) -> bool:
    return int(conn.execute("PRAGMA application_id").fetchone()[0]) == schema.APPLICATION_ID
