"""What the PostgreSQL store does not have yet: the notification outbox and the metrics
read (issue 16 and the metrics endpoint were built on SQLite after this store). Each says
so in one line (StoreUnavailableError) rather than pretending there is nothing to report."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

from flowctl.errors import StoreUnavailableError
from flowctl.store.records import MetricsSnapshot, Notification


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
