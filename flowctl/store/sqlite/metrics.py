"""The one read behind /metrics and `flowctl status --prometheus`: counts and histograms
aggregated in SQL, in one read transaction, so a scrape costs a few index scans and never
loads rows into Python."""

from __future__ import annotations

from collections.abc import Sequence

from flowctl.model import from_us
from flowctl.store.records import DaemonInfo, Histogram, MetricsSnapshot
from flowctl.store.sqlite.connection import SqliteConnection
from flowctl.store.sqlite.rows import _RUNS_BY_STATUS, _loads


def _bucket_sql(expr: str, bounds: Sequence[float]) -> str:
    """SUM(expr <= b) for each bound, then COUNT and SUM: one pass over the rows."""
    parts = [f"SUM(CASE WHEN {expr} <= {float(b)!r} THEN 1 ELSE 0 END)" for b in bounds]
    return ", ".join([*parts, "COUNT(*)", f"TOTAL({expr})"])


def _histogram(row: Sequence[object], bounds: Sequence[float]) -> Histogram:
    n = len(bounds)
    return Histogram(
        bounds=tuple(bounds),
        cumulative=tuple(int(row[i] or 0) for i in range(n)),  # type: ignore[call-overload]
        count=int(row[n] or 0),  # type: ignore[call-overload]
        total=float(row[n + 1] or 0.0),  # type: ignore[arg-type]
    )


class MetricsReads(SqliteConnection):
    def metrics_snapshot(
        self, lateness_bounds: Sequence[float], step_bounds: Sequence[float]
    ) -> MetricsSnapshot:
        """Runs by status and workflow, wake lateness and step duration histograms (bounds
        in seconds), claims and reclaims so far, daemons with the leases each holds, and
        outbox rows by state; read in one transaction."""
        late = "(json_extract(data, '$.late_ms') / 1000.0)"
        step = "(j.duration_us / 1e6)"
        with self._reading() as c:
            c.execute("BEGIN")
            try:
                runs = c.execute(  # kept by triggers (migration 11): no scan of runs
                    "SELECT status, workflow, n FROM run_counts WHERE n > 0"
                    " ORDER BY status, workflow"
                ).fetchall()
                lateness = c.execute(
                    f"SELECT {_bucket_sql(late, lateness_bounds)} FROM timeline"
                    " WHERE type = 'woke' AND json_extract(data, '$.late_ms') IS NOT NULL"
                ).fetchone()
                steps = c.execute(
                    f"SELECT r.workflow, {_bucket_sql(step, step_bounds)} FROM journal j"
                    " JOIN runs r USING (run_id) WHERE j.kind = 'step'"
                    " AND j.duration_us IS NOT NULL GROUP BY r.workflow ORDER BY r.workflow"
                ).fetchall()
                # Kept by triggers (migration 18): no read of the timeline.
                claimed = dict(c.execute("SELECT type, n FROM event_counts").fetchall())
                daemons = c.execute(
                    "SELECT d.owner, d.host, d.pid, d.proc_start, d.started_at, d.seen_at, d.info,"
                    f" (SELECT COUNT(*) FROM {_RUNS_BY_STATUS} WHERE status = 'running'"
                    " AND lease_owner = d.owner) FROM daemons d ORDER BY d.started_at"
                ).fetchall()
                outbox = c.execute(
                    "SELECT state, COUNT(*) FROM notifications GROUP BY state ORDER BY state"
                ).fetchall()
            finally:
                c.execute("COMMIT")
        return MetricsSnapshot(
            runs=tuple((str(s), str(w), int(n)) for s, w, n in runs),
            wake_lateness=_histogram(lateness, lateness_bounds),
            step_durations=tuple((str(r[0]), _histogram(r[1:], step_bounds)) for r in steps),
            claims=int(claimed.get("claimed", 0)),
            reclaims=int(claimed.get("reclaimed", 0)),
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
