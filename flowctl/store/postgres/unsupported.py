"""What the PostgreSQL store does not have yet: the notification outbox, the metrics read,
step output, prune, vacuum and backup (built on SQLite after this store). Each says so in
one line (StoreUnavailableError) rather than pretending there is nothing to report; step
output alone is dropped silently (a step must not fail, nor warn at every step, for it)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

from flowctl.errors import StoreUnavailableError
from flowctl.model import RunStatus
from flowctl.store.records import MetricsSnapshot, Notification, OutputChunk, PrunedRun


def _missing(what: str) -> NoReturn:
    raise StoreUnavailableError(
        f"{what} is not available on the PostgreSQL store yet: use a SQLite database for it"
    )


class NotYetOnPostgres:
    """The Store operations the PostgreSQL store does not implement yet."""

    def due_notifications(self, now: datetime, limit: int = 64) -> list[Notification]:
        _missing("the notification outbox")

    def claim_notification(self, seq: int, now: datetime, until: datetime, owner: str) -> bool:
        _missing("the notification outbox")

    def notification_claims(self, now: datetime) -> list[tuple[int, str]]:
        _missing("the notification outbox")

    def release_notification(self, seq: int, owner: str, now: datetime) -> bool:
        _missing("the notification outbox")

    def settle_notification(
        self,
        seq: int,
        run_id: str,
        now: datetime,
        *,
        done: Sequence[str],
        error: str | None,
        retry_at: datetime | None,
        events: Sequence[tuple[str, dict[str, Any]]],
    ) -> None:
        _missing("the notification outbox")

    def drop_notifications(self, seqs: Sequence[int]) -> None:
        _missing("the notification outbox")

    def metrics_snapshot(
        self, lateness_bounds: Sequence[float], step_bounds: Sequence[float]
    ) -> MetricsSnapshot:
        _missing("the metrics read")

    def append_output(
        self,
        run_id: str,
        call_index: int,
        step: str,
        at: datetime,
        chunks: Sequence[tuple[str, str]],
    ) -> None:
        return None  # not stored on PostgreSQL yet: `flowctl logs` says none was recorded

    def output(
        self, run_id: str, *, after: int = 0, step: str | None = None, limit: int = 1000
    ) -> list[OutputChunk]:
        return []

    def output_tail(self, run_id: str, chunks: int = 20) -> list[OutputChunk]:
        return []

    def prunable_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        _missing("prune")

    def prune_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        _missing("prune")

    def vacuum(self) -> tuple[int, int]:
        _missing("vacuum (the server's autovacuum does this)")

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        _missing("backup (use pg_dump)")
