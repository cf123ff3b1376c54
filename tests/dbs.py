"""Independent reads of a test database, whichever store it is: sqlite3 for a file,
psycopg for a postgresql:// URL, no flowctl code. SQL is written with `?` placeholders
(SQLite's); JSON columns arrive as their text from both."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from flowctl.store.postgres.connect import is_postgres_url


def is_url(db: str | Path) -> bool:
    return is_postgres_url(str(db))


def rows(
    db: str | Path, sql: str, params: tuple[Any, ...] | list[Any] = ()
) -> list[tuple[Any, ...]]:
    if not is_url(db):
        conn = sqlite3.connect(str(db), timeout=30)
        try:
            return conn.execute(sql, tuple(params)).fetchall()
        finally:
            conn.close()
    import psycopg
    from psycopg.types.string import TextLoader

    with psycopg.connect(str(db), autocommit=True) as conn:
        conn.adapters.register_loader("json", TextLoader)
        conn.adapters.register_loader("jsonb", TextLoader)
        return conn.execute(sql.replace("?", "%s"), tuple(params)).fetchall()  # type: ignore[arg-type]


def has_schema(db: str | Path) -> bool:
    """Whether flowctl has created its tables there (a missing file: no)."""
    if not is_url(db):
        if not Path(db).exists():
            return False
        return bool(rows(db, "SELECT 1 FROM sqlite_master WHERE name = 'runs'"))
    return bool(rows(db, "SELECT to_regclass('runs') IS NOT NULL")[0][0])


def counts(
    db: str | Path, tables: tuple[str, ...] = ("runs", "journal", "timeline")
) -> tuple[int, ...]:
    """Rows per table; zeros before the schema exists."""
    if not has_schema(db):
        return tuple(0 for _ in tables)
    return tuple(rows(db, f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables)
