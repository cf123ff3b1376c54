"""Retention: which finished runs may go, and deleting them in bounded batches.

Shared by `flowctl prune` and the daemon's hourly pass over `[retention]` in flowctl.toml.
Only finished runs are ever deleted (the store re-checks the status in its DELETE), and
each batch is one short transaction, so a daemon serving the same file waits at most one
batch for its next write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from flowctl.clock import Clock
from flowctl.config import PRUNABLE
from flowctl.errors import UsageError
from flowctl.model import RunStatus

if TYPE_CHECKING:
    from flowctl.store import PrunedRun, Store

log = logging.getLogger(__name__)

BATCH = 500  # runs deleted per transaction
DEFAULT_STATUSES = (RunStatus.COMPLETED, RunStatus.CANCELLED)  # dead runs are the operator's


def prune_statuses(names: Sequence[str] | None) -> tuple[RunStatus, ...]:
    """--status values for prune: finished statuses only; none given: completed, cancelled."""
    if not names:
        return DEFAULT_STATUSES
    out: list[RunStatus] = []
    for name in names:
        try:
            status = RunStatus(name)
        except ValueError:
            status = None
        if status not in PRUNABLE:
            raise UsageError(
                f"--status {name!r}: prune takes completed, cancelled or dead (runs that are"
                " not finished are never pruned)"
            )
        assert status is not None
        if status not in out:
            out.append(status)
    return tuple(out)


def prune(
    store: Store,
    statuses: Sequence[RunStatus],
    before: datetime,
    *,
    dry_run: bool = False,
    batch: int = BATCH,
    max_batches: int | None = None,
) -> list[PrunedRun]:
    """Delete (with `dry_run`, list) the runs of `statuses` that finished before `before`,
    `batch` at a time, until none is left or `max_batches` were done."""
    if dry_run:
        return store.prunable_runs(statuses, before, limit=2**62)
    gone: list[PrunedRun] = []
    done = 0
    while max_batches is None or done < max_batches:
        got = store.prune_runs(statuses, before, limit=batch)
        gone.extend(got)
        done += 1
        if len(got) < batch:
            break
    return gone


def apply_retention(
    store: Store,
    retention: Mapping[RunStatus, timedelta],
    now: datetime,
    *,
    batch: int = BATCH,
) -> tuple[int, bool]:
    """One bounded batch per status of the daemon's retention pass: (runs deleted, more
    left). The daemon calls it again on its next passes while more is left."""
    deleted = 0
    more = False
    for status, age in retention.items():
        got = store.prune_runs([status], now - age, limit=batch)
        deleted += len(got)
        more = more or len(got) >= batch
    return deleted, more


RETENTION_EVERY = 3600.0  # seconds between the daemon's passes over [retention]


class RetentionPass:
    """The daemon's [retention]: on its first pass and then once an hour (monotonic time),
    one bounded batch per status per daemon pass until nothing past its age is left, so
    claims and wakes wait at most one short transaction."""

    def __init__(self, retention: Mapping[RunStatus, timedelta]) -> None:
        self.retention = dict(retention)
        self._last = float("-inf")
        self._left = False  # the last batch was full: go on at the next pass

    def run(self, store: Store, clock: Clock) -> int:
        """Delete what is due now; returns how many runs went."""
        if not self.retention:
            return 0
        mono = clock.monotonic()
        if not self._left:
            if mono - self._last < RETENTION_EVERY:
                return 0
            self._last = mono
        deleted, self._left = apply_retention(store, self.retention, clock.now())
        if deleted:
            log.info("retention: deleted %d finished run(s)", deleted)
        return deleted
