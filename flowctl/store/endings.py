"""Transitions several jobs make inside their own transaction: a failed attempt, a paused
park, a run's end with its outbox row, a waiting parent woken, a held run of a schedule
released, and moves in the run counts. The decisions are flowctl.transitions' (pure);
these apply them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flowctl.model import Run, RunStatus, from_us, to_us
from flowctl.store.branches import cut_journal
from flowctl.store.mapping import _dt, _loads, _us
from flowctl.store.records import dumps
from flowctl.store.rows import CLEARED, add_event, add_events, event, first_line, in_chunks
from flowctl.store.sql import Tx
from flowctl.store.values import ERROR, Values
from flowctl.transitions import Applied, error_kind, next_attempt, pause

_ACTIVE_SQL = "('queued', 'running', 'sleeping', 'waiting', 'paused')"
# A run of a schedule that is active and not held behind another (overlap=queue). A held
# run is queued with run_at NULL, which no claim and no timer wheel ever picks up.
RUNNING_OF_SCHEDULE = (
    f"schedule = ? AND status IN {_ACTIVE_SQL} AND NOT (status = 'queued' AND run_at IS NULL)"
    " AND NOT (status = 'paused' AND paused_status = 'queued' AND paused_run_at IS NULL)"
)

# An ending's row in the notification outbox: (run_id, status, error_kind, created_at, due_at).
NOTIFICATION_INSERT = (
    "INSERT INTO notifications (run_id, status, error_kind, created_at, due_at) VALUES (?,?,?,?,?)"
)
# The same, only when the run has a notify override of its own (Store.leave_untold): the
# same parameters, then the run's id again.
NOTIFICATION_IF_PINNED = (
    "INSERT INTO notifications (run_id, status, error_kind, created_at, due_at)"
    " SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), ?, ? FROM runs"
    " WHERE run_id = ? AND notify IS NOT NULL"
)


def move_counts(tx: Tx, moves: Mapping[tuple[str, str, str], int]) -> None:
    """Move n runs of each (workflow, from status, to status) of `moves` in the run counts,
    one statement a move (a count not there yet is added by a second). The two writes
    that move most runs, a claim (into running) and a completion, count themselves;
    every other status change is counted by the schema's trigger."""
    for (workflow, frm, to), n in moves.items():
        if tx.dialect.counts_appended:  # both counts moved, always
            tx.send("{count_move}", (to, n, n, workflow, frm, to))
            continue
        moved = {r[0] for r in tx.all("{count_move}", (to, n, n, workflow, frm, to))}
        for status, d in ((to, n), (frm, -n)):
            if status not in moved:
                tx.execute("{count_add}", (workflow, status, d))


# Appended count deltas (PostgreSQL) of runs moved from one status to another, by their
# workflows as the rows say: (to, 1), (from, -1) for each run of the ids that follow.
_DELTAS_OF_RUNS = (
    "INSERT INTO run_count_deltas (workflow, status, d) SELECT r.workflow, v.s, v.d * COUNT(*)"
    " FROM runs r CROSS JOIN (VALUES (CAST(? AS TEXT), 1), (CAST(? AS TEXT), -1)) AS v(s, d)"
    " WHERE r.run_id IN ({marks}) GROUP BY r.workflow, v.s, v.d"
)


def move_counts_of(tx: Tx, run_ids: Sequence[str], frm: str, to: str) -> None:
    """move_counts for these runs, all moved from `frm` to `to`: where counts are appended
    deltas (PostgreSQL) one statement sent per chunk, grouped by workflow in the server;
    else their workflows read first."""
    if tx.dialect.counts_appended:
        for chunk, marks in in_chunks(run_ids):
            tx.send(_DELTAS_OF_RUNS.replace("{marks}", marks), [to, frm, *chunk])
        return
    moved: dict[tuple[str, str, str], int] = {}
    for chunk, marks in in_chunks(run_ids):
        for (workflow,) in tx.all(f"SELECT workflow FROM runs WHERE run_id IN ({marks})", chunk):
            moved[(workflow, frm, to)] = moved.get((workflow, frm, to), 0) + 1
    move_counts(tx, moved)


def fail(
    tx: Tx,
    values: Values,
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
    data = {"attempt": run.attempt, "kind": str(kind), "error": shown_line(values, error)}
    data.update(timeline_extra or {})
    events = [event(run.run_id, now_us, kind.label, data)]
    if verdict.retry_at is None:
        add_events(tx, events)
        end(tx, values, run, RunStatus.DEAD, error, now_us)
        return Applied(RunStatus.DEAD, None)
    at = to_us(verdict.retry_at)
    if verdict.spends:
        # A new attempt starts from the first recorded step error: checkpoints before it
        # stand. The same attempt again (its workflow did not load) keeps all.
        cut_journal(tx, run.run_id, ("error",))
    tx.execute(
        "UPDATE runs SET status = 'queued', run_at = ?, attempt = attempt + ?, error = ?,"
        " exec_spent_us = CASE WHEN ? = 1 THEN 0 ELSE exec_spent_us END, lease_owner = NULL,"
        f" lease_until = NULL, solo = 0, {CLEARED} WHERE run_id = ?",
        [
            at,
            int(verdict.spends),
            values.seal(dumps(error), ERROR),
            int(verdict.spends),
            run.run_id,
        ],
    )
    attempt = run.attempt + int(verdict.spends)
    events.append(
        event(
            run.run_id,
            now_us,
            "retry scheduled",
            {"attempt": attempt, "at": from_us(at).isoformat(timespec="microseconds")},
        )
    )
    add_events(tx, events)
    if run.pause_requested:  # it stopped: the requested pause takes effect now
        return park_paused(tx, run, RunStatus.QUEUED, at, now_us)
    return Applied(RunStatus.QUEUED, from_us(at))


def park_paused(
    tx: Tx,
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
    if by is None:  # a requested pause taking effect: who asked for it
        asked = tx.one(
            "SELECT data FROM timeline WHERE run_id = ? AND type = 'pause requested'"
            " ORDER BY seq DESC LIMIT 1",
            [run.run_id],
        )
        by = (_loads(asked[0]) or {}).get("by") if asked else None
    tx.execute(
        "UPDATE runs SET status = 'paused', paused_status = ?, paused_run_at = ?, run_at = ?,"
        " pause_requested = 0, lease_owner = NULL, lease_until = NULL, solo = 0,"
        f" {CLEARED} WHERE run_id = ?",
        [str(parked.paused_status), _us(parked.paused_run_at), _us(parked.run_at), run.run_id],
    )
    data: dict[str, Any] = {"by": by, "was": str(status)}
    if parked.paused_run_at is not None:
        data["due"] = from_us(to_us(parked.paused_run_at)).isoformat(timespec="microseconds")
    add_event(tx, run.run_id, now_us, "paused", data)
    return Applied(RunStatus.PAUSED, parked.run_at)


def end(
    tx: Tx,
    values: Values,
    run: Run,
    status: RunStatus,
    error: dict[str, Any] | None,
    now_us: int,
) -> None:
    """End `run` terminally (dead, cancelled) with its event, its outbox row, its waiting
    parent woken and its schedule's next held run released, all in the caller's
    transaction. A cancel that took effect when the handler stopped names who asked for it."""
    if status is RunStatus.CANCELLED and error is not None and "by" not in error:
        asked = tx.one(
            "SELECT data FROM timeline WHERE run_id = ? AND type = 'cancel requested'"
            " ORDER BY seq DESC LIMIT 1",
            [run.run_id],
        )
        by = (_loads(asked[0]) or {}).get("by") if asked else None
        error = {**error, "by": by} if by else error
    tx.execute(
        "UPDATE runs SET status = ?, error = ?, finished_at = ?, run_at = NULL, lease_owner = NULL,"
        " lease_until = NULL, pause_requested = 0, paused_status = NULL, paused_run_at = NULL,"
        f" solo = 0, {CLEARED} WHERE run_id = ?",
        [
            str(status),
            None if error is None else values.seal(dumps(error), ERROR),
            now_us,
            run.run_id,
        ],
    )
    label = "dead-lettered" if status is RunStatus.DEAD else str(status)
    data = {} if error is None else {"kind": error.get("kind"), "error": shown_line(values, error)}
    add_event(tx, run.run_id, now_us, label, data)
    kind = None if error is None else error.get("kind")
    record_ending(tx, run.run_id, status, kind, now_us)
    wake_parent(tx, run.run_id, now_us)
    release_held(tx, run.run_id, now_us)


def shown_line(values: Values, error: dict[str, Any]) -> str:
    """An error as the timeline names it, in clear: its first line, or with a key (the
    message is sealed in the run's row) its type alone."""
    if values.sealing:
        return first_line({"type": error.get("type", "Error")})
    return first_line(error)


def record_ending(tx: Tx, run_id: str, status: RunStatus, kind: Any, now_us: int) -> None:
    """Put the run's ending in the notification outbox, in the ending's own transaction.

    Every ending is recorded; whether anyone is told is the notifier's decision (the
    daemon's [notify] and the run's pinned override), made when it delivers.
    """
    tx.execute(
        NOTIFICATION_INSERT,
        [run_id, str(status), None if kind is None else str(kind), now_us, now_us],
    )


def wake_parent(tx: Tx, run_id: str, now_us: int) -> None:
    """A child run ended: its waiting parent becomes due (when resumed, if it is paused)."""
    tx.execute(
        "UPDATE runs SET run_at = ? WHERE status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = ?)",
        [now_us, run_id],
    )
    tx.execute(
        "UPDATE runs SET paused_run_at = ? WHERE status = 'paused' AND paused_status = 'waiting'"
        " AND run_id = (SELECT parent_run_id FROM runs WHERE run_id = ?)",
        [now_us, run_id],
    )


def release_next(tx: Tx, schedule: str, now_us: int, after: str | None) -> None:
    """Make the oldest held run of `schedule` due now, unless one of its runs still runs."""
    if tx.one(f"SELECT 1 FROM runs WHERE {RUNNING_OF_SCHEDULE} LIMIT 1", [schedule]):
        return
    row = tx.one(
        "SELECT run_id FROM runs WHERE schedule = ? AND status = 'queued' AND run_at IS NULL"
        " ORDER BY scheduled_at, created_at, run_id LIMIT 1{for_update}",
        [schedule],
    )
    if row is None:
        return
    tx.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [now_us, row[0]])
    data = {"schedule": schedule, **({"after": after} if after else {})}
    add_event(tx, row[0], now_us, "released", data)


def release_held(tx: Tx, run_id: str, now_us: int) -> None:
    """A run ended: if it belongs to a schedule with held runs (overlap=queue), start the
    next. Called in the transaction of every terminal transition, so no held run is ever
    stranded and no two runs of a queue schedule ever overlap."""
    row = tx.one("SELECT schedule FROM runs WHERE run_id = ?", [run_id])
    if row is None or row[0] is None:
        return
    # The schedule's row lock (where rows are locked), which a fire holds from its start:
    # a fire in flight that saw this run active and holds its new run behind it commits
    # first, so the held run is seen and released here. A fire after this reads this run
    # as ended and holds nothing.
    tx.execute("SELECT 1 FROM schedules WHERE name = ?{for_update}", [row[0]])
    release_next(tx, row[0], now_us, after=run_id)
