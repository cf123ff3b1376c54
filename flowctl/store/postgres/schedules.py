"""The PostgreSQL store: schedule definitions, fires (one transaction each, the schedule
row locked) and history; the agenda."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flowctl.errors import (
    ScheduleError,
    ScheduleNotFoundError,
)
from flowctl.model import (
    Run,
    RunStatus,
    to_us,
)
from flowctl.store.postgres.connection import retried
from flowctl.store.postgres.rows import (
    _HISTORY_COLUMNS,
    _RUN_COLUMNS,
    _SCHEDULE_COLUMNS,
    _dt,
    _history_from_row,
    _run_from_row,
    _schedule_from_row,
    _schedule_row,
    _secret_keys_json,
    _us,
)
from flowctl.store.postgres.transitions import Transitions, _fire_plan
from flowctl.store.records import (
    FireOutcome,
    FirePlan,
    NewSchedule,
    ScheduleEvent,
    ScheduleRow,
    dumps,
)
from flowctl.store.sqlite.schedules import HISTORY_KEEP


class Schedules(Transitions):
    """Schedules: definitions, fires under a revision compare-and-set, history."""

    @retried
    def add_schedule(
        self, new: NewSchedule, now: datetime, *, replace: bool = False
    ) -> ScheduleRow:
        """Insert a schedule, or with `replace` redefine an existing one (see the SQLite
        store): a redefinition takes effect from `now` and never backfills."""
        now_us = to_us(now)
        exists = ScheduleError(
            f"schedule {new.name!r} already exists: use --replace to redefine it,"
            " or choose another name"
        )
        with self._write() as c:
            row = c.execute(
                "SELECT paused FROM schedules WHERE name = %s FOR UPDATE", [new.name]
            ).fetchone()
            if row is not None and not replace:
                raise exists
            if row is None:
                n = c.execute(
                    "INSERT INTO schedules (name, target, cwd, input, spec, paused, created_at,"
                    " updated_at, active_from, last_fire_at, next_fire_at, revision, source,"
                    " origin, secret_keys) VALUES (%s,%s,%s,%s::jsonb,%s,0,%s,%s,%s,NULL,%s,1,%s,"
                    "%s,%s::jsonb) ON CONFLICT (name) DO NOTHING",
                    [
                        new.name,
                        new.target,
                        new.cwd,
                        dumps(new.input, "the schedule's input"),
                        new.spec,
                        now_us,
                        now_us,
                        now_us,
                        _us(new.next_fire_at),
                        new.source,
                        new.origin,
                        _secret_keys_json(new.secret_keys),
                    ],
                ).rowcount
                if n == 0:  # added by a concurrent writer since our read
                    raise exists
            else:
                c.execute(
                    "UPDATE schedules SET target = %s, cwd = %s, input = %s::jsonb, spec = %s,"
                    " updated_at = %s, active_from = %s, next_fire_at = CASE WHEN paused = 1"
                    " THEN NULL ELSE %s END, revision = revision + 1, source = %s, origin = %s,"
                    " secret_keys = %s::jsonb WHERE name = %s",
                    [
                        new.target,
                        new.cwd,
                        dumps(new.input, "the schedule's input"),
                        new.spec,
                        now_us,
                        now_us,
                        _us(new.next_fire_at),
                        new.source,
                        new.origin,
                        _secret_keys_json(new.secret_keys),
                        new.name,
                    ],
                )
            return _schedule_row(c, new.name)

    def get_schedule(self, name: str) -> ScheduleRow:
        with self._reading() as c:
            return _schedule_row(c, name)

    def list_schedules(self) -> list[ScheduleRow]:
        rows = self._read(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules ORDER BY name")
        return [_schedule_from_row(r) for r in rows]

    @retried
    def set_schedule_paused(
        self, name: str, paused: bool, next_fire_at: datetime | None, now: datetime
    ) -> ScheduleRow:
        """Pause (no fires at all) or resume, taking effect from `now`."""
        now_us = to_us(now)
        with self._write() as c:
            _schedule_row(c, name, lock=True)  # raises when it does not exist
            if paused:
                c.execute(
                    "UPDATE schedules SET paused = 1, next_fire_at = NULL, updated_at = %s,"
                    " revision = revision + 1 WHERE name = %s",
                    [now_us, name],
                )
            else:
                c.execute(
                    "UPDATE schedules SET paused = 0, next_fire_at = %s, active_from = %s,"
                    " updated_at = %s, revision = revision + 1 WHERE name = %s AND paused = 1",
                    [_us(next_fire_at), now_us, now_us, name],
                )
            return _schedule_row(c, name)

    @retried
    def remove_schedule(self, name: str) -> None:
        """Delete a schedule and its history. Its runs stay, still naming it."""
        with self._write() as c:
            n = c.execute("DELETE FROM schedules WHERE name = %s", [name]).rowcount
            if n == 0:
                raise ScheduleNotFoundError(name)

    def schedule_history(self, name: str, limit: int = 20) -> list[ScheduleEvent]:
        """The most recent `limit` decisions for a schedule, oldest first."""
        rows = self._read(
            "SELECT schedule, fire_at, action, run_id, at, detail, status FROM"
            f" (SELECT {_HISTORY_COLUMNS}, h.seq FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id WHERE h.schedule = %s"
            " ORDER BY h.seq DESC LIMIT %s) AS t ORDER BY seq",
            [name, limit],
        )
        return [_history_from_row(r) for r in rows]

    def last_schedule_events(self) -> dict[str, ScheduleEvent]:
        """Each schedule's latest history row (for `schedule ls`), with its run's status."""
        rows = self._read(
            f"SELECT {_HISTORY_COLUMNS} FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id"
            " WHERE h.seq IN (SELECT MAX(seq) FROM schedule_history GROUP BY schedule)"
        )
        return {r[0]: _history_from_row(r) for r in rows}

    def due_schedules(self, now: datetime) -> list[ScheduleRow]:
        rows = self._read(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE next_fire_at <= %s AND paused = 0"
            " ORDER BY next_fire_at",
            [to_us(now)],
        )
        return [_schedule_from_row(r) for r in rows]

    def next_schedule_fire(self) -> datetime | None:
        """The soonest unhandled fire over all active schedules: when the daemon must wake."""
        row = self._read(
            "SELECT MIN(next_fire_at) FROM schedules WHERE next_fire_at IS NOT NULL AND paused = 0"
        )
        return _dt(row[0][0])

    @retried
    def fire_schedule(
        self,
        name: str,
        revision: int,
        plans: Sequence[FirePlan],
        *,
        overlap: str,
        last_fire_at: datetime | None,
        next_fire_at: datetime | None,
        now: datetime,
    ) -> list[FireOutcome] | None:
        """Carry out one tick's decisions for a schedule in ONE transaction (see the SQLite
        store). The schedule row is locked, so of several daemons deciding the same fire
        one applies it and the others find the revision moved: None, nothing changed."""
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute(
                "SELECT revision, paused FROM schedules WHERE name = %s FOR UPDATE", [name]
            ).fetchone()
            if row is None or row[0] != revision or row[1]:
                return None
            outcomes = [_fire_plan(self, c, name, plan, overlap, now_us) for plan in plans]
            c.execute(
                "UPDATE schedules SET last_fire_at = %s, next_fire_at = %s,"
                " revision = revision + 1 WHERE name = %s",
                [_us(last_fire_at), _us(next_fire_at), name],
            )
            c.execute(
                "DELETE FROM schedule_history WHERE schedule = %s AND seq < (SELECT seq FROM"
                " schedule_history WHERE schedule = %s ORDER BY seq DESC LIMIT 1 OFFSET %s)",
                [name, name, HISTORY_KEEP - 1],
            )
            return outcomes

    @retried
    def trigger_schedule(
        self, name: str, plan: FirePlan, *, overlap: str, now: datetime
    ) -> FireOutcome:
        """A manual fire: under the same overlap policy, but last/next fire do not move."""
        with self._write() as c:
            _schedule_row(c, name, lock=True)
            return _fire_plan(self, c, name, plan, overlap, to_us(now))

    def agenda_runs(self, until: datetime, limit: int) -> list[tuple[datetime, str, Run]]:
        """(when, kind, run) for every active run's next due time and deadline up to `until`,
        soonest first; overdue ones are included. Kinds: start, retry, wake, timeout, deadline.
        """
        until_us = to_us(until)
        out: list[tuple[datetime, str, Run]] = []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS}, EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id"
            " AND j.state = 'retrying') FROM runs WHERE status IN ('queued', 'sleeping', 'waiting')"
            " AND run_at IS NOT NULL AND run_at <= %s ORDER BY run_at LIMIT %s",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.run_at is not None
            if run.status is RunStatus.SLEEPING:
                kind = "wake"
            elif run.status is RunStatus.WAITING:
                kind = "timeout"
            else:
                kind = "retry" if (r[-1] or run.attempt > 1) else "start"
            out.append((run.run_at, kind, run))
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE deadline IS NOT NULL AND deadline <= %s"
            " AND status IN ('queued', 'running', 'sleeping', 'waiting', 'paused')"
            " ORDER BY deadline LIMIT %s",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.deadline is not None
            out.append((run.deadline, "deadline", run))
        out.sort(key=lambda item: (item[0], item[2].run_id))
        return out[:limit]
