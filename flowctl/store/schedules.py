"""Schedules: definitions, fires (each in the transaction that creates its runs, under a
revision compare-and-set), history.

The calendar (which instants fire) is computed by flowctl.schedule; the store only
records decisions, each fire in the same transaction as the run it creates.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flowctl.errors import ScheduleError, ScheduleNotFoundError
from flowctl.model import RunStatus, from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.creating import insert_run
from flowctl.store.endings import RUNNING_OF_SCHEDULE, release_next
from flowctl.store.mapping import _dt, _loads, _us
from flowctl.store.records import (
    FireOutcome,
    FirePlan,
    NewSchedule,
    ScheduleEvent,
    ScheduleRow,
    dumps,
)
from flowctl.store.rows import add_event
from flowctl.store.sql import Row, Tx
from flowctl.store.values import SCHEDULE_INPUT, Values

HISTORY_KEEP = 1000  # history rows kept per schedule

_SCHEDULE_COLUMNS = (
    "name, target, cwd, input, spec, paused, created_at, updated_at, active_from, last_fire_at,"
    " next_fire_at, revision, source, origin, secret_keys"
)
_HISTORY_COLUMNS = "h.schedule, h.fire_at, h.action, h.run_id, h.at, h.detail, r.status"


class Schedules(StoreCore):
    """Schedule definitions, fires and history."""

    def add_schedule(
        self, new: NewSchedule, now: datetime, *, replace: bool = False
    ) -> ScheduleRow:
        """Insert a schedule, or with `replace` redefine an existing one.

        A redefinition keeps the name's history, creation time, pause state and last fire,
        and takes effect from `now` (active_from): it never backfills fires of the old
        definition."""
        values = self.values
        return self._write(lambda tx: _add_schedule(tx, values, new, to_us(now), replace))

    def get_schedule(self, name: str) -> ScheduleRow:
        with self.db.reading() as tx:
            return _schedule_row(tx, self.values, name)

    def list_schedules(self) -> list[ScheduleRow]:
        rows = self._read(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules ORDER BY name")
        return [_schedule_from_row(r, self.values) for r in rows]

    def set_schedule_paused(
        self, name: str, paused: bool, next_fire_at: datetime | None, now: datetime
    ) -> ScheduleRow:
        """Pause (no fires at all) or resume. A resume takes effect from `now`: fires that
        fell in the pause are not missed fires, they are not fires."""
        now_us = to_us(now)

        def write(tx: Tx) -> ScheduleRow:
            _schedule_row(tx, self.values, name, lock=True)  # raises when it does not exist
            if paused:
                tx.execute(
                    "UPDATE schedules SET paused = 1, next_fire_at = NULL, updated_at = ?,"
                    " revision = revision + 1 WHERE name = ?",
                    [now_us, name],
                )
            else:
                tx.execute(
                    "UPDATE schedules SET paused = 0, next_fire_at = ?, active_from = ?,"
                    " updated_at = ?, revision = revision + 1 WHERE name = ? AND paused = 1",
                    [_us(next_fire_at), now_us, now_us, name],
                )
            return _schedule_row(tx, self.values, name)

        return self._write(write)

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule and its history. Its runs stay, still naming it."""

        def write(tx: Tx) -> None:
            if tx.execute("DELETE FROM schedules WHERE name = ?", [name]).rowcount == 0:
                raise ScheduleNotFoundError(name)

        self._write(write)

    def schedule_history(self, name: str, limit: int = 20) -> list[ScheduleEvent]:
        """The most recent `limit` decisions for a schedule, oldest first."""
        rows = self._read(
            "SELECT schedule, fire_at, action, run_id, at, detail, status FROM"
            f" (SELECT {_HISTORY_COLUMNS}, h.seq FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id WHERE h.schedule = ?"
            " ORDER BY h.seq DESC LIMIT ?) AS t ORDER BY seq",
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
        return [_schedule_from_row(r, self.values) for r in rows]

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
        Runs, history and bookkeeping commit together, so a crash before the commit leaves
        the fire due (it fires on restart) and a crash after leaves it done."""
        now_us, values = to_us(now), self.values

        def write(tx: Tx) -> list[FireOutcome] | None:
            row = tx.one(
                "SELECT revision, paused FROM schedules WHERE name = ?{for_update}", [name]
            )
            if row is None or row[0] != revision or row[1]:
                return None
            outcomes = [_fire_plan(tx, values, name, plan, overlap, now_us) for plan in plans]
            tx.execute(
                "UPDATE schedules SET last_fire_at = ?, next_fire_at = ?, revision = revision + 1"
                " WHERE name = ?",
                [_us(last_fire_at), _us(next_fire_at), name],
            )
            # Keep the newest HISTORY_KEEP rows: a 15-minute schedule adds 35,000 a year.
            tx.execute(
                "DELETE FROM schedule_history WHERE schedule = ? AND seq < (SELECT seq FROM"
                " schedule_history WHERE schedule = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                [name, name, HISTORY_KEEP - 1],
            )
            return outcomes

        return self._write(write)

    def trigger_schedule(
        self, name: str, plan: FirePlan, *, overlap: str, now: datetime
    ) -> FireOutcome:
        """A manual fire (`flowctl schedule trigger`): like a scheduled one, under the same
        overlap policy, but it does not move last/next fire."""
        values = self.values

        def write(tx: Tx) -> FireOutcome:
            _schedule_row(tx, self.values, name, lock=True)
            return _fire_plan(tx, values, name, plan, overlap, to_us(now))

        return self._write(write)


def _add_schedule(
    tx: Tx, values: Values, new: NewSchedule, now_us: int, replace: bool
) -> ScheduleRow:
    exists = ScheduleError(
        f"schedule {new.name!r} already exists: use --replace to redefine it,"
        " or choose another name"
    )
    row = tx.one("SELECT paused FROM schedules WHERE name = ?{for_update}", [new.name])
    if row is not None and not replace:
        raise exists
    definition = [
        new.target,
        new.cwd,
        values.seal(dumps(new.input, "the schedule's input"), SCHEDULE_INPUT),
        new.spec,
        now_us,
        now_us,
        _us(new.next_fire_at),
        new.source,
        new.origin,
        _secret_keys_json(new.secret_keys),
    ]
    if row is None:
        inserted = tx.execute(
            "INSERT INTO schedules (target, cwd, input, spec, created_at, updated_at,"
            " active_from, next_fire_at, source, origin, secret_keys, name, paused,"
            " last_fire_at, revision) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,0,NULL,1)"
            " ON CONFLICT (name) DO NOTHING",
            [*definition[:4], now_us, *definition[4:], new.name],
        ).rowcount
        if inserted == 0:  # added by a concurrent writer since our read
            raise exists
    else:
        tx.execute(
            "UPDATE schedules SET target = ?, cwd = ?, input = ?, spec = ?, updated_at = ?,"
            " active_from = ?, next_fire_at = CASE WHEN paused = 1 THEN NULL ELSE ? END,"
            " source = ?, origin = ?, secret_keys = ?, revision = revision + 1 WHERE name = ?",
            [*definition, new.name],
        )
    return _schedule_row(tx, values, new.name)


def _add_history(
    tx: Tx,
    name: str,
    fire_at: datetime | None,
    action: str,
    run_id: str | None,
    now_us: int,
    detail: str | None,
) -> None:
    tx.execute(
        "INSERT INTO schedule_history (schedule, fire_at, action, run_id, at, detail)"
        " VALUES (?,?,?,?,?,?)",
        [name, _us(fire_at), action, run_id, now_us, detail],
    )


def _fire_plan(
    tx: Tx, values: Values, name: str, plan: FirePlan, overlap: str, now_us: int
) -> FireOutcome:
    """Apply one fire decision inside the caller's transaction, under the overlap policy.

    overlap=queue: the new run is created `queued` with run_at NULL ("held"); the
    transaction that ends the schedule's running run releases the oldest held one
    (endings.release_held), so held runs start one after another, in fire order."""
    if plan.run is None:
        _add_history(tx, name, plan.fire_at, plan.action, None, now_us, plan.detail)
        return FireOutcome(plan.fire_at, plan.action, None, False, plan.detail)
    new = plan.run
    if new.key is not None:
        row = tx.one("SELECT run_id FROM {runs_by_key} WHERE key = ?", [new.key])
        if row is not None:
            return FireOutcome(plan.fire_at, "duplicate", row[0], False, "already fired")
    if overlap == "queue":
        release_next(tx, name, now_us, after=None)  # self-heal: never hold behind nothing
    active = tx.one(
        f"SELECT run_id, status FROM runs WHERE {RUNNING_OF_SCHEDULE}"
        " ORDER BY created_at DESC LIMIT 1",
        [name],
    )
    detail = plan.detail
    if active is not None and overlap == "skip":
        why = f"run {active[0]} is still {active[1]}"
        if plan.action == "manual":
            why = f"manual trigger: {why}"
        _add_history(tx, name, plan.fire_at, "skipped-overlap", None, now_us, why)
        return FireOutcome(plan.fire_at, "skipped-overlap", None, False, why)
    run, created = insert_run(tx, values, new, now_us)
    action = plan.action
    if active is not None and overlap == "queue":
        tx.execute("UPDATE runs SET run_at = NULL WHERE run_id = ?", [run.run_id])
        add_event(tx, run.run_id, now_us, "held", {"schedule": name, "behind": active[0]})
        held = f"held until run {active[0]} ends"
        detail = f"{detail}; {held}" if detail else held
        if action == "fired":
            action = "queued-overlap"
    _add_history(tx, name, plan.fire_at, action, run.run_id, now_us, detail)
    return FireOutcome(plan.fire_at, action, run.run_id, created, detail)


def _schedule_from_row(r: Row, values: Values) -> ScheduleRow:
    return ScheduleRow(
        name=r[0],
        target=r[1],
        cwd=r[2],
        input=values.loads(r[3], SCHEDULE_INPUT),
        spec=r[4],
        paused=bool(r[5]),
        created_at=from_us(r[6]),
        updated_at=from_us(r[7]),
        active_from=from_us(r[8]),
        last_fire_at=_dt(r[9]),
        next_fire_at=_dt(r[10]),
        revision=r[11],
        source=r[12],
        origin=r[13],
        secret_keys=tuple(_loads(r[14]) or ()),
    )


def _secret_keys_json(keys: tuple[str, ...]) -> str | None:
    """The secret_keys column: a sorted JSON list, NULL for none (as for runs)."""
    return dumps(sorted(keys)) if keys else None


def _schedule_row(tx: Tx, values: Values, name: str, *, lock: bool = False) -> ScheduleRow:
    sql = f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE name = ?"
    row = tx.one(sql + "{for_update}" if lock else sql, [name])
    if row is None:
        raise ScheduleNotFoundError(name)
    return _schedule_from_row(row, values)


def _history_from_row(r: Row) -> ScheduleEvent:
    return ScheduleEvent(
        schedule=r[0],
        fire_at=_dt(r[1]),
        action=r[2],
        run_id=r[3],
        at=from_us(r[4]),
        detail=r[5],
        run_status=None if r[6] is None else RunStatus(r[6]),
    )
