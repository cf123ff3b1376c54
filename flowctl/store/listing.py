"""Reads of the run list: pages of runs, their counts per status, the call each waits on,
a run's newest event of a kind. What `flowctl ls` needs and nothing else (no writes, no
leases, no schedules), so it can open `RunList` alone (flowctl.store.open_run_list) and
its start-up compiles this module, not the whole store. SqlStore has all of it through
RunReads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.model import CallKind, Run, RunStatus, TimelineEvent, from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.mapping import _RUN_COLUMNS, PLAIN_CREATED, _loads
from flowctl.store.rows import RUNS, marks, search_clause, search_source

# Marks a statement whose sort run_counts bounds (see _workflow_indexes), for the plan test.
SORT_BOUNDED = "/* sort bounded by run_counts */"
NO_LIMIT = 1 << 62  # LIMIT for "every row" (one spelling for both backends)

_ORDERS = {
    "created_desc": "created_at DESC, rid DESC",
    "run_at": "run_at, run_id",  # runs_due is (status, run_at, run_id)
    "finished_desc": "finished_at DESC, rid DESC",
}


class RunList(StoreCore):
    """Reads of the run list and its counts."""

    def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        search: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
        order: str = "created_desc",
    ) -> list[Run]:
        """One page of runs, newest first (or by run_at, or by finished_at).

        Each status is listed from its own index range in order, and several are merged
        from at most limit + offset rows each, so no listing sorts a growing set. Ties go
        by insertion (by run_id in run_at order, which its index holds). A search reads a
        bounded window of runs (see rows.search_source)."""
        where, params = self._narrowing(workflow, since, order)
        wanted = [str(s) for s in statuses] if statuses else []
        if search:
            source, source_params = search_source(self.db.dialect, search)
            clause, clause_args = search_clause(self.db.dialect, search)
            conds = ([f"status IN ({marks(len(wanted))})"] if wanted else []) + where + [clause]
            sql = f"SELECT {_RUN_COLUMNS}, rid FROM {source} WHERE " + " AND ".join(conds)
            sql += f" ORDER BY {_ORDERS[order]} LIMIT ? OFFSET ?"
            args = [*source_params, *wanted, *params, *clause_args, limit, offset]
            return [self._run(r) for r in self._read(sql, args)]
        # Every index on runs leads with the status (or workflow, status): each status's
        # range, merged.
        wanted = wanted or [str(s) for s in RunStatus]
        hints = (
            self._workflow_indexes(workflow, wanted, order, limit + offset)
            if workflow and order != "created_desc" and self.db.dialect.index_hints
            else {}
        )
        parts: list[str] = []
        args = []
        for i, status in enumerate(wanted):
            part = " AND ".join(["status = ?", *where])
            parts.append(
                f"SELECT * FROM (SELECT {_RUN_COLUMNS}, {{rowid}} AS rid FROM runs"
                f" {hints.get(status, '')} LEFT JOIN definitions USING (def_id)"
                f" WHERE {part} ORDER BY {_ORDERS[order]} LIMIT ?) AS s{i}"
            )
            args += [status, *params, limit + offset]
        sql = " UNION ALL ".join(parts) + f" ORDER BY {_ORDERS[order]} LIMIT ? OFFSET ?"
        return [self._run(r) for r in self._read(sql, [*args, limit, offset])]

    @staticmethod
    def _narrowing(
        workflow: str | None, since: datetime | None, order: str
    ) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        if since is not None:
            where.append("created_at >= ?")
            params.append(to_us(since))
        if order == "finished_desc":
            where.append("finished_at IS NOT NULL")  # runs_status_finished holds only these
        return where, params

    def _workflow_indexes(
        self, workflow: str, statuses: Sequence[str], order: str, rows: int
    ) -> dict[str, str]:
        """The index each status of one workflow is listed from, in run_at or finished_at
        order (runs_workflow holds created_at order only), on SQLite, whose planner is
        told. From run_counts, O(1): with w runs of the workflow among s of the status,
        seeking the w and sorting them costs w; walking the order's index until `rows` of
        the workflow turn up costs rows * s / w. The cheaper is taken, so neither a rare
        workflow nor a common one costs more than sqrt(rows * s) rows."""
        walk = {"run_at": "runs_due", "finished_desc": "runs_status_finished"}[order]
        counts = {
            status: (int(w), int(s))
            for status, w, s in self._read(
                "SELECT status, SUM(CASE WHEN workflow = ? THEN n ELSE 0 END), SUM(n)"
                " FROM run_counts GROUP BY status",
                [workflow],
            )
        }
        hints = {}
        for status in statuses:
            w, s = counts.get(status, (0, 0))
            seek = w * w <= rows * s
            hints[status] = (
                f"INDEXED BY runs_workflow {SORT_BOUNDED}" if seek else f"INDEXED BY {walk}"
            )
        return hints

    def count_by_status(self, workflow: str | None = None) -> dict[RunStatus, int]:
        """Runs per status (of one workflow): read from the run counts, which every status
        change keeps in its own transaction, so this never scans runs."""
        counts = {s: 0 for s in RunStatus}
        if workflow:
            rows = self._read(
                "SELECT status, n FROM {counts} WHERE workflow = ? AND n > 0", [workflow]
            )
        else:
            rows = self._read("SELECT status, SUM(n) FROM {counts} GROUP BY status")
        for status, n in rows:
            if n:
                counts[RunStatus(status)] = int(n)
        return counts

    def count_by_status_matching(
        self, workflow: str | None, search: str | None
    ) -> dict[RunStatus, int]:
        """Counts per status under the same workflow/search narrowing as list_runs: the
        TUI's tab counts agree with the rows it lists. A search counts in its window."""
        if not search:
            return self.count_by_status(workflow)
        source, params = search_source(self.db.dialect, search)
        where: list[str] = []
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        clause, args = search_clause(self.db.dialect, search)
        where.append(clause)
        params.extend(args)
        sql = f"SELECT status, COUNT(*) FROM {source} WHERE " + " AND ".join(where)
        counts = {s: 0 for s in RunStatus}
        for status, n in self._read(sql + " GROUP BY status", params):
            counts[RunStatus(status)] = int(n)
        return counts

    def workflows_seen(self) -> list[str]:
        rows = self._read("SELECT DISTINCT workflow FROM {counts} WHERE n > 0 ORDER BY workflow")
        return [r[0] for r in rows]

    def pending_calls(self, run_ids: Sequence[str]) -> dict[str, tuple[CallKind, str]]:
        """The unresolved call (kind, name) each run is parked on: one query for a page."""
        if not run_ids:
            return {}
        rows = self._read(
            "SELECT run_id, kind, name FROM journal WHERE state = 'pending' AND run_id IN"
            f" ({marks(len(run_ids))}) ORDER BY call_index",
            list(run_ids),
        )
        return {r[0]: (CallKind(r[1]), r[2]) for r in rows}

    def last_event(self, run_id: str, types: Sequence[str]) -> TimelineEvent | None:
        """The run's newest timeline event of one of these types."""
        rows = self._read(
            f"SELECT run_id, at, type, data FROM timeline WHERE run_id = ? AND type IN"
            f" ({marks(len(types))}) ORDER BY seq DESC LIMIT 1",
            [run_id, *types],
        )
        if not rows:
            return self._implied_created(run_id) if "created" in types else None
        r = rows[0]
        return TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})

    def _implied_created(self, run_id: str) -> TimelineEvent | None:
        """The run's plain `created` event, when it is not stored (it is implied since
        SQLite migration 18): its first event, {"attempt": 1} at created_at, unless its
        first stored event is a `created` one (which then says more). None for a run that
        does not exist."""
        rows = self._read(
            "SELECT created_at, (SELECT type FROM timeline t WHERE t.run_id = runs.run_id"
            " ORDER BY seq LIMIT 1) FROM runs WHERE run_id = ?",
            [run_id],
        )
        if not rows or rows[0][1] == "created":
            return None
        return TimelineEvent(run_id, from_us(rows[0][0]), "created", json.loads(PLAIN_CREATED))


__all__ = ["NO_LIMIT", "RUNS", "SORT_BOUNDED", "RunList"]
