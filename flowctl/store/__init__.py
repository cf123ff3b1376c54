"""The store: every SQL statement flowctl runs, behind one interface.

`Store` (flowctl.store.protocol) is that interface: the operations the engine, daemon,
scheduler, ops, client, TUI and CLI call, each with the promise it keeps. Each operation's
transaction is written once, over a small dialect (flowctl.store.dialect, sql, core and
one module per job); a backend (flowctl.store.sqlite, flowctl.store.postgres) holds only
its connections, schema and file- or server-level operations. `open_store` picks the
backend for a path or URL; nothing outside this package imports a backend module.

Shared rules every backend keeps:
- Each write is one transaction: all of it is durable when the call returns, or none of it.
- A worker's writes carry the `Lease` its claim minted and change nothing once the run's
  fence has moved on (another claim since) or the run stopped running; that outcome is a
  return value (False / None / `HeartbeatReply.lost`), not an exception, because a lost
  lease is expected. The check and the write are atomic: no claim can slip between them.
- Instants are aware UTC datetimes at microsecond precision; JSON values round-trip as JSON
  (`dumps` refuses what is not JSON, never pickles).
- Every transition that ends a run (completed, dead, cancelled) also writes its outbox row
  (`due_notifications`) in the same transaction, so no ending is lost to a crash before
  its notification is delivered.
- Which statuses an operator action accepts, claim verdicts, backoff and the deadline clamp
  are decided in `flowctl.transitions` (pure); a store applies those decisions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from flowctl.store.protocol import RunListing, Store

if TYPE_CHECKING:
    # each is loaded on first use (__getattr__): `flowctl ls` needs none of them
    from flowctl.store.records import (
        Claim,
        DaemonInfo,
        FireOutcome,
        FirePlan,
        HeartbeatReply,
        Lease,
        LimitState,
        LimitTake,
        MetricsSnapshot,
        NewRun,
        NewSchedule,
        Notification,
        OutputChunk,
        PrunedRun,
        ScheduleEvent,
        ScheduleRow,
        dumps,
    )

    # The SQLite backend's schema facts, for tests and the v1 fixture (tests/fixtures/make_v1_db.py).
    from flowctl.store.sqlite.opening import WAL_BOUND_BYTES, WAL_BOUND_PAGES
    from flowctl.store.sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
    from flowctl.store.values import Sealer

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(
    url_or_path: str | os.PathLike[str],
    *,
    durability: str = "full",
    create: bool = True,
    allow_read_only: bool = False,
    keys: Sealer | None = None,
    masked: bool = False,
) -> Store:
    """Open the database at a SQLite path, or at a `postgresql://` / `postgres://` URL (the
    PostgreSQL store: it needs the [postgres] extra, else one line saying so). `create` a
    missing file (or schema); `allow_read_only` opens one this process cannot write for
    reading only (SQLite). With `keys` (flowctl.crypto), values are sealed as written and
    opened as read; a sealed value no key opens is refused, or with `masked` shown as its
    key id (flowctl.store.values). The one place a backend is chosen."""
    from flowctl.store.values import Values

    values = Values(keys, masked=masked)
    target = os.fspath(url_or_path)
    if target.strip().lower().startswith(POSTGRES_SCHEMES):
        from flowctl.store.postgres.connect import driver

        driver()  # without psycopg: one line naming the extra to install
        from flowctl.store.postgres.store import PostgresStore

        store: Store = PostgresStore(target, durability=durability, create=create, values=values)
    else:
        from flowctl.store.sqlite.store import SqliteStore

        store = SqliteStore(
            target,
            durability=durability,
            create=create,
            allow_read_only=allow_read_only,
            values=values,
        )
    if not masked:
        try:
            store.check_keys()
        except BaseException:
            store.close()
            raise
    return store


def open_run_list(
    url_or_path: str | os.PathLike[str],
    *,
    durability: str = "full",
    keys: Sealer | None = None,
) -> RunListing:
    """Open an existing database to read its run list, as `open_store(create=False,
    allow_read_only=True)` opens it (same checks, same read-only fallback, same upgrade):
    for SQLite, the run-list reads alone (flowctl/store/listing.py), so `flowctl ls`
    compiles and loads none of the writes, leases or schedules; any other backend, its
    whole store. A value no key opens is shown as its key id (masked), not refused."""
    target = os.fspath(url_or_path)
    if target.strip().lower().startswith(POSTGRES_SCHEMES):
        return open_store(
            target,
            durability=durability,
            create=False,
            allow_read_only=True,
            keys=keys,
            masked=True,
        )
    from flowctl.store.listing import RunList
    from flowctl.store.sqlite.connection import SqliteDatabase
    from flowctl.store.values import Values

    return RunList(
        SqliteDatabase(target, durability=durability, create=False, allow_read_only=True),
        Values(keys, masked=True),
    )


__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WAL_BOUND_BYTES",
    "WAL_BOUND_PAGES",
    "Claim",
    "DaemonInfo",
    "FireOutcome",
    "FirePlan",
    "HeartbeatReply",
    "Lease",
    "LimitState",
    "LimitTake",
    "MetricsSnapshot",
    "NewRun",
    "NewSchedule",
    "Notification",
    "OutputChunk",
    "PrunedRun",
    "RunListing",
    "ScheduleEvent",
    "ScheduleRow",
    "Store",
    "dumps",
    "open_run_list",
    "open_store",
]

# name -> the module that defines it, imported when the name is first used
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "Claim",
            "DaemonInfo",
            "FireOutcome",
            "FirePlan",
            "HeartbeatReply",
            "Lease",
            "LimitState",
            "LimitTake",
            "MetricsSnapshot",
            "NewRun",
            "NewSchedule",
            "Notification",
            "OutputChunk",
            "PrunedRun",
            "ScheduleEvent",
            "ScheduleRow",
            "dumps",
        ),
        "flowctl.store.records",
    ),
    "WAL_BOUND_BYTES": "flowctl.store.sqlite.opening",
    "WAL_BOUND_PAGES": "flowctl.store.sqlite.opening",
    "APPLICATION_ID": "flowctl.store.sqlite.schema",
    "MIGRATIONS": "flowctl.store.sqlite.schema",
    "SCHEMA_VERSION": "flowctl.store.sqlite.schema",
}


def __getattr__(name: str) -> object:
    """A re-exported name, imported on first use: the records' dataclasses and the SQLite
    backend cost `flowctl ls` nothing (tests/test_startup_imports.py)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'flowctl.store' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value
