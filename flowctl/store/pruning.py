"""Retention: finished runs listed and deleted with everything they recorded.

Only terminal runs are ever deleted: the candidates are read (where rows are locked,
FOR UPDATE SKIP LOCKED, so a run an operator is redriving at that moment is skipped, not
waited for) and the DELETE re-checks the status, so a run redriven between a listing and
the delete is never lost."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flowctl.errors import FlowctlError
from flowctl.model import RunStatus, from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.records import PrunedRun
from flowctl.store.rows import marks
from flowctl.store.sql import Tx

_FINISHED = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.DEAD)
_PRUNABLE = (
    "SELECT run_id, workflow, status, finished_at FROM runs WHERE status IN ({marks})"
    " AND finished_at < ? ORDER BY finished_at, run_id LIMIT ?"
)
# Tables whose rows go with their run by an explicit DELETE: on PostgreSQL they have no
# foreign key to cascade (schema version 12); on SQLite the cascade then finds none. The
# outbox first: a notifier settling a row of the run holds it, so the timeline is deleted
# after the note of that delivery is committed, never before (outbox.settle notes nothing
# on a row that is gone).
_APPENDED = ("notifications", "journal", "timeline")


def _finished_only(statuses: Sequence[RunStatus]) -> list[str]:
    wanted = [str(s) for s in statuses]
    if not wanted or any(s not in _FINISHED for s in statuses):
        raise FlowctlError(
            f"prune takes finished statuses only (completed, cancelled, dead), got {wanted}"
        )
    return wanted


class Pruning(StoreCore):
    """prunable_runs / prune_runs."""

    def prunable_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        wanted = _finished_only(statuses)
        sql = _PRUNABLE.replace("{marks}", marks(len(wanted)))
        rows = self._read(sql, [*wanted, to_us(before), limit])
        return [PrunedRun(r[0], r[1], RunStatus(r[2]), from_us(r[3])) for r in rows]

    def prune_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        """The journal, timeline and outbox rows go with each run (deleted here), and its
        signals, versions, published values, output and limit holds (ON DELETE CASCADE)."""
        wanted = _finished_only(statuses)

        def prune(tx: Tx) -> list[PrunedRun]:
            sql = _PRUNABLE.replace("{marks}", marks(len(wanted))) + "{skip_locked}"
            rows = tx.all(sql, [*wanted, to_us(before), limit])
            ids = [r[0] for r in rows]
            if ids:  # the status test is repeated here
                finished = f"run_id IN ({marks(len(ids))}) AND status IN ({marks(len(wanted))})"
                for table in _APPENDED:
                    tx.execute(
                        f"DELETE FROM {table} WHERE run_id IN"
                        f" (SELECT run_id FROM runs WHERE {finished})",
                        [*ids, *wanted],
                    )
                tx.execute(f"DELETE FROM runs WHERE {finished}", [*ids, *wanted])
            return [PrunedRun(r[0], r[1], RunStatus(r[2]), from_us(r[3])) for r in rows]

        return self._write(prune)
