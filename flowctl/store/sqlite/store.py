"""The SQLite store: one class composed of one mixin per job.

Each mixin (runs, leases, fenced writes, operator, schedules) subclasses SqliteConnection, which owns the
connection, its lock and group commit, so every job's methods reach `_write`/`_read` and
mypy checks them as one class against the Store protocol. Mixins over composition: the
protocol is one flat set of operations, and composition would need a forwarding method for
each of them.
"""

from __future__ import annotations

from flowctl.store.sqlite.fenced import FencedWrites
from flowctl.store.sqlite.leases import Leases
from flowctl.store.sqlite.maintenance import Maintenance
from flowctl.store.sqlite.metrics import MetricsReads
from flowctl.store.sqlite.notifications import Notifications
from flowctl.store.sqlite.operator import OperatorWrites
from flowctl.store.sqlite.output import Output
from flowctl.store.sqlite.runs import RunReads
from flowctl.store.sqlite.schedules import Schedules


class SqliteStore(
    RunReads,
    Leases,
    FencedWrites,
    OperatorWrites,
    Schedules,
    Notifications,
    MetricsReads,
    Maintenance,
    Output,
):
    """One SQLite file. Thread-safe: calls are serialised on one connection."""


__all__ = ["SqliteStore"]
