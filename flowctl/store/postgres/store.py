"""The PostgreSQL store: the same transitions as the SQLite store, promise for promise.

Each write method is one transaction on a pooled connection. Rows a transition reads to
decide a write are locked (`FOR UPDATE`), so concurrent writers on many hosts serialise
per run exactly as SQLite's single writer does; claims lock their candidates with
`FOR UPDATE SKIP LOCKED`, so daemons never wait on each other's claims and never claim
the same run. Worker writes carry the fence given at claim time and change nothing when
it has moved on (a False/None return, not an exception).

Change detection: every commit that writes runs, signals or schedules NOTIFYs one channel
(a trigger, so any client's writes count); `data_version()` counts those from other
processes (LISTEN on a connection of its own), and writes by this process's stores at
once (except this store's own_writes(), as in SQLite), so the daemon's
existing 50 ms change check works across hosts; `refresh_interval` asks the daemon for a
bounded safety re-read (every BACKSTOP_S) besides.

The policy (claim verdicts, next attempts, pause and resume) comes from
flowctl.transitions, as for SQLite: the store applies it and returns what it applied.
"""

from __future__ import annotations

from flowctl.store.postgres.leases import Leases
from flowctl.store.postgres.maintenance import Maintenance
from flowctl.store.postgres.metrics import MetricsReads
from flowctl.store.postgres.notifications import Notifications
from flowctl.store.postgres.operator import OperatorWrites
from flowctl.store.postgres.output import Output
from flowctl.store.postgres.runs import RunReads
from flowctl.store.postgres.schedules import Schedules


class PostgresStore(
    RunReads, Leases, OperatorWrites, Schedules, Notifications, MetricsReads, Maintenance, Output
):
    """One PostgreSQL database, every Store operation: one mixin per job (see the modules),
    over one connection layer. Thread-safe: each call takes a pooled connection."""
