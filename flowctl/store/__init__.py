"""The store: every SQL statement flowctl runs, behind one interface.

Callers outside this package import from here only; the backend modules under
`flowctl.store.sqlite` are an implementation detail.
"""

from __future__ import annotations

from flowctl.store.records import (
    DaemonInfo,
    FireOutcome,
    FirePlan,
    HeartbeatReply,
    NewRun,
    NewSchedule,
    ScheduleEvent,
    ScheduleRow,
    dumps,
)
from flowctl.store.sqlite.connection import WAL_BOUND_BYTES, WAL_BOUND_PAGES
from flowctl.store.sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from flowctl.store.sqlite.store import SqliteStore as Store

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WAL_BOUND_BYTES",
    "WAL_BOUND_PAGES",
    "DaemonInfo",
    "FireOutcome",
    "FirePlan",
    "HeartbeatReply",
    "NewRun",
    "NewSchedule",
    "ScheduleEvent",
    "ScheduleRow",
    "Store",
    "dumps",
]
