"""Operator transitions: start, fork, signal, cancel, redrive, wake, pause, resume. Which
statuses each accepts is flowctl.transitions' (guard); these apply it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import RunNotFoundError
from flowctl.model import Run, RunStatus, from_us, to_us
from flowctl.store.branches import cut_journal
from flowctl.store.core import StoreCore
from flowctl.store.creating import insert_run, insert_runs
from flowctl.store.endings import end, park_paused, release_next
from flowctl.store.mapping import _ENTRY_COLUMNS, _us
from flowctl.store.records import NewRun, dumps
from flowctl.store.rows import CLEARED, add_event, iso_us, load_run
from flowctl.store.sql import Tx
from flowctl.transitions import Action, cancel_error, guard, requested_only, resume


class OperatorWrites(StoreCore):
    """Transitions an operator (CLI, TUI, client, ops) asks for."""

    def create_run(self, new: NewRun, now: datetime) -> tuple[Run, bool]:
        """Insert a queued run. With an idempotency key already used, return that run
        instead. Returns (run, created)."""
        return self._write(lambda tx: insert_run(tx, new, to_us(now)))

    def create_runs(self, news: Sequence[NewRun], now: datetime) -> list[tuple[Run, bool]]:
        """create_run for many runs in one transaction (one fsync): all are queued or none.
        Idempotency keys hold per run, also between runs of the same call."""
        return self._write(lambda tx: insert_runs(tx, news, to_us(now)))

    def fork_run(
        self, new: NewRun, origin: str, upto: int, now: datetime, *, by: str | None = None
    ) -> Run:
        """Create `new` with the journal rows of run `origin` before call index `upto`.

        One transaction: the run, its copied checkpoints and the version markers the origin
        recorded up to the last copied checkpoint appear together or not at all. The origin
        is only read."""
        return self._write(lambda tx: _fork(tx, new, origin, upto, to_us(now), by))

    def request_pause(self, run_id: str, by: str, now: datetime) -> Run:
        """Pause a run: parked at once unless running; a running run is asked to park at its
        next durable call (nothing is interrupted). Pausing it again changes nothing."""
        now_us = to_us(now)

        def write(tx: Tx) -> Run:
            run = load_run(tx, run_id)
            guard(Action.PAUSE, run_id, run.status)
            if not requested_only(Action.PAUSE, run.status):
                park_paused(tx, run, run.status, _us(run.run_at), now_us, by=by)
            elif not run.pause_requested:
                tx.execute("UPDATE runs SET pause_requested = 1 WHERE run_id = ?", [run_id])
                add_event(tx, run_id, now_us, "pause requested", {"by": by})
            return load_run(tx, run_id)

        return self._write(write)

    def resume(self, run_id: str, by: str, now: datetime) -> Run:
        """Give a paused run back its status, due at once if its wake passed meanwhile, else
        at its wake; for a running run, withdraw the pause it was asked for."""
        return self._write(lambda tx: _resume(tx, run_id, by, to_us(now)))

    def send_signal(self, run_id: str, name: str, payload: Any, now: datetime) -> RunStatus:
        """Buffer a signal; a run waiting for a signal becomes due now."""
        now_us = to_us(now)
        text = dumps(payload, "the signal payload")

        def write(tx: Tx) -> RunStatus:
            row = tx.one("SELECT status FROM runs WHERE run_id = ?{for_update}", [run_id])
            if row is None:
                raise RunNotFoundError(run_id)
            status = RunStatus(row[0])
            guard(Action.SIGNAL, run_id, status)
            tx.execute(
                "INSERT INTO signals (run_id, name, payload, sent_at) VALUES (?,?,?,?)",
                [run_id, name, text, now_us],
            )
            tx.execute(
                "UPDATE runs SET run_at = ? WHERE run_id = ? AND status = 'waiting'",
                [now_us, run_id],
            )
            tx.execute(  # paused while waiting: due at once when resumed
                "UPDATE runs SET paused_run_at = ? WHERE run_id = ? AND status = 'paused'"
                " AND paused_status = 'waiting'",
                [now_us, run_id],
            )
            add_event(tx, run_id, now_us, "signal sent", {"name": name})
            return status

        return self._write(write)

    def request_cancel(self, run_id: str, reason: str | None, by: str, now: datetime) -> RunStatus:
        """Cancel at once unless running; a running run gets the request at its next
        heartbeat. Returns the status after the call (cancelled, or running when only
        requested)."""
        now_us = to_us(now)

        def write(tx: Tx) -> RunStatus:
            run = load_run(tx, run_id)
            guard(Action.CANCEL, run_id, run.status)
            tx.execute(
                "UPDATE runs SET cancel_requested = 1, cancel_reason = ? WHERE run_id = ?",
                [reason, run_id],
            )
            if requested_only(Action.CANCEL, run.status):
                data = {"by": by, **({"reason": reason} if reason else {})}
                add_event(tx, run_id, now_us, "cancel requested", data)
                return RunStatus.RUNNING
            end(tx, run, RunStatus.CANCELLED, cancel_error(reason, by), now_us)
            return RunStatus.CANCELLED

        return self._write(write)

    def redrive(self, run_id: str, by: str, now: datetime, *, deadline: datetime | None) -> Run:
        """Put a dead (or cancelled) run back in the queue with a fresh attempt budget,
        under `deadline` (None: none)."""
        return self._write(lambda tx: _redrive(tx, run_id, by, to_us(now), deadline))

    def wake_now(self, run_id: str, by: str, now: datetime) -> Run:
        """End a sleep early (operator action); the recorded wake_at is kept for history."""
        now_us = to_us(now)

        def write(tx: Tx) -> Run:
            run = load_run(tx, run_id)
            guard(Action.WAKE, run_id, run.status)
            tx.execute(
                "UPDATE journal SET state = 'done', resolved_at = ? WHERE run_id = ?"
                " AND kind = 'sleep' AND state = 'pending'",
                [now_us, run_id],
            )
            tx.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [now_us, run_id])
            data = {"by": by, "was_due": iso_us(run.run_at)}
            add_event(tx, run_id, now_us, "woken by operator", data)
            return load_run(tx, run_id)

        return self._write(write)


def _fork(tx: Tx, new: NewRun, origin: str, upto: int, now_us: int, by: str | None) -> Run:
    load_run(tx, origin, lock=False)  # raises when it does not exist
    run, _ = insert_run(tx, new, now_us)
    copied = tx.execute(
        f"INSERT INTO journal ({_ENTRY_COLUMNS}) SELECT ?, call_index, kind, name, state,"
        " value, wake_at, recorded_at, resolved_at, tries, duration_us FROM journal"
        " WHERE run_id = ? AND call_index < ?",
        [run.run_id, origin, upto],
    ).rowcount
    # A version marker takes no call index: it belongs to the copied part when it was
    # recorded no later than the last checkpoint copied.
    last = tx.one(
        "SELECT recorded_at FROM journal WHERE run_id = ? AND call_index = ?", [origin, upto - 1]
    )
    if last is not None:
        tx.execute(
            "INSERT INTO versions (run_id, change_id, version, recorded_at) SELECT ?,"
            " change_id, version, recorded_at FROM versions WHERE run_id = ?"
            " AND recorded_at <= ?",
            [run.run_id, origin, last[0]],
        )
    data: dict[str, Any] = {"from_run": origin, "from_index": upto, "checkpoints": copied}
    if by:
        data["by"] = by
    add_event(tx, run.run_id, now_us, "forked", data)
    return run


def _resume(tx: Tx, run_id: str, by: str, now_us: int) -> Run:
    run = load_run(tx, run_id)
    guard(Action.RESUME, run_id, run.status, pause_requested=run.pause_requested)
    if requested_only(Action.RESUME, run.status):
        tx.execute("UPDATE runs SET pause_requested = 0 WHERE run_id = ?", [run_id])
        add_event(tx, run_id, now_us, "resumed", {"by": by, "was": "pause requested"})
        return load_run(tx, run_id)
    back = resume(run, from_us(now_us))
    tx.execute(
        "UPDATE runs SET status = ?, run_at = ?, paused_status = NULL, paused_run_at = NULL"
        " WHERE run_id = ?",
        [str(back.status), _us(back.run_at), run_id],
    )
    data: dict[str, Any] = {"by": by, "status": str(back.status)}
    if back.run_at is not None:
        data["due"] = back.run_at.isoformat(timespec="microseconds")
    add_event(tx, run_id, now_us, "resumed", data)
    if run.schedule is not None and back.run_at is None:
        release_next(tx, run.schedule, now_us, after=None)  # a held run: never stranded
    return load_run(tx, run_id)


def _redrive(tx: Tx, run_id: str, by: str, now_us: int, deadline: datetime | None) -> Run:
    run = load_run(tx, run_id)
    guard(Action.REDRIVE, run_id, run.status)
    # Like a retry, start again at the first step error (a step waiting to retry gets a
    # fresh budget too). Pending sleeps and signal waits are kept: a recorded deadline
    # stands, a redrive is not a restart of the sleep.
    cut_journal(tx, run_id, ("error", "retrying"))
    tx.execute(
        # A cancelled run's error is the cancel itself: it no longer applies once the run
        # is queued again. A dead run keeps its last error until it runs again.
        "UPDATE runs SET error = CASE WHEN status = 'cancelled' THEN NULL ELSE error END,"
        " status = 'queued', run_at = ?, attempt = 1, deadline = ?,"
        " exec_spent_us = 0, finished_at = NULL, cancel_requested = 0, cancel_reason = NULL,"
        f" {CLEARED}, solo = 0, lease_owner = NULL, lease_until = NULL WHERE run_id = ?",
        [now_us, _us(deadline), run_id],
    )
    data: dict[str, Any] = {"by": by, "was": str(run.status)}
    if deadline != run.deadline:  # a new deadline, or none: said in the timeline
        data["deadline"] = iso_us(deadline)
    add_event(tx, run_id, now_us, "redriven", data)
    return load_run(tx, run_id)
