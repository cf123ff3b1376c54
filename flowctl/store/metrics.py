"""The one read behind /metrics and `flowctl status --prometheus`: counts and histograms
aggregated in SQL, in one snapshot, so a scrape costs a few index scans and never loads
rows into Python."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowctl.model import from_us
from flowctl.store.core import StoreCore
from flowctl.store.mapping import _loads
from flowctl.store.records import DaemonInfo, Histogram, MetricsSnapshot


def _bucket_sql(expr: str, bounds: Sequence[float]) -> str:
    """SUM(expr <= b) for each bound, then COUNT and SUM: one pass over the rows. `expr`
    is a constant of this module's; the bounds are floats, written as literals."""
    parts = [f"SUM(CASE WHEN {expr} <= {float(b)!r} THEN 1 ELSE 0 END)" for b in bounds]
    return ", ".join([*parts, "COUNT(*)", f"COALESCE(SUM({expr}), 0.0)"])


def _histogram(row: Sequence[Any], bounds: Sequence[float]) -> Histogram:
    n = len(bounds)
    return Histogram(
        bounds=tuple(bounds),
        cumulative=tuple(int(row[i] or 0) for i in range(n)),
        count=int(row[n] or 0),
        total=float(row[n + 1] or 0.0),
    )


class MetricsReads(StoreCore):
    def metrics_snapshot(
        self, lateness_bounds: Sequence[float], step_bounds: Sequence[float]
    ) -> MetricsSnapshot:
        """Runs by status and workflow, wake lateness and step duration histograms (bounds
        in seconds), claims and reclaims so far, daemons with the leases each holds, and
        outbox rows by state; read from one snapshot."""
        with self.db.snapshot() as tx:
            runs = tx.all(  # the run counts: no scan of runs
                "SELECT status, workflow, n FROM {counts} WHERE n > 0 ORDER BY status, workflow"
            )
            lateness = tx.one(
                f"SELECT {_bucket_sql('{late_s}', lateness_bounds)} FROM timeline"
                " WHERE type = 'woke' AND {late_s} IS NOT NULL"
            )
            steps = tx.all(
                f"SELECT r.workflow, {_bucket_sql('(j.duration_us / 1e6)', step_bounds)}"
                " FROM journal j JOIN runs r USING (run_id) WHERE j.kind = 'step'"
                " AND j.duration_us IS NOT NULL GROUP BY r.workflow ORDER BY r.workflow"
            )
            claimed = {str(t): int(n) for t, n in tx.all("{event_counts}")}
            daemons = tx.all(
                "SELECT d.owner, d.host, d.pid, d.proc_start, d.started_at, d.seen_at, d.info,"
                " (SELECT COUNT(*) FROM {runs_by_status} WHERE status = 'running'"
                " AND lease_owner = d.owner) FROM daemons d ORDER BY d.started_at"
            )
            outbox = tx.all(
                "SELECT state, COUNT(*) FROM notifications GROUP BY state ORDER BY state"
            )
        return MetricsSnapshot(
            runs=tuple((str(s), str(w), int(n)) for s, w, n in runs),
            wake_lateness=_histogram(lateness or (), lateness_bounds),
            step_durations=tuple((str(r[0]), _histogram(r[1:], step_bounds)) for r in steps),
            claims=claimed.get("claimed", 0),
            reclaims=claimed.get("reclaimed", 0),
            daemons=tuple(
                (
                    DaemonInfo(
                        r[0], r[1], r[2], r[3], from_us(r[4]), from_us(r[5]), _loads(r[6]) or {}
                    ),
                    int(r[7]),
                )
                for r in daemons
            ),
            notifications=tuple((str(s), int(n)) for s, n in outbox),
        )
