"""Transitions several jobs apply inside their own transaction: insert a run, fail an
attempt, park a paused run, end a run; and a schedule fire's pieces."""

from __future__ import annotations

from typing import Any

from flowctl.model import (
    Run,
    RunStatus,
    from_us,
    to_us,
)
from flowctl.store.postgres.connection import PostgresConnection
from flowctl.store.postgres.notifications import _record_ending
from flowctl.store.postgres.rows import (
    _CLEARED,
    _RUN_COLUMNS,
    _RUNNING_OF_SCHEDULE,
    Conn,
    _add_event,
    _add_events,
    _add_history,
    _dt,
    _event,
    _first_line,
    _load_run,
    _loads,
    _run_from_row,
    _us,
    _wake_parent,
)
from flowctl.store.records import (
    FireOutcome,
    FirePlan,
    NewRun,
    dumps,
)
from flowctl.transitions import (
    Applied,
    error_kind,
    next_attempt,
    parked_run_at,
    pause,
)


class Transitions(PostgresConnection):
    """The transitions shared by claims, worker writes, operator actions and fires."""

    def _insert_run(self, c: Conn, new: NewRun, now_us: int) -> tuple[Run, bool]:
        """create_run inside the caller's transaction. A key taken by a concurrent writer
        is found, not an error: ON CONFLICT waits for it and returns its run."""
        start_at = from_us(now_us) if new.run_at is None else new.run_at
        run_at = to_us(parked_run_at(start_at, deadline=new.deadline) or start_at)
        if new.key is not None:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = %s", [new.key]).fetchone()
            if row is not None:
                return _run_from_row(row), False
        inserted = c.execute(
            "INSERT INTO runs (run_id, workflow, target, kind, source, source_hash, source_path,"
            " cwd, input, status, run_at, created_at, max_attempts, backoff, deadline,"
            " timeout_us, key, parent_run_id, schedule, scheduled_at, secret_keys, notify)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s::jsonb,%s,%s,%s,%s,%s::jsonb,%s,%s,%s,%s,%s,%s,"
            "%s::jsonb,%s::jsonb) ON CONFLICT (key) DO NOTHING",
            [
                new.run_id,
                new.workflow,
                new.target,
                new.kind,
                new.source,
                new.source_hash,
                new.source_path,
                new.cwd,
                dumps(new.input, "the input"),
                str(RunStatus.QUEUED),
                run_at,
                now_us,
                new.max_attempts,
                None if new.backoff is None else dumps(new.backoff),
                _us(new.deadline),
                None if new.timeout is None else round(new.timeout * 1e6),
                new.key,
                new.parent_run_id,
                new.schedule,
                _us(new.scheduled_at),
                dumps(sorted(new.secret_keys)) if new.secret_keys else None,
                None if new.notify is None else dumps(new.notify, "the notify override"),
            ],
        ).rowcount
        if inserted == 0:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = %s", [new.key]).fetchone()
            return _run_from_row(row), False
        data: dict[str, Any] = {"attempt": 1}
        if run_at > now_us:
            data["run_at"] = from_us(run_at).isoformat(timespec="microseconds")
        if new.parent_run_id:
            data["parent"] = new.parent_run_id
        if new.schedule:
            data["schedule"] = new.schedule
        _add_event(c, new.run_id, now_us, "created", data)
        return _load_run(c, new.run_id, lock=False), True

    def _fail(
        self,
        c: Conn,
        run: Run,
        error: dict[str, Any],
        now_us: int,
        *,
        retry_at: int | None = None,
        timeline_extra: dict[str, Any] | None = None,
    ) -> Applied:
        """Apply next_attempt(): queue the next attempt, or dead-letter the run."""
        verdict = next_attempt(run, error, from_us(now_us), retry_at=_dt(retry_at))
        error = verdict.error
        kind = error_kind(error)
        data = {"attempt": run.attempt, "kind": str(kind), "error": _first_line(error)}
        data.update(timeline_extra or {})
        events = [_event(run.run_id, now_us, kind.label, data)]
        if verdict.retry_at is not None:
            at = to_us(verdict.retry_at)
            if verdict.spends:
                # A new attempt starts from the first recorded step error: checkpoints
                # before it stand. The same attempt again (it did not load) keeps all.
                c.execute(
                    "DELETE FROM journal WHERE run_id = %s AND call_index >= (SELECT"
                    " MIN(call_index) FROM journal WHERE run_id = %s AND state = 'error')",
                    [run.run_id, run.run_id],
                )
            c.execute(
                "UPDATE runs SET status = 'queued', run_at = %s, attempt = attempt + %s,"
                " error = %s::jsonb, exec_spent_us = CASE WHEN %s THEN 0 ELSE exec_spent_us"
                " END, lease_owner = NULL, lease_until = NULL,"
                f" solo = 0, {_CLEARED} WHERE run_id = %s",
                [at, int(verdict.spends), dumps(error), verdict.spends, run.run_id],
            )
            events.append(
                _event(
                    run.run_id,
                    now_us,
                    "retry scheduled",
                    {
                        "attempt": run.attempt + int(verdict.spends),
                        "at": from_us(at).isoformat(timespec="microseconds"),
                    },
                )
            )
            _add_events(c, events)
            if run.pause_requested:
                return self._park_paused(c, _load_run(c, run.run_id), RunStatus.QUEUED, at, now_us)
            return Applied(RunStatus.QUEUED, from_us(at))
        _add_events(c, events)
        self._end(c, run, RunStatus.DEAD, error, now_us)
        return Applied(RunStatus.DEAD, None)

    def _park_paused(
        self,
        c: Conn,
        run: Run,
        status: RunStatus,
        at_us: int | None,
        now_us: int,
        *,
        by: str | None = None,
    ) -> Applied:
        """Park `run` paused inside the caller's transaction: `status` and `at_us` are what
        resume gives back; meanwhile run_at is its deadline (for the deadline check only)."""
        parked = pause(status, _dt(at_us), run.deadline)
        if by is None:
            asked = c.execute(
                "SELECT data FROM timeline WHERE run_id = %s AND type = 'pause requested'"
                " ORDER BY seq DESC LIMIT 1",
                [run.run_id],
            ).fetchone()
            by = (_loads(asked[0]) or {}).get("by") if asked else None
        c.execute(
            "UPDATE runs SET status = 'paused', paused_status = %s, paused_run_at = %s,"
            " run_at = %s, pause_requested = 0, lease_owner = NULL, lease_until = NULL,"
            f" solo = 0, {_CLEARED} WHERE run_id = %s",
            [str(parked.paused_status), _us(parked.paused_run_at), _us(parked.run_at), run.run_id],
        )
        data: dict[str, Any] = {"by": by, "was": str(status)}
        if parked.paused_run_at is not None:
            data["due"] = from_us(to_us(parked.paused_run_at)).isoformat(timespec="microseconds")
        _add_event(c, run.run_id, now_us, "paused", data)
        return Applied(RunStatus.PAUSED, parked.run_at)

    def _end(
        self,
        c: Conn,
        run: Run,
        status: RunStatus,
        error: dict[str, Any] | None,
        now_us: int,
    ) -> None:
        c.execute(
            "UPDATE runs SET status = %s, error = %s::jsonb, finished_at = %s, run_at = NULL,"
            " lease_owner = NULL, lease_until = NULL, pause_requested = 0, paused_status = NULL,"
            f" paused_run_at = NULL, solo = 0, {_CLEARED} WHERE run_id = %s",
            [str(status), None if error is None else dumps(error), now_us, run.run_id],
        )
        label = "dead-lettered" if status is RunStatus.DEAD else str(status)
        data = {} if error is None else {"kind": error.get("kind"), "error": _first_line(error)}
        _add_event(c, run.run_id, now_us, label, data)
        _record_ending(c, run.run_id, status, None if error is None else error.get("kind"), now_us)
        _wake_parent(c, run.run_id, now_us)
        _release_held(c, run.run_id, now_us)


def _fire_plan(
    store: Transitions, c: Conn, name: str, plan: FirePlan, overlap: str, now_us: int
) -> FireOutcome:
    """Apply one fire decision inside the caller's transaction, under the overlap policy
    (see the SQLite store's _fire_plan)."""
    if plan.run is None:
        _add_history(c, name, plan.fire_at, plan.action, None, now_us, plan.detail)
        return FireOutcome(plan.fire_at, plan.action, None, False, plan.detail)
    new = plan.run
    if new.key is not None:
        row = c.execute("SELECT run_id FROM runs WHERE key = %s", [new.key]).fetchone()
        if row is not None:
            return FireOutcome(plan.fire_at, "duplicate", row[0], False, "already fired")
    if overlap == "queue":
        _release_next(c, name, now_us, after=None)
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
    run, created = store._insert_run(c, new, now_us)
    action = plan.action
    if active is not None and overlap == "queue":
        c.execute("UPDATE runs SET run_at = NULL WHERE run_id = %s", [run.run_id])
        _add_event(c, run.run_id, now_us, "held", {"schedule": name, "behind": active[0]})
        held = f"held until run {active[0]} ends"
        detail = f"{detail}; {held}" if detail else held
        if action == "fired":
            action = "queued-overlap"
    _add_history(c, name, plan.fire_at, action, run.run_id, now_us, detail)
    return FireOutcome(plan.fire_at, action, run.run_id, created, detail)


def _release_next(c: Conn, schedule: str, now_us: int, after: str | None) -> None:
    """Make the oldest held run of `schedule` due now, unless one of its runs still runs."""
    if c.execute(f"SELECT 1 FROM runs WHERE {_RUNNING_OF_SCHEDULE} LIMIT 1", [schedule]).fetchone():
        return
    row = c.execute(
        "SELECT run_id FROM runs WHERE schedule = %s AND status = 'queued' AND run_at IS NULL"
        " ORDER BY scheduled_at, created_at, run_id LIMIT 1 FOR UPDATE",
        [schedule],
    ).fetchone()
    if row is None:
        return
    c.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", [now_us, row[0]])
    data = {"schedule": schedule, **({"after": after} if after else {})}
    _add_event(c, row[0], now_us, "released", data)


def _release_held(c: Conn, run_id: str, now_us: int) -> None:
    """A run ended: if it belongs to a schedule with held runs (overlap=queue), start the next,
    in the same transaction as the terminal transition."""
    row = c.execute("SELECT schedule FROM runs WHERE run_id = %s", [run_id]).fetchone()
    if row is not None and row[0] is not None:
        # The schedule's row lock, which a fire holds from its start: a fire in flight that
        # saw this run active and holds its new run behind it commits first, so the held
        # run is seen and released here (else both commit and the held run waits for the
        # next fire). A fire after this reads this run as ended and holds nothing.
        c.execute("SELECT 1 FROM schedules WHERE name = %s FOR UPDATE", [row[0]])
        _release_next(c, row[0], now_us, after=run_id)
