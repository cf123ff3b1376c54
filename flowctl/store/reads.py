"""Reads of runs, journals, timelines and published values (no writes); the run list and
its counts are RunList's (listing.py), which RunReads extends."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import (
    RunNotFoundError,
    RunRefMissingError,
)
from flowctl.model import (
    EntryState,
    JournalEntry,
    Run,
    TimelineEvent,
    from_us,
    to_us,
)
from flowctl.store.listing import NO_LIMIT, RunList
from flowctl.store.mapping import (
    _ENTRY_COLUMNS,
    _RUN_COLUMNS,
    _loads,
)
from flowctl.store.rows import RUNS, RUNS_BY_KEY, marks
from flowctl.store.values import PUBLISHED, SIGNAL
from flowctl.transitions import agenda_kind


class RunReads(RunList):
    """Reads of runs and what they recorded."""

    def get_run(self, run_id: str) -> Run:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id = ?", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return self._run(rows[0])

    def find_run(self, ref: str) -> Run:
        """A run by full id or unique prefix."""
        ref = ref.strip()
        if not ref:
            raise RunRefMissingError()
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id = ?", [ref])
        if rows:
            return self._run(rows[0])
        hi = ref + "\uffff"
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id >= ? AND run_id < ? LIMIT 2",
            [ref, hi],
        )
        if not rows:
            raise RunNotFoundError(ref)
        if len(rows) > 1:
            raise RunNotFoundError(ref, f"run id prefix {ref!r} is ambiguous: give more characters")
        return self._run(rows[0])

    def get_run_by_key(self, key: str) -> Run | None:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {RUNS_BY_KEY} WHERE key = ?", [key])
        return self._run(rows[0]) if rows else None

    def runs_by_ids(self, run_ids: Sequence[str]) -> list[Run]:
        if not run_ids:
            return []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id IN ({marks(len(run_ids))})",
            list(run_ids),
        )
        return [self._run(r) for r in rows]

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
        return {r[1]: self._entry(r) for r in rows}

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
                " ORDER BY seq DESC LIMIT ?) AS newest ORDER BY seq"
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
            [run_id, NO_LIMIT if limit is None else limit, skip],
        )
        (total,) = self._read("SELECT COUNT(*) FROM journal WHERE run_id = ?", [run_id])[0]
        return [self._entry(r) for r in reversed(rows)], int(total)

    def timeline_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[TimelineEvent], int]:
        rows = self._read(
            "SELECT run_id, at, type, data FROM timeline WHERE run_id = ? ORDER BY seq DESC"
            " LIMIT ? OFFSET ?",
            [run_id, NO_LIMIT if limit is None else limit, skip],
        )
        (total,) = self._read("SELECT COUNT(*) FROM timeline WHERE run_id = ?", [run_id])[0]
        events = [TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {}) for r in rows]
        implied = self._implied_created(run_id)
        if implied is not None:  # the oldest event: at place `total` of the newest-first order
            if skip <= total and (limit is None or total < skip + limit):
                events.append(implied)
            total += 1
        return events[::-1], int(total)

    def last_entry(self, run_id: str, states: Sequence[EntryState]) -> JournalEntry | None:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = ? AND state IN"
            f" ({marks(len(states))}) ORDER BY call_index DESC LIMIT 1",
            [run_id, *(str(s) for s in states)],
        )
        return self._entry(rows[0]) if rows else None

    def pending_signals(self, run_id: str) -> list[tuple[str, Any, datetime]]:
        rows = self._read(
            "SELECT name, payload, sent_at FROM signals WHERE run_id = ? AND consumed_at IS NULL"
            " ORDER BY seq",
            [run_id],
        )
        return [(r[0], self.values.loads(r[1], SIGNAL), from_us(r[2])) for r in rows]

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
        return {r[0]: (self.values.loads(r[1], PUBLISHED), from_us(r[2])) for r in rows}

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

    def agenda_runs(self, until: datetime, limit: int) -> list[tuple[datetime, str, Run]]:
        """(when, kind, run) for every active run's next due time and deadline up to `until`,
        soonest first; overdue ones are included. Kinds: start, retry, wake, timeout, deadline.

        Held runs (overlap=queue, run_at NULL) have no time and are not listed.
        """
        until_us = to_us(until)
        out: list[tuple[datetime, str, Run]] = []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS}, EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id"
            f" AND j.state = 'retrying') FROM {RUNS} WHERE status IN ('queued', 'sleeping', 'waiting')"
            " AND run_at IS NOT NULL AND run_at <= ? ORDER BY run_at LIMIT ?",
            [until_us, limit],
        )
        for r in rows:
            run = self._run(r)
            assert run.run_at is not None
            out.append((run.run_at, agenda_kind(run.status, run.attempt, bool(r[-1])), run))
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE deadline IS NOT NULL AND deadline <= ?"
            " AND status IN ('queued', 'running', 'sleeping', 'waiting', 'paused')"
            " ORDER BY deadline LIMIT ?",
            [until_us, limit],
        )
        for r in rows:
            run = self._run(r)
            assert run.deadline is not None
            out.append((run.deadline, "deadline", run))
        out.sort(key=lambda item: (item[0], item[2].run_id))
        return out[:limit]
