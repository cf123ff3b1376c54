"""Why isn't this run running? One plain answer, decided by a pure function.

`explain(facts, now)` picks the one reason that applies from facts the caller read from
the store (`ops.why_run` gathers them); it does no I/O, so every reason is unit-tested with
a FakeClock. The reasons, in the order they are tried:

    completed, cancelled, dead                      the run has ended
    deadline_passed                                 past its deadline, not yet dead-lettered
    cancel_requested, pause_requested,              running, with something pending on it
    lease_owner_gone, lease_expired, running
    paused                                          an operator paused it
    held, sleeping, waiting_signal, waiting_child,  parked until a time or an event
    retry_step, retry_load, retry_run, scheduled
    no_daemon, queued_no_slot, due                  due now, and who will claim it

A parked run's answer says too when no daemon runs on the database, since nothing will
wake it then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flowctl.durations import format_duration
from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus, iso, local_text
from flowctl.transitions import load_failures

REASONS = (
    "completed",
    "cancelled",
    "dead",
    "deadline_passed",
    "cancel_requested",
    "pause_requested",
    "lease_owner_gone",
    "lease_expired",
    "running",
    "paused",
    "held",
    "sleeping",
    "waiting_signal",
    "waiting_child",
    "retry_step",
    "retry_load",
    "retry_run",
    "scheduled",
    "no_daemon",
    "queued_no_slot",
    "due",
)


@dataclass(frozen=True)
class DaemonFact:
    """One registered daemon: whether its process is alive, its slots and the runs it holds."""

    owner: str
    host: str
    pid: int
    alive: bool
    concurrency: int
    held: int


@dataclass(frozen=True)
class OperatorEvent:
    """When an operator did something to the run (pause, cancel request) and who."""

    at: datetime
    by: str | None


@dataclass(frozen=True)
class WhyFacts:
    """Everything `explain` looks at, read from the store in one go."""

    run: Run
    pending: JournalEntry | None = None  # the call it is parked on: pending or retrying
    last_checkpoint: JournalEntry | None = None  # the newest resolved journal row
    daemons: tuple[DaemonFact, ...] = ()
    daemon_last_seen: datetime | None = None  # when a daemon last ran, if none runs now
    due_ahead: int = 0  # due runs the claim order puts before this one
    lease_owner_gone: bool = False  # the lease owner is provably dead (same host, pid gone)
    cancel_requested: OperatorEvent | None = None
    pause_requested: OperatorEvent | None = None
    paused: OperatorEvent | None = None
    paused_wake: datetime | None = None  # a paused run's wake time (kept while it is paused)
    child: Run | None = None  # the child run a waiting run waits for
    buffered_signal: bool = False  # a signal it waits for is buffered already
    db: str = ""


@dataclass(frozen=True)
class Why:
    run_id: str
    status: RunStatus
    reason: str
    message: str
    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": str(self.status),
            "reason": self.reason,
            "message": self.message,
            **self.facts,
        }


def when(at: datetime | None, now: datetime) -> str:
    """`2026-03-29 10:00:00 CEST (in 2h00m)`: local time with the zone, as tables show it
    (model.local_text), and how far off. --json carries the instant as ISO-8601 UTC."""
    if at is None:
        return "-"
    delta = at - now
    rel = (
        f"in {format_duration(delta)}"
        if delta.total_seconds() > 0
        else "now"
        if delta.total_seconds() == 0
        else f"{format_duration(-delta)} ago"
    )
    return f"{local_text(at)} ({rel})"


def error_line(error: dict[str, Any] | None) -> str:
    if not error:
        return "an unrecorded error"
    msg = str(error.get("message") or "").strip().splitlines()
    return f"{error.get('type', 'Error')}: {msg[0]}" if msg else str(error.get("type", "Error"))


def _by(event: OperatorEvent) -> str:
    return f" by {event.by}" if event.by else ""


def _daemon_facts(facts: WhyFacts) -> dict[str, Any]:
    alive = [d for d in facts.daemons if d.alive]
    return {
        "running": bool(alive),
        "daemons": [
            {"owner": d.owner, "pid": d.pid, "host": d.host, "slots": d.concurrency, "held": d.held}
            for d in alive
        ],
        "last_seen": iso(facts.daemon_last_seen) if not alive else None,
        "db": facts.db,
    }


def _no_daemon_text(facts: WhyFacts, now: datetime) -> str:
    last = (
        f"; one last ran at {when(facts.daemon_last_seen, now)}"
        if facts.daemon_last_seen is not None
        else "; none has run on it yet"
    )
    return f"no daemon is running on this database{last}: start one with `flowctl daemon`"


def explain(facts: WhyFacts, now: datetime) -> Why:
    """The one reason that applies to the run now, as a sentence and as facts."""
    run = facts.run
    daemon = _daemon_facts(facts)
    alive = [d for d in facts.daemons if d.alive]
    base: dict[str, Any] = {"deadline": iso(run.deadline)} if run.deadline else {}

    def out(reason: str, message: str, **extra: Any) -> Why:
        return Why(run.run_id, run.status, reason, message, {**base, **extra})

    # -- ended ----------------------------------------------------------------
    if run.status is RunStatus.COMPLETED:
        return out(
            "completed",
            f"completed at {when(run.finished_at, now)}; nothing left to run",
            finished_at=iso(run.finished_at),
        )
    if run.status is RunStatus.CANCELLED:
        by = (run.error or {}).get("by")
        return out(
            "cancelled",
            f"cancelled at {when(run.finished_at, now)}{f' by {by}' if by else ''}"
            f"; `flowctl redrive {run.run_id}` queues it again",
            finished_at=iso(run.finished_at),
            by=by,
            redrive=f"flowctl redrive {run.run_id}",
        )
    if run.status is RunStatus.DEAD:
        err = error_line(run.error)
        why_final = (run.error or {}).get("dead_reason")
        tail = f" ({why_final})" if why_final else ""
        return out(
            "dead",
            f"dead since {when(run.finished_at, now)} with {err}{tail};"
            f" `flowctl redrive {run.run_id}` gives it a fresh attempt budget",
            error=run.error and {k: v for k, v in run.error.items() if k != "traceback"},
            finished_at=iso(run.finished_at),
            redrive=f"flowctl redrive {run.run_id}",
        )

    # -- past its deadline ----------------------------------------------------------
    if run.deadline is not None and run.deadline <= now:
        actor = (
            "the daemon dead-letters it at its next claim"
            if alive
            else "the next daemon to run on this database dead-letters it"
        )
        if run.status is RunStatus.RUNNING and not facts.lease_owner_gone:
            doing = _doing(facts.last_checkpoint, run.current_step)
            actor = (
                f"{doing} still runs in {_owner_text(run, facts)}, told at its heartbeat;"
                " the run ends dead when the handler stops"
            )
        return out(
            "deadline_passed",
            f"deadline passed at {when(run.deadline, now)}; {actor}",
            daemon=daemon,
        )

    # -- running ----------------------------------------------------------------------
    if run.status is RunStatus.RUNNING:
        owner = _owner_text(run, facts)
        doing = _doing(facts.last_checkpoint, run.current_step)
        lease = {
            "lease_owner": run.lease_owner,
            "lease_until": iso(run.lease_until),
            "step": run.current_step,
        }
        if facts.cancel_requested is not None or run.cancel_requested:
            ev = facts.cancel_requested
            since = f" at {when(ev.at, now)}{_by(ev)}" if ev else ""
            return out(
                "cancel_requested",
                f"cancel requested{since} while {doing} still runs in {owner}; it ends"
                " cancelled when the handler stops (a Python step is not interrupted)",
                cancel_requested_by=ev.by if ev else None,
                cancel_requested_at=iso(ev.at) if ev else None,
                **lease,
            )
        if facts.pause_requested is not None or run.pause_requested:
            ev = facts.pause_requested or OperatorEvent(now, None)
            return out(
                "pause_requested",
                f"pause requested at {when(ev.at, now)}{_by(ev)}; {doing} still runs in"
                f" {owner}, and the run parks as paused at its next durable call",
                **lease,
            )
        if facts.lease_owner_gone:
            return out(
                "lease_owner_gone",
                f"its lease is held by {owner}, a process that is gone; "
                + ("a daemon reclaims it at once" if alive else _no_daemon_text(facts, now)),
                daemon=daemon,
                **lease,
            )
        if run.lease_until is not None and run.lease_until <= now:
            return out(
                "lease_expired",
                f"its lease held by {owner} expired at {when(run.lease_until, now)}; "
                + ("a daemon reclaims it at once" if alive else _no_daemon_text(facts, now)),
                daemon=daemon,
                **lease,
            )
        return out(
            "running",
            f"running: {doing} runs in {owner}, lease until {when(run.lease_until, now)}",
            **lease,
        )

    # -- paused -----------------------------------------------------------------------
    if run.status is RunStatus.PAUSED:
        ev = facts.paused
        since = f" since {when(ev.at, now)}{_by(ev)}" if ev else ""
        wake = facts.paused_wake
        if wake is None:
            then = "resume makes it due at once"
        elif wake <= now:
            then = (
                f"its wake time {when(wake, now)} passed while paused: resume makes it due at once"
            )
        else:
            then = f"resume makes it due at its wake time {when(wake, now)}"
        return out(
            "paused",
            f"paused{since}; it is never claimed while paused ({then};"
            f" `flowctl resume {run.run_id}`)",
            paused_at=iso(ev.at) if ev else None,
            paused_by=ev.by if ev else None,
            wake_at=iso(wake),
            resume=f"flowctl resume {run.run_id}",
        )

    # -- parked until a time or an event ------------------------------------------------
    due = run.run_at is not None and run.run_at <= now
    parked = _parked(facts, now)
    if parked is not None and not due:
        reason, message, extra = parked
        if not alive:
            message += f"; but {_no_daemon_text(facts, now)}"
        return out(reason, message, daemon=daemon, **extra)

    # -- due now ----------------------------------------------------------------------
    since = when(run.run_at, now)
    what = _DUE_WHAT.get(parked[0] if parked else "", str(run.status))
    if not alive:
        return out(
            "no_daemon",
            f"due since {since} ({what}), but {_no_daemon_text(facts, now)}",
            due_at=iso(run.run_at),
            daemon=daemon,
        )
    slots = sum(d.concurrency for d in alive)
    busy = sum(d.held for d in alive)
    if busy >= slots:
        return out(
            "queued_no_slot",
            f"due since {since}, queued behind {facts.due_ahead} run(s): all {slots} worker"
            f" slot(s) of {len(alive)} daemon(s) are busy",
            due_at=iso(run.run_at),
            queued_behind=facts.due_ahead,
            slots=slots,
            busy=busy,
            daemon=daemon,
        )
    return out(
        "due",
        f"due since {since}; a daemon has {slots - busy} free slot(s) and claims it within moments",
        due_at=iso(run.run_at),
        queued_behind=facts.due_ahead,
        slots=slots,
        busy=busy,
        daemon=daemon,
    )


_DUE_WHAT = {
    "sleeping": "its sleep is over",
    "waiting_signal": "its signal wait is over",
    "waiting_child": "its child run ended",
    "retry_step": "a step retry",
    "retry_run": "its next attempt",
    "scheduled": "waiting to start",
}


def _owner_text(run: Run, facts: WhyFacts) -> str:
    owner = run.lease_owner or "an unknown worker"
    for d in facts.daemons:
        if d.owner == run.lease_owner:
            return f"daemon pid {d.pid} on {d.host}"
    parts = owner.split("/")
    if len(parts) >= 2 and parts[1].isdigit():
        return f"worker pid {parts[1]} on {parts[0]}"
    return owner


def _doing(entry: JournalEntry | None, step: str | None) -> str:
    """What a running handler is doing: the step its last heartbeat saw it inside, else
    where its journal ends."""
    if step is not None:
        return f"step {step}"
    if entry is None:
        return "its handler (no checkpoint yet)"
    return f"its handler (after checkpoint #{entry.call_index} {entry.kind} {entry.name!r})"


def _parked(facts: WhyFacts, now: datetime) -> tuple[str, str, dict[str, Any]] | None:
    """What a sleeping, waiting or queued run is parked on: (reason, message, facts)."""
    run = facts.run
    pending = facts.pending
    if run.status is RunStatus.SLEEPING:
        index = f" (sleep #{pending.call_index} {pending.name!r})" if pending else ""
        wake = pending.wake_at if pending and pending.wake_at else run.run_at
        extra: dict[str, Any] = {"wake_at": iso(wake)}
        if pending:
            extra["call_index"] = pending.call_index
        return "sleeping", f"sleeping until {when(wake, now)}{index}", extra
    if run.status is RunStatus.WAITING:
        if pending is not None and pending.kind is CallKind.SIGNAL:
            since = f" since {when(pending.recorded_at, now)}" if pending.recorded_at else ""
            timeout = (
                f", timeout at {when(pending.wake_at, now)}"
                if pending.wake_at
                else ", with no timeout"
            )
            buffered = (
                "; a matching signal is buffered, it is due now" if facts.buffered_signal else ""
            )
            return (
                "waiting_signal",
                f"waiting for signal {pending.name!r}{since}{timeout}"
                f" (call #{pending.call_index}){buffered}",
                {
                    "signal": pending.name,
                    "since": iso(pending.recorded_at),
                    "timeout_at": iso(pending.wake_at),
                    "call_index": pending.call_index,
                },
            )
        child = facts.child
        if child is not None:
            return (
                "waiting_child",
                f"waiting for child run {child.run_id} ({child.workflow}), which is {child.status}",
                {"child_run_id": child.run_id, "child_status": str(child.status)},
            )
        return "waiting_child", "waiting for a child run", {}
    if run.status is RunStatus.QUEUED:
        if run.run_at is None and run.schedule:
            return (
                "held",
                f"queued behind the active run of schedule {run.schedule!r} (overlap=queue)",
                {"schedule": run.schedule},
            )
        if pending is not None and pending.state is EntryState.RETRYING:
            return (
                "retry_step",
                f"queued for a retry of step {pending.name!r} (call #{pending.call_index},"
                f" try {pending.tries + 1}) at {when(pending.wake_at, now)} after"
                f" {error_line(pending.value)}",
                {
                    "retry_at": iso(pending.wake_at),
                    "step": pending.name,
                    "call_index": pending.call_index,
                    "error": error_line(pending.value),
                },
            )
        failures = load_failures(run)
        if failures:
            return (
                "retry_load",
                f"waiting for its workflow to load: tried again at {when(run.run_at, now)},"
                f" no attempt spent ({failures} failure(s) in a row: fix the workflow or"
                f" cancel the run) after {error_line(run.error)}",
                {
                    "retry_at": iso(run.run_at),
                    "load_failures": failures,
                    "error": error_line(run.error),
                },
            )
        if run.attempt > 1:
            return (
                "retry_run",
                f"queued for attempt {run.attempt}/{run.max_attempts} at"
                f" {when(run.run_at, now)} after {error_line(run.error)}",
                {
                    "retry_at": iso(run.run_at),
                    "attempt": run.attempt,
                    "error": error_line(run.error),
                },
            )
        return (
            "scheduled",
            f"queued to start at {when(run.run_at, now)}",
            {"start_at": iso(run.run_at)},
        )
    return None
