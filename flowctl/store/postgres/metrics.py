"""The one read behind /metrics and `flowctl status --prometheus` on PostgreSQL: counts
and histograms aggregated by the server, in one REPEATABLE READ transaction (one snapshot,
as SQLite's read transaction), so a scrape never loads rows into Python."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowctl.model import from_us
from flowctl.store.postgres.connection import PostgresConnection, retried
from flowctl.store.postgres.rows import _COUNTS, _loads
from flowctl.store.records import DaemonInfo, Histogram, MetricsSnapshot


def _bucket_sql(expr: str, bounds: Sequence[float]) -> tuple[str, list[float]]:
    """SUM(expr <= b) for each bound, then COUNT and SUM: one pass over the rows. `expr`
    is a constant of this module; the bounds are parameters."""
    parts = [f"SUM(CASE WHEN {expr} <= %s THEN 1 ELSE 0 END)" for _ in bounds]
    return ", ".join([*parts, "COUNT(*)", f"COALESCE(SUM({expr}), 0)"]), [float(b) for b in bounds]


def _histogram(row: Sequence[Any], bounds: Sequence[float]) -> Histogram:
    n = len(bounds)
    return Histogram(
        bounds=tuple(bounds),
        cumulative=tuple(int(row[i] or 0) for i in range(n)),
        count=int(row[n] or 0),
        total=float(row[n + 1] or 0.0),
    )


class MetricsReads(PostgresConnection):
    @retried  # one REPEATABLE READ snapshot: a serialization failure is retried whole
    def metrics_snapshot(
        self, lateness_bounds: Sequence[float], step_bounds: Sequence[float]
    ) -> MetricsSnapshot:
        """Runs by status and workflow, wake lateness and step duration histograms (bounds
        in seconds), claims and reclaims so far, daemons with the leases each holds, and
        outbox rows by state; read from one snapshot."""
        late_sql, late_args = _bucket_sql("((data->>'late_ms')::float8 / 1000.0)", lateness_bounds)
        step_sql, step_args = _bucket_sql("(j.duration_us / 1e6)", step_bounds)
        with self._snapshot() as c:
            runs = c.execute(  # kept by triggers (schema v4): no scan of runs
                f"SELECT status, workflow, SUM(n) FROM {_COUNTS} GROUP BY status, workflow"
                " HAVING SUM(n) > 0 ORDER BY status, workflow"
            ).fetchall()
            lateness = c.execute(
                f"SELECT {late_sql} FROM timeline WHERE type = 'woke' AND data ? 'late_ms'",
                late_args,
            ).fetchone()
            steps = c.execute(
                f"SELECT r.workflow, {step_sql} FROM journal j JOIN runs r USING (run_id)"
                " WHERE j.kind = 'step' AND j.duration_us IS NOT NULL"
                " GROUP BY r.workflow ORDER BY r.workflow",
                step_args,
            ).fetchall()
            events = c.execute(
                "SELECT COUNT(*) FILTER (WHERE type = 'claimed'),"
                " COUNT(*) FILTER (WHERE type = 'reclaimed') FROM timeline"
                " WHERE type IN ('claimed', 'reclaimed')"
            ).fetchone()
            daemons = c.execute(
                "SELECT d.owner, d.host, d.pid, d.proc_start, d.started_at, d.seen_at, d.info,"
                " (SELECT COUNT(*) FROM runs WHERE status = 'running'"
                " AND lease_owner = d.owner) FROM daemons d ORDER BY d.started_at"
            ).fetchall()
            outbox = c.execute(
                "SELECT state, COUNT(*) FROM notifications GROUP BY state ORDER BY state"
            ).fetchall()
        return MetricsSnapshot(
            runs=tuple((str(s), str(w), int(n)) for s, w, n in runs),
            wake_lateness=_histogram(lateness, lateness_bounds),
            step_durations=tuple((str(r[0]), _histogram(r[1:], step_bounds)) for r in steps),
            claims=int(events[0]),
            reclaims=int(events[1]),
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
