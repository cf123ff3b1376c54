"""Schedules: definitions, fires (each in the transaction that creates its runs), history."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from flowctl.errors import (
    ScheduleError,
    ScheduleNotFoundError,
)
from flowctl.model import (
    to_us,
)
from flowctl.store.records import (
    FireOutcome,
    FirePlan,
    NewSchedule,
    ScheduleEvent,
    ScheduleRow,
    dumps,
)
from flowctl.store.sqlite.connection import SqliteConnection
from flowctl.store.sqlite.rows import _RUNS_BY_KEY, _add_event, _dt, _us
from flowctl.store.sqlite.schedule_rows import (
    _HISTORY_COLUMNS,
    _SCHEDULE_COLUMNS,
    _history_from_row,
    _schedule_from_row,
    _schedule_row,
    _secret_keys_json,
)
from flowctl.store.sqlite.writes import _RUNNING_OF_SCHEDULE, _insert_run, _release_next


class Schedules(SqliteConnection):
    """Schedule definitions, fires and history (issue 7).

    The calendar (which instants fire) is computed by flowctl.schedule / flowctl.scheduler;
    the store only records decisions, each fire in the same transaction as the run it creates.
    """

    def add_schedule(
        self, new: NewSchedule, now: datetime, *, replace: bool = False
    ) -> ScheduleRow:
        """Insert a schedule, or with `replace` redefine an existing one.

        A redefinition keeps the name's history, creation time, pause state and last fire, and
        takes effect from `now` (active_from): it never backfills fires of the old definition.
        """
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute("SELECT paused FROM schedules WHERE name = ?", [new.name]).fetchone()
            if row is not None and not replace:
                raise ScheduleError(
                    f"schedule {new.name!r} already exists: use --replace to redefine it,"
                    " or choose another name"
                )
            if row is None:
                c.execute(
                    "INSERT INTO schedules (name, target, cwd, input, spec, paused, created_at,"
                    " updated_at, active_from, last_fire_at, next_fire_at, revision, source, origin,"
                    " secret_keys) VALUES (?,?,?,?,?,0,?,?,?,NULL,?,1,?,?,?)",
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
                )
            else:
                c.execute(
                    "UPDATE schedules SET target = ?, cwd = ?, input = ?, spec = ?, updated_at = ?,"
                    " active_from = ?, next_fire_at = CASE WHEN paused THEN NULL ELSE ? END,"
                    " revision = revision + 1, source = ?, origin = ?, secret_keys = ?"
                    " WHERE name = ?",
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

    def set_schedule_paused(
        self, name: str, paused: bool, next_fire_at: datetime | None, now: datetime
    ) -> ScheduleRow:
        """Pause (no fires at all) or resume. A resume takes effect from `now`: fires that fell
        in the pause are not missed fires, they are not fires."""
        now_us = to_us(now)
        with self._write() as c:
            _schedule_row(c, name)  # raises when it does not exist
            if paused:
                c.execute(
                    "UPDATE schedules SET paused = 1, next_fire_at = NULL, updated_at = ?,"
                    " revision = revision + 1 WHERE name = ?",
                    [now_us, name],
                )
            else:
                c.execute(
                    "UPDATE schedules SET paused = 0, next_fire_at = ?, active_from = ?,"
                    " updated_at = ?, revision = revision + 1 WHERE name = ? AND paused = 1",
                    [_us(next_fire_at), now_us, now_us, name],
                )
            return _schedule_row(c, name)

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule and its history. Its runs stay, still naming it."""
        with self._write() as c:
            cur = c.execute("DELETE FROM schedules WHERE name = ?", [name])
            if cur.rowcount == 0:
                raise ScheduleNotFoundError(name)

    def schedule_history(self, name: str, limit: int = 20) -> list[ScheduleEvent]:
        """The most recent `limit` decisions for a schedule, oldest first."""
        rows = self._read(
            f"SELECT * FROM (SELECT {_HISTORY_COLUMNS}, h.seq FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id WHERE h.schedule = ?"
            " ORDER BY h.seq DESC LIMIT ?) ORDER BY seq",
            [name, limit],
        )
        return [_history_from_row(r) for r in rows]

    def last_schedule_events(self) -> dict[str, ScheduleEvent]:
        """Each schedule's latest history row (for `schedule ls`), with its run's status."""
        rows = self._read(
            f"SELECT {_HISTORY_COLUMNS} FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id"
            # One seek per schedule into (schedule, seq), not a scan of all history.
            " WHERE h.seq IN (SELECT (SELECT MAX(seq) FROM schedule_history x"
            " WHERE x.schedule = s.name) FROM schedules s)"
        )
        return {r[0]: _history_from_row(r) for r in rows}

    def due_schedules(self, now: datetime) -> list[ScheduleRow]:
        rows = self._read(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE next_fire_at <= ? AND paused = 0"
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
        """Carry out one tick's decisions for a schedule in ONE transaction: create the runs
        (idempotency key per fire), write the history, advance last/next fire.

        Returns None, changing nothing, when the schedule changed since `revision` was read
        (another daemon fired it, an operator paused or redefined it): the caller re-reads.
        Because runs, history and bookkeeping commit together, a crash before the commit
        leaves the fire due (it fires on restart) and a crash after leaves it done; and a run
        whose key already exists is never created again.
        """
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute(
                "SELECT revision, paused FROM schedules WHERE name = ?", [name]
            ).fetchone()
            if row is None or row[0] != revision or row[1]:
                return None
            outcomes = [_fire_plan(c, name, plan, overlap, now_us) for plan in plans]
            c.execute(
                "UPDATE schedules SET last_fire_at = ?, next_fire_at = ?, revision = revision + 1"
                " WHERE name = ?",
                [_us(last_fire_at), _us(next_fire_at), name],
            )
            # Keep the newest HISTORY_KEEP rows: a 15-minute schedule adds 35,000 a year.
            c.execute(
                "DELETE FROM schedule_history WHERE schedule = ? AND seq < (SELECT seq FROM"
                " schedule_history WHERE schedule = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                [name, name, HISTORY_KEEP - 1],
            )
            return outcomes

    def trigger_schedule(
        self, name: str, plan: FirePlan, *, overlap: str, now: datetime
    ) -> FireOutcome:
        """A manual fire (`flowctl schedule trigger`): like a scheduled one, under the same
        overlap policy, but it does not move last/next fire."""
        with self._write() as c:
            _schedule_row(c, name)
            return _fire_plan(c, name, plan, overlap, to_us(now))


HISTORY_KEEP = 1000  # history rows kept per schedule


def _add_history(
    c: sqlite3.Connection,
    name: str,
    fire_at: datetime | None,
    action: str,
    run_id: str | None,
    now_us: int,
    detail: str | None,
) -> None:
    c.execute(
        "INSERT INTO schedule_history (schedule, fire_at, action, run_id, at, detail)"
        " VALUES (?,?,?,?,?,?)",
        [name, _us(fire_at), action, run_id, now_us, detail],
    )


def _fire_plan(
    c: sqlite3.Connection, name: str, plan: FirePlan, overlap: str, now_us: int
) -> FireOutcome:
    """Apply one fire decision inside the caller's transaction, under the overlap policy.

    overlap=queue: the new run is created `queued` with run_at NULL ("held"); the
    transaction that ends the schedule's running run releases the oldest held one
    (_release_held), so held runs start one after another, in fire order.
    """
    if plan.run is None:
        _add_history(c, name, plan.fire_at, plan.action, None, now_us, plan.detail)
        return FireOutcome(plan.fire_at, plan.action, None, False, plan.detail)
    new = plan.run
    if new.key is not None:
        row = c.execute(f"SELECT run_id FROM {_RUNS_BY_KEY} WHERE key = ?", [new.key]).fetchone()
        if row is not None:
            return FireOutcome(plan.fire_at, "duplicate", row[0], False, "already fired")
    if overlap == "queue":
        _release_next(c, name, now_us, after=None)  # self-heal: never hold behind nothing
    active = c.execute(
        f"SELECT run_id, status FROM runs WHERE {_RUNNING_OF_SCHEDULE}"
        " ORDER BY created_at DESC LIMIT 1",
        [name],
    ).fetchone()
    detail = plan.detail
    if active is not None and overlap == "skip":
        why = f"run {active[0]} is still {active[1]}"
        if plan.action == "manual":
            why = f"manual trigger: {why}"
        _add_history(c, name, plan.fire_at, "skipped-overlap", None, now_us, why)
        return FireOutcome(plan.fire_at, "skipped-overlap", None, False, why)
    run, created = _insert_run(c, new, now_us)
    action = plan.action
    if active is not None and overlap == "queue":
        c.execute("UPDATE runs SET run_at = NULL WHERE run_id = ?", [run.run_id])
        _add_event(c, run.run_id, now_us, "held", {"schedule": name, "behind": active[0]})
        held = f"held until run {active[0]} ends"
        detail = f"{detail}; {held}" if detail else held
        if action == "fired":
            action = "queued-overlap"
    _add_history(c, name, plan.fire_at, action, run.run_id, now_us, detail)
    return FireOutcome(plan.fire_at, action, run.run_id, created, detail)
