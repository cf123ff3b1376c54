"""Reads of runs, journals, timelines and published values (no writes)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import (
    RunNotFoundError,
)
from flowctl.model import (
    CallKind,
    EntryState,
    JournalEntry,
    Run,
    RunStatus,
    TimelineEvent,
    from_us,
    to_us,
)
from flowctl.store.sqlite.connection import SqliteConnection
from flowctl.store.sqlite.rows import (
    _ENTRY_COLUMNS,
    _RUN_COLUMNS,
    _RUNS,
    _RUNS_BY_KEY_JOINED,
    _entry_from_row,
    _loads,
    _run_from_row,
    _search_clause,
    _search_source,
)
from flowctl.store.sqlite.schema import PLAIN_CREATED
from flowctl.transitions import agenda_kind

# Marks a statement whose sort run_counts bounds (see _workflow_indexes), for the plan test.
SORT_BOUNDED = "/* sort bounded by run_counts */"


class RunReads(SqliteConnection):
    """Reads of runs and what they recorded."""

    def get_run(self, run_id: str) -> Run:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {_RUNS} WHERE run_id = ?", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return _run_from_row(rows[0])

    def find_run(self, ref: str) -> Run:
        """A run by full id or unique prefix."""
        ref = ref.strip()
        if not ref:
            raise RunNotFoundError(ref, "a run id is required")
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {_RUNS} WHERE run_id = ?", [ref])
        if rows:
            return _run_from_row(rows[0])
        hi = ref + "\uffff"
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS} WHERE run_id >= ? AND run_id < ? LIMIT 2",
            [ref, hi],
        )
        if not rows:
            raise RunNotFoundError(ref)
        if len(rows) > 1:
            raise RunNotFoundError(ref, f"run id prefix {ref!r} is ambiguous: give more characters")
        return _run_from_row(rows[0])

    def get_run_by_key(self, key: str) -> Run | None:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {_RUNS_BY_KEY_JOINED} WHERE key = ?", [key])
        return _run_from_row(rows[0]) if rows else None

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
        from at most limit + offset rows each, so no listing sorts a growing set. Ties
        are broken by rowid (insertion order; by run_id in run_at order, which its index
        holds). A search reads a bounded window of runs
        (see _search_source).
        """
        orders = {
            "created_desc": "created_at DESC, rid DESC",
            "run_at": "run_at, run_id",  # runs_due is (status, run_at, run_id)
            "finished_desc": "finished_at DESC, rid DESC",
        }
        by = orders[order]
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
        source, source_params = _RUNS, list[Any]()
        if search:
            source, source_params = _search_source(search)
            clause, clause_args = _search_clause(search)
            where.append(clause)
            params.extend(clause_args)
        rid = "rid" if search else "runs.rowid AS rid"
        wanted = [str(s) for s in statuses] if statuses else []
        if not wanted and not search:
            # Every index on runs leads with the status (or workflow, status) since
            # migration 19: each status's range, merged.
            wanted = [str(s) for s in RunStatus]
        hints = (
            self._workflow_indexes(workflow, wanted, order, limit + offset)
            if workflow and not search and order != "created_desc"
            else {}
        )
        if (len(wanted) <= 1 and not hints) or search:  # one index range, or a bounded window
            marks = ",".join("?" * len(wanted))
            conds = ([f"status IN ({marks})"] if wanted else []) + where
            sql = f"SELECT {_RUN_COLUMNS}, {rid} FROM {source}"
            if conds:
                sql += " WHERE " + " AND ".join(conds)
            sql += f" ORDER BY {by} LIMIT ? OFFSET ?"
            rows = self._read(sql, [*source_params, *wanted, *params, limit, offset])
            return [_run_from_row(r) for r in rows]
        parts: list[str] = []
        args: list[Any] = []
        for status in wanted:
            part = " AND ".join(["status = ?", *where])
            parts.append(
                f"SELECT * FROM (SELECT {_RUN_COLUMNS}, {rid} FROM runs {hints.get(status, '')}"
                " LEFT JOIN definitions USING (def_id)"
                f" WHERE {part} ORDER BY {by} LIMIT ?)"
            )
            args += [status, *params, limit + offset]
        sql = " UNION ALL ".join(parts) + f" ORDER BY {by} LIMIT ? OFFSET ?"
        return [_run_from_row(r) for r in self._read(sql, [*args, limit, offset])]

    def _workflow_indexes(
        self, workflow: str, statuses: Sequence[str], order: str, rows: int
    ) -> dict[str, str]:
        """The index each status of one workflow is listed from, in run_at or finished_at
        order (runs_workflow holds created_at order only). From run_counts, O(1): with w
        runs of the workflow among s of the status, seeking the w and sorting them costs w;
        walking the order's index until `rows` of the workflow turn up costs rows * s / w.
        The cheaper is taken, so neither a rare workflow nor a common one costs more than
        sqrt(rows * s) rows (14,000 for a 200-row page of 1,000,000 runs)."""
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

    def runs_by_ids(self, run_ids: Sequence[str]) -> list[Run]:
        if not run_ids:
            return []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS} WHERE run_id IN ({','.join('?' * len(run_ids))})",
            list(run_ids),
        )
        return [_run_from_row(r) for r in rows]

    def count_by_status(self, workflow: str | None = None) -> dict[RunStatus, int]:
        """Runs per status (of one workflow): read from run_counts, which triggers keep in
        the same transaction as every status change, so this never scans runs."""
        counts = {s: 0 for s in RunStatus}
        if workflow:
            rows = self._read(
                "SELECT status, n FROM run_counts WHERE workflow = ? AND n > 0", [workflow]
            )
        else:
            rows = self._read("SELECT status, SUM(n) FROM run_counts GROUP BY status")
        for status, n in rows:
            if n:
                counts[RunStatus(status)] = n
        return counts

    def workflows_seen(self) -> list[str]:
        return [
            r[0]
            for r in self._read(
                "SELECT DISTINCT workflow FROM run_counts WHERE n > 0 ORDER BY workflow"
            )
        ]

    def run_source(self, run_id: str) -> tuple[str | None, str | None]:
        rows = self._read(
            "SELECT COALESCE(r.source, s.source), d.source_hash FROM runs r LEFT JOIN definitions d"
            " USING (def_id) LEFT JOIN sources s ON s.source_hash = d.source_hash"
            " WHERE r.run_id = ?",
            [run_id],
        )
        if not rows:
            raise RunNotFoundError(run_id)
        return rows[0][0], rows[0][1]

    def journal(self, run_id: str) -> dict[int, JournalEntry]:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = ? ORDER BY call_index", [run_id]
        )
        return {r[1]: _entry_from_row(r) for r in rows}

    def versions(self, run_id: str) -> dict[str, int]:
        rows = self._read("SELECT change_id, version FROM versions WHERE run_id = ?", [run_id])
        return {r[0]: r[1] for r in rows}

    def versions_detail(self, run_id: str) -> list[tuple[str, int, datetime]]:
        rows = self._read(
            "SELECT change_id, version, recorded_at FROM versions WHERE run_id = ? ORDER BY recorded_at",
            [run_id],
        )
        return [(r[0], r[1], from_us(r[2])) for r in rows]

    def timeline(self, run_id: str, limit: int | None = None) -> list[TimelineEvent]:
        sql = "SELECT run_id, at, type, data FROM timeline WHERE run_id = ? ORDER BY seq"
        params: list[Any] = [run_id]
        if limit is not None:
            sql = (
                "SELECT * FROM (SELECT run_id, at, type, data, seq FROM timeline WHERE run_id = ?"
                " ORDER BY seq DESC LIMIT ?) ORDER BY seq"
            )
            params.append(limit)
        events = [
            TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})
            for r in self._read(sql, params)
        ]
        if limit is None or len(events) < limit:  # the page reaches the run's first event
            implied = self._implied_created(run_id)
            if implied is not None:
                events.insert(0, implied)
        return events

    def journal_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[JournalEntry], int]:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = ? ORDER BY call_index DESC"
            " LIMIT ? OFFSET ?",
            [run_id, -1 if limit is None else limit, skip],
        )
        (total,) = self._read("SELECT COUNT(*) FROM journal WHERE run_id = ?", [run_id])[0]
        return [_entry_from_row(r) for r in reversed(rows)], int(total)

    def timeline_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[TimelineEvent], int]:
        rows = self._read(
            "SELECT run_id, at, type, data FROM timeline WHERE run_id = ? ORDER BY seq DESC"
            " LIMIT ? OFFSET ?",
            [run_id, -1 if limit is None else limit, skip],
        )
        (total,) = self._read("SELECT COUNT(*) FROM timeline WHERE run_id = ?", [run_id])[0]
        events = [TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {}) for r in rows]
        implied = self._implied_created(run_id)
        if implied is not None:  # the oldest event: at place `total` of the newest-first order
            if skip <= total and (limit is None or total < skip + limit):
                events.append(implied)
            total += 1
        return events[::-1], int(total)

    def _implied_created(self, run_id: str) -> TimelineEvent | None:
        """The run's plain `created` event, when it is not stored (migration 18): its first
        event, {"attempt": 1} at created_at, unless its first stored event is a `created`
        one (which then says more). None for a run that does not exist."""
        rows = self._read(
            "SELECT created_at, (SELECT type FROM timeline t WHERE t.run_id = runs.run_id"
            " ORDER BY seq LIMIT 1) FROM runs WHERE run_id = ?",
            [run_id],
        )
        if not rows or rows[0][1] == "created":
            return None
        return TimelineEvent(run_id, from_us(rows[0][0]), "created", json.loads(PLAIN_CREATED))

    def last_entry(self, run_id: str, states: Sequence[EntryState]) -> JournalEntry | None:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = ? AND state IN"
            f" ({','.join('?' * len(states))}) ORDER BY call_index DESC LIMIT 1",
            [run_id, *(str(s) for s in states)],
        )
        return _entry_from_row(rows[0]) if rows else None

    def pending_signals(self, run_id: str) -> list[tuple[str, Any, datetime]]:
        rows = self._read(
            "SELECT name, payload, sent_at FROM signals WHERE run_id = ? AND consumed_at IS NULL"
            " ORDER BY seq",
            [run_id],
        )
        return [(r[0], _loads(r[1]), from_us(r[2])) for r in rows]

    def recent_wakes(self, since: datetime, limit: int = 10_000) -> list[float]:
        """Lateness (seconds) of recent timer wakes, from the timeline."""
        rows = self._read(
            "SELECT data FROM timeline WHERE type = 'woke' AND at >= ? ORDER BY at DESC LIMIT ?",
            [to_us(since), limit],
        )
        out = []
        for (data,) in rows:
            d = _loads(data) or {}
            if "late_ms" in d:
                out.append(float(d["late_ms"]) / 1000.0)
        return out

    def published(self, run_id: str) -> dict[str, tuple[Any, datetime]]:
        rows = self._read(
            "SELECT key, value, at FROM published WHERE run_id = ? ORDER BY key", [run_id]
        )
        return {r[0]: (_loads(r[1]), from_us(r[2])) for r in rows}

    def pauses_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to pause (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND pause_requested = 1"
            f" AND run_id IN ({','.join('?' * len(run_ids))})",
            list(run_ids),
        )
        return [r[0] for r in rows]

    def due_ahead(self, run_id: str, run_at: datetime) -> int:
        """How many runs the claim order (run_at, then run id) puts before one due at run_at."""
        at_us = to_us(run_at)
        total = 0
        for status in ("queued", "sleeping", "waiting", "running"):
            total += int(
                self._read(
                    "SELECT COUNT(*) FROM runs WHERE status = ? AND run_at <= ?"
                    " AND (run_at < ? OR run_id < ?)",
                    [status, at_us, at_us, run_id],
                )[0][0]
            )
        return total

    def last_event(self, run_id: str, types: Sequence[str]) -> TimelineEvent | None:
        """The run's newest timeline event of one of these types."""
        rows = self._read(
            f"SELECT run_id, at, type, data FROM timeline WHERE run_id = ? AND type IN"
            f" ({','.join('?' * len(types))}) ORDER BY seq DESC LIMIT 1",
            [run_id, *types],
        )
        if not rows:
            return self._implied_created(run_id) if "created" in types else None
        r = rows[0]
        return TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})

    # -- TUI support ---------------------------------------------------------

    def count_by_status_matching(
        self, workflow: str | None, search: str | None
    ) -> dict[RunStatus, int]:
        """Counts per status under the same workflow/search narrowing as list_runs.

        The TUI's tab counts must agree with the rows it lists when a search is active;
        without a search they come from run_counts. A search counts in its bounded window.
        """
        if not search:
            return self.count_by_status(workflow)
        source, params = _search_source(search)
        where: list[str] = []
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        clause, args = _search_clause(search)
        where.append(clause)
        params.extend(args)
        sql = f"SELECT status, COUNT(*) FROM {source} WHERE " + " AND ".join(where)
        counts = {s: 0 for s in RunStatus}
        for status, n in self._read(sql + " GROUP BY status", params):
            counts[RunStatus(status)] = n
        return counts

    def pending_calls(self, run_ids: Sequence[str]) -> dict[str, tuple[CallKind, str]]:
        """The unresolved call (kind, name) each run is parked on: what a waiting run waits for.

        One query for a page of runs, so a list can show it without reading whole journals.
        """
        if not run_ids:
            return {}
        rows = self._read(
            "SELECT run_id, kind, name FROM journal WHERE state = 'pending' AND run_id IN"
            f" ({','.join('?' * len(run_ids))}) ORDER BY call_index",
            list(run_ids),
        )
        return {r[0]: (CallKind(r[1]), r[2]) for r in rows}

    def agenda_runs(self, until: datetime, limit: int) -> list[tuple[datetime, str, Run]]:
        """(when, kind, run) for every active run's next due time and deadline up to `until`,
        soonest first; overdue ones are included. Kinds: start, retry, wake, timeout, deadline.

        Held runs (overlap=queue, run_at NULL) have no time and are not listed.
        """
        until_us = to_us(until)
        out: list[tuple[datetime, str, Run]] = []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS}, EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id"
            f" AND j.state = 'retrying') FROM {_RUNS} WHERE status IN ('queued', 'sleeping', 'waiting')"
            " AND run_at IS NOT NULL AND run_at <= ? ORDER BY run_at LIMIT ?",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.run_at is not None
            out.append((run.run_at, agenda_kind(run.status, run.attempt, bool(r[-1])), run))
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS} WHERE deadline IS NOT NULL AND deadline <= ?"
            " AND status IN ('queued', 'running', 'sleeping', 'waiting', 'paused')"
            " ORDER BY deadline LIMIT ?",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.deadline is not None
            out.append((run.deadline, "deadline", run))
        out.sort(key=lambda item: (item[0], item[2].run_id))
        return out[:limit]
