"""The PostgreSQL store: operator actions, the daemons registry, and TUI reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import (
    RunNotFoundError,
)
from flowctl.model import (
    CallKind,
    Run,
    RunStatus,
    TimelineEvent,
    from_us,
    to_us,
)
from flowctl.store.postgres.connection import retried
from flowctl.store.postgres.rows import (
    _CLEARED,
    _add_event,
    _dt,
    _iso_us,
    _load_run,
    _loads,
    _us,
)
from flowctl.store.postgres.transitions import Transitions, _release_next
from flowctl.store.records import (
    DaemonInfo,
    dumps,
)
from flowctl.transitions import (
    Action,
    cancel_error,
    guard,
    resume,
)


class OperatorWrites(Transitions):
    """Pause, resume, signal, cancel, redrive, wake; daemons; counts for the TUI."""

    @retried
    def request_pause(self, run_id: str, by: str, now: datetime) -> Run:
        """Pause a run: parked at once unless running; a running run is asked to park at its
        next durable call. Pausing it again changes nothing."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.PAUSE, run_id, run.status)
            if run.status is RunStatus.RUNNING:
                if not run.pause_requested:
                    c.execute("UPDATE runs SET pause_requested = 1 WHERE run_id = %s", [run_id])
                    _add_event(c, run_id, now_us, "pause requested", {"by": by})
            else:
                self._park_paused(c, run, run.status, _us(run.run_at), now_us, by=by)
            return _load_run(c, run_id)

    @retried
    def resume(self, run_id: str, by: str, now: datetime) -> Run:
        """Give a paused run back its status (due at once if its wake passed meanwhile); for a
        running run, withdraw the pause it was asked for."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.RESUME, run_id, run.status, pause_requested=run.pause_requested)
            if run.status is RunStatus.RUNNING:
                c.execute("UPDATE runs SET pause_requested = 0 WHERE run_id = %s", [run_id])
                _add_event(c, run_id, now_us, "resumed", {"by": by, "was": "pause requested"})
                return _load_run(c, run_id)
            back = resume(run, from_us(now_us))
            c.execute(
                "UPDATE runs SET status = %s, run_at = %s, paused_status = NULL,"
                " paused_run_at = NULL WHERE run_id = %s",
                [str(back.status), _us(back.run_at), run_id],
            )
            data: dict[str, Any] = {"by": by, "status": str(back.status)}
            if back.run_at is not None:
                data["due"] = back.run_at.isoformat(timespec="microseconds")
            _add_event(c, run_id, now_us, "resumed", data)
            if run.schedule is not None and back.run_at is None:
                _release_next(c, run.schedule, now_us, after=None)
            return _load_run(c, run_id)

    def pauses_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to pause (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND pause_requested = 1"
            " AND run_id = ANY(%s)",
            [list(run_ids)],
        )
        return [r[0] for r in rows]

    @retried
    def send_signal(self, run_id: str, name: str, payload: Any, now: datetime) -> RunStatus:
        """Buffer a signal; a run waiting for a signal becomes due now."""
        now_us = to_us(now)
        text = dumps(payload, "the signal payload")
        with self._write() as c:
            row = c.execute(
                "SELECT status FROM runs WHERE run_id = %s FOR UPDATE", [run_id]
            ).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            status = RunStatus(row[0])
            guard(Action.SIGNAL, run_id, status)
            c.execute(
                "INSERT INTO signals (run_id, name, payload, sent_at) VALUES (%s,%s,%s::jsonb,%s)",
                [run_id, name, text, now_us],
            )
            c.execute(
                "UPDATE runs SET run_at = %s WHERE run_id = %s AND status = 'waiting'",
                [now_us, run_id],
            )
            c.execute(
                "UPDATE runs SET paused_run_at = %s WHERE run_id = %s AND status = 'paused'"
                " AND paused_status = 'waiting'",
                [now_us, run_id],
            )
            _add_event(c, run_id, now_us, "signal sent", {"name": name})
            return status

    @retried
    def request_cancel(self, run_id: str, reason: str | None, by: str, now: datetime) -> RunStatus:
        """Cancel at once unless running; a running run gets the request at its next heartbeat.

        Returns the status after the call (cancelled, or running when only requested).
        """
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.CANCEL, run_id, run.status)
            data = {"by": by, **({"reason": reason} if reason else {})}
            c.execute(
                "UPDATE runs SET cancel_requested = 1, cancel_reason = %s WHERE run_id = %s",
                [reason, run_id],
            )
            if run.status is RunStatus.RUNNING:
                _add_event(c, run_id, now_us, "cancel requested", data)
                return RunStatus.RUNNING
            self._end(c, run, RunStatus.CANCELLED, cancel_error(reason, by), now_us)
            return RunStatus.CANCELLED

    @retried
    def redrive(self, run_id: str, by: str, now: datetime) -> Run:
        """Put a dead (or cancelled) run back in the queue with a fresh attempt budget."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.REDRIVE, run_id, run.status)
            c.execute(
                "DELETE FROM journal WHERE run_id = %s AND call_index >= (SELECT MIN(call_index)"
                " FROM journal WHERE run_id = %s AND state IN ('error', 'retrying'))",
                [run_id, run_id],
            )
            c.execute(
                # A cancelled run's error is the cancel itself (see the SQLite store).
                "UPDATE runs SET error = CASE WHEN status = 'cancelled' THEN NULL ELSE error END,"
                " status = 'queued', run_at = %s, attempt = 1, deadline = NULL,"
                " exec_spent_us = 0, finished_at = NULL, cancel_requested = 0,"
                f" cancel_reason = NULL, {_CLEARED}, solo = 0, lease_owner = NULL,"
                " lease_until = NULL WHERE run_id = %s",
                [now_us, run_id],
            )
            _add_event(c, run_id, now_us, "redriven", {"by": by, "was": str(run.status)})
            return _load_run(c, run_id)

    @retried
    def wake_now(self, run_id: str, by: str, now: datetime) -> Run:
        """End a sleep early (operator action); the recorded wake_at is kept for history."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.WAKE, run_id, run.status)
            c.execute(
                "UPDATE journal SET state = 'done', resolved_at = %s WHERE run_id = %s"
                " AND kind = 'sleep' AND state = 'pending'",
                [now_us, run_id],
            )
            c.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", [now_us, run_id])
            _add_event(
                c, run_id, now_us, "woken by operator", {"by": by, "was_due": _iso_us(run.run_at)}
            )
            return _load_run(c, run_id)

    @retried
    def register_daemon(
        self,
        owner: str,
        host: str,
        pid: int,
        proc_start: str | None,
        now: datetime,
        info: dict[str, Any],
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            c.execute(
                "INSERT INTO daemons (owner, host, pid, proc_start, started_at, seen_at, info)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s::jsonb) ON CONFLICT (owner) DO UPDATE SET"
                " host = EXCLUDED.host, pid = EXCLUDED.pid, proc_start = EXCLUDED.proc_start,"
                " started_at = EXCLUDED.started_at, seen_at = EXCLUDED.seen_at,"
                " info = EXCLUDED.info",
                [owner, host, pid, proc_start, now_us, now_us, dumps(info)],
            )

    @retried
    def unregister_daemon(self, owner: str, now: datetime | None = None) -> None:
        """Forget a daemon, remembering when it was last seen (`now`, else its last heartbeat)."""
        with self._write() as c:
            row = c.execute(
                "SELECT seen_at FROM daemons WHERE owner = %s FOR UPDATE", [owner]
            ).fetchone()
            if row is not None:
                seen = row[0] if now is None else max(row[0], to_us(now))
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('daemon_last_seen', %s) ON CONFLICT"
                    " (key) DO UPDATE SET value = GREATEST(CAST(meta.value AS BIGINT),"
                    " CAST(EXCLUDED.value AS BIGINT))::text",
                    [str(seen)],
                )
            c.execute("DELETE FROM daemons WHERE owner = %s", [owner])

    def daemon_last_seen(self) -> datetime | None:
        """When a daemon was last seen on this database: a stopped one's last moment, or the
        latest heartbeat of one still registered."""
        rows = self._read(
            "SELECT MAX(v) FROM (SELECT CAST(value AS BIGINT) AS v FROM meta"
            " WHERE key = 'daemon_last_seen' UNION ALL SELECT MAX(seen_at) FROM daemons) AS t"
        )
        return _dt(rows[0][0])

    def daemons(self) -> list[DaemonInfo]:
        rows = self._read(
            "SELECT owner, host, pid, proc_start, started_at, seen_at, info FROM daemons"
            " ORDER BY started_at"
        )
        return [
            DaemonInfo(r[0], r[1], r[2], r[3], from_us(r[4]), from_us(r[5]), _loads(r[6]) or {})
            for r in rows
        ]

    def due_ahead(self, run_id: str, run_at: datetime) -> int:
        """How many runs the claim order (run_at, then run id) puts before one due at run_at."""
        at_us = to_us(run_at)
        total = 0
        for status in ("queued", "sleeping", "waiting", "running"):
            total += int(
                self._read(
                    "SELECT COUNT(*) FROM runs WHERE status = %s AND run_at <= %s"
                    " AND (run_at < %s OR run_id < %s)",
                    [status, at_us, at_us, run_id],
                )[0][0]
            )
        return total

    def last_event(self, run_id: str, types: Sequence[str]) -> TimelineEvent | None:
        """The run's newest timeline event of one of these types."""
        rows = self._read(
            "SELECT run_id, at, type, data FROM timeline WHERE run_id = %s AND type = ANY(%s)"
            " ORDER BY seq DESC LIMIT 1",
            [run_id, list(types)],
        )
        if not rows:
            return None
        r = rows[0]
        return TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})

    def held_count(self, owner: str) -> int:
        return int(
            self._read(
                "SELECT COUNT(*) FROM runs WHERE status = 'running' AND lease_owner = %s", [owner]
            )[0][0]
        )

    def pending_calls(self, run_ids: Sequence[str]) -> dict[str, tuple[CallKind, str]]:
        """The unresolved call (kind, name) each run is parked on, for a page of runs."""
        if not run_ids:
            return {}
        rows = self._read(
            "SELECT run_id, kind, name FROM journal WHERE state = 'pending' AND run_id = ANY(%s)"
            " ORDER BY call_index",
            [list(run_ids)],
        )
        return {r[0]: (CallKind(r[1]), r[2]) for r in rows}
