"""The store: every job's transactions over one backend (see flowctl.store.core)."""

from __future__ import annotations

from flowctl.store.branches import BranchReads
from flowctl.store.claims import Claims
from flowctl.store.fenced import FencedWrites
from flowctl.store.leases import Leases
from flowctl.store.limits import Limits
from flowctl.store.metrics import MetricsReads
from flowctl.store.operator import OperatorWrites
from flowctl.store.outbox import Notifications
from flowctl.store.output import Output
from flowctl.store.pruning import Pruning
from flowctl.store.reads import RunReads
from flowctl.store.rekey import Rekeying
from flowctl.store.resting import Resting
from flowctl.store.schedules import Schedules


class SqlStore(
    RunReads,
    Claims,
    Leases,
    FencedWrites,
    Resting,
    OperatorWrites,
    Schedules,
    Notifications,
    MetricsReads,
    Pruning,
    Output,
    BranchReads,
    Rekeying,
    Limits,
):
    """One database, every Store operation: each job's class (one module each) over the
    backend's `Database`. Thread-safe: the backend serialises or pools its connections."""


__all__ = ["SqlStore"]
