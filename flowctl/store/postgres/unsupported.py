"""What the PostgreSQL store does not have yet: the metrics read,
step output, prune, vacuum and backup (built on SQLite after this store). Each says so in
one line (StoreUnavailableError) rather than pretending there is nothing to report; step
output alone is dropped silently (a step must not fail, nor warn at every step, for it)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import NoReturn

from flowctl.errors import StoreUnavailableError
from flowctl.model import RunStatus
from flowctl.store.records import MetricsSnapshot, OutputChunk, PrunedRun


def _missing(what: str) -> NoReturn:
    raise StoreUnavailableError(
        f"{what} is not available on the PostgreSQL store yet: use a SQLite database for it"
    )


class NotYetOnPostgres:
    """The Store operations the PostgreSQL store does not implement yet."""

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
