"""Care of a long-lived PostgreSQL database: retention (prune), VACUUM (ANALYZE), and what
`flowctl backup` says on a server database.

Prune deletes only finished runs: the candidates are locked (FOR UPDATE SKIP LOCKED, so a
run an operator is redriving at that moment is skipped, not waited for) and the DELETE
re-checks the status, returning exactly the runs it deleted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import NoReturn

from flowctl.errors import DatabaseError, FlowctlError
from flowctl.model import RunStatus, from_us, to_us
from flowctl.store.postgres.connect import driver
from flowctl.store.postgres.connection import PostgresConnection, retried
from flowctl.store.records import PrunedRun

_FINISHED = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.DEAD)
# Every table flowctl keeps (constants: VACUUM takes no parameters).
_TABLES = (
    "runs, journal, versions, timeline, signals, published, output, notifications, daemons,"
    " schedules, schedule_history, meta, run_counts, run_count_deltas"
)


def _finished_only(statuses: Sequence[RunStatus]) -> list[str]:
    wanted = [str(s) for s in statuses]
    if not wanted or any(s not in _FINISHED for s in statuses):
        raise FlowctlError(
            f"prune takes finished statuses only (completed, cancelled, dead), got {wanted}"
        )
    return wanted


class Maintenance(PostgresConnection):
    """prunable_runs / prune_runs, vacuum, backup_to."""

    def prunable_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        rows = self._read(
            "SELECT run_id, workflow, status, finished_at FROM runs WHERE status = ANY(%s)"
            " AND finished_at < %s ORDER BY finished_at, run_id LIMIT %s",
            [_finished_only(statuses), to_us(before), limit],
        )
        return [PrunedRun(r[0], r[1], RunStatus(r[2]), from_us(r[3])) for r in rows]

    @retried
    def prune_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        """The journal, timeline, signals, versions, published values, output and outbox
        rows go with each run (ON DELETE CASCADE)."""
        wanted = _finished_only(statuses)
        with self._write() as c:
            # MATERIALIZED: the candidates are picked once. As an IN (subquery) the planner
            # may run the pick again per row, and SKIP LOCKED then picks other rows each
            # time: more than `limit` runs would go.
            rows = c.execute(
                "WITH picked AS MATERIALIZED (SELECT run_id FROM runs WHERE status = ANY(%s)"
                " AND finished_at < %s ORDER BY finished_at, run_id LIMIT %s"
                " FOR UPDATE SKIP LOCKED)"
                " DELETE FROM runs r USING picked p WHERE r.run_id = p.run_id"
                " AND r.status = ANY(%s) RETURNING r.run_id, r.workflow, r.status, r.finished_at",
                [wanted, to_us(before), limit, wanted],
            ).fetchall()
        rows.sort(key=lambda r: (r[3], r[0]))
        return [PrunedRun(r[0], r[1], RunStatus(r[2]), from_us(r[3])) for r in rows]

    def vacuum(self) -> tuple[int, int]:
        """VACUUM (ANALYZE) flowctl's tables: the space of deleted rows is reused by new ones
        and the planner's statistics are fresh; writers do not wait (no VACUUM FULL, which
        would lock every daemon out). Returns the database's size before and after."""
        size = "SELECT pg_database_size(current_database())"
        with self._connection() as c:  # autocommit: VACUUM runs outside a transaction
            before = int(c.execute(size).fetchone()[0])
            try:
                c.execute(f"VACUUM (ANALYZE) {_TABLES}")
            except driver().Error as e:
                raise DatabaseError(f"vacuum of PostgreSQL at {self.where} failed: {e}") from None
            return before, int(c.execute(size).fetchone()[0])

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> NoReturn:
        """`flowctl backup` writes a checked SQLite file; a server database is backed up by
        the server's tools, which keep its roles, settings and consistency while the fleet
        writes. Refuses in one line, writing nothing, and says which tool."""
        raise FlowctlError(
            f"flowctl backup copies a SQLite file; {self.path} is a PostgreSQL database:"
            f" back it up with pg_dump (e.g. pg_dump -Fc -f flowctl.dump '{self.path}')"
        )
