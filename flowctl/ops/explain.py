"""Why isn't this run running? One plain answer, decided by a pure function.

`explain(facts, now)` picks the one reason that applies from facts the caller read from
the store (`ops.why_run` gathers them); it does no I/O, so every reason is unit-tested with
a FakeClock. The reasons, in the order they are tried:

    completed, cancelled, dead                      the run has ended
    deadline_passed                                 past its deadline, not yet dead-lettered
    cancel_requested, pause_requested,              running, with something pending on it
    resting,                                        a short sleep or retry waited in memory
    suspect_alone, released, suspect_waiting,       recovering: run alone, handed back,
    lease_owner_gone, lease_expired, running        or its lease to be taken over
    paused                                          an operator paused it
    held, held_by_key, waiting_for_limit,           held back by a schedule or flow control
    sleeping, waiting_signal, waiting_child,        parked until a time or an event
    waiting_children,
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
from flowctl.flow.explain import FlowFacts, held_by_key, waiting_for_limit
from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus, iso, local_text
from flowctl.transitions import ISOLATED_AT_ONCE, POISON_CRASHES, load_failures

REASONS = (
    "completed",
    "cancelled",
    "dead",
    "deadline_passed",
    "cancel_requested",
    "pause_requested",
    "resting",
    "suspect_alone",
    "released",
    "suspect_waiting",
    "lease_owner_gone",
    "lease_expired",
    "running",
    "paused",
    "held",
    "held_by_key",
    "waiting_for_limit",
    "sleeping",
    "waiting_signal",
    "waiting_child",
    "waiting_children",
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
    suspects: tuple[int, int] = (0, 0)  # suspects running alone, and due ones waiting
    lease_owner_gone: bool = False  # the lease owner is provably dead (same host, pid gone)
    cancel_requested: OperatorEvent | None = None
    pause_requested: OperatorEvent | None = None
    paused: OperatorEvent | None = None
    paused_wake: datetime | None = None  # a paused run's wake time (kept while it is paused)
    child: Run | None = None  # the child run a waiting run waits for
    children: tuple[Run, ...] = ()  # a waiting run's child runs (ctx.children), oldest first
    buffered_signal: bool = False  # a signal it waits for is buffered already
    flow: FlowFacts | None = None  # what holds it back, if flow control does (issue 37)
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


Answer = tuple[str, dict[str, Any], str]
"""One reason: its name, its facts and its sentence."""


def explain(facts: WhyFacts, now: datetime) -> Why:
    """The one reason that applies to the run now, as a sentence and as facts: the first
    of ended, past its deadline, running, paused, parked and due that applies."""
    run = facts.run
    reason, extra, message = (
        _ended(run, now)
        or _past_deadline(facts, now)
        or _running(facts, now)
        or _paused(facts, now)
        or _parked_or_due(facts, now)
    )
    base: dict[str, Any] = {"deadline": iso(run.deadline)} if run.deadline else {}
    return Why(run.run_id, run.status, reason, message, {**base, **extra})


def _alive(facts: WhyFacts) -> list[DaemonFact]:
    return [d for d in facts.daemons if d.alive]


def _ended(run: Run, now: datetime) -> Answer | None:
    """Completed, cancelled or dead: what ended it, and how to run it again."""
    redrive = f"flowctl redrive {run.run_id}"
    if run.deadline is not None and run.deadline <= now:  # refused without a new one
        redrive += " --deadline DURATION"
    if run.status is RunStatus.COMPLETED:
        return (
            "completed",
            {"finished_at": iso(run.finished_at)},
            f"completed at {when(run.finished_at, now)}; nothing left to run",
        )
    if run.status is RunStatus.CANCELLED:
        by = (run.error or {}).get("by")
        return (
            "cancelled",
            {"finished_at": iso(run.finished_at), "by": by, "redrive": redrive},
            f"cancelled at {when(run.finished_at, now)}{f' by {by}' if by else ''}"
            f"; `{redrive}` queues it again",
        )
    if run.status is RunStatus.DEAD:
        why_final = (run.error or {}).get("dead_reason")
        tail = f" ({why_final})" if why_final else ""
        error = run.error and {k: v for k, v in run.error.items() if k != "traceback"}
        return (
            "dead",
            {"error": error, "finished_at": iso(run.finished_at), "redrive": redrive},
            f"dead since {when(run.finished_at, now)} with {error_line(run.error)}{tail};"
            f" `{redrive}` gives it a fresh attempt budget",
        )
    return None


def _past_deadline(facts: WhyFacts, now: datetime) -> Answer | None:
    """Past its deadline and not dead yet: who dead-letters it, and when."""
    run = facts.run
    if run.deadline is None or run.deadline > now:
        return None
    actor = (
        "the daemon dead-letters it at its next claim"
        if _alive(facts)
        else "the next daemon to run on this database dead-letters it"
    )
    if run.status is RunStatus.RUNNING and not facts.lease_owner_gone:
        doing = _doing(facts.last_checkpoint, run.current_step)
        actor = (
            f"{doing} still runs in {_owner_text(run, facts)}, told at its heartbeat;"
            " the run ends dead when the handler stops"
        )
    return (
        "deadline_passed",
        {"daemon": _daemon_facts(facts)},
        f"deadline passed at {when(run.deadline, now)}; {actor}",
    )


def _running(facts: WhyFacts, now: datetime) -> Answer | None:
    """Running: what it does where, and what is pending on it (a cancel or a pause), or
    why its lease will be taken over (its owner is gone, or the lease expired)."""
    run = facts.run
    if run.status is not RunStatus.RUNNING:
        return None
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
        return (
            "cancel_requested",
            {
                "cancel_requested_by": ev.by if ev else None,
                "cancel_requested_at": iso(ev.at) if ev else None,
                **lease,
            },
            f"cancel requested{since} while {doing} still runs in {owner}; it ends"
            " cancelled when the handler stops (a Python step is not interrupted)",
        )
    if facts.pause_requested is not None or run.pause_requested:
        ev = facts.pause_requested or OperatorEvent(now, None)
        return (
            "pause_requested",
            lease,
            f"pause requested at {when(ev.at, now)}{_by(ev)}; {doing} still runs in"
            f" {owner}, and the run parks as paused at its next durable call",
        )
    resting = _resting(facts, now, lease)
    if resting is not None:
        return resting
    recovering = _recovering(facts, now, owner, doing, lease)
    if recovering is not None:
        return recovering
    reclaim = (
        "a daemon reclaims it at once, and runs it alone in a worker process of its own (a"
        " suspect: its worker died under it) while other runs go on"
        if _alive(facts)
        else _no_daemon_text(facts, now)
    )
    if facts.lease_owner_gone:
        return (
            "lease_owner_gone",
            {"daemon": _daemon_facts(facts), **lease},
            f"its lease is held by {owner}, a process that is gone; {reclaim}",
        )
    if run.lease_until is not None and run.lease_until <= now:
        return (
            "lease_expired",
            {"daemon": _daemon_facts(facts), **lease},
            f"its lease held by {owner} expired at {when(run.lease_until, now)}; {reclaim}",
        )
    return (
        "running",
        lease,
        f"running: {doing} runs in {owner}, lease until {when(run.lease_until, now)}",
    )


def _resting(facts: WhyFacts, now: datetime, lease: dict[str, Any]) -> Answer | None:
    """A run whose handler waits in memory for a short sleep's or a retry's wake (issue
    40, flowctl.store.resting): let go, due to any daemon only at its run_at (the end of
    the lease it let go, or its wake's margin if later), or once its daemon is found gone."""
    run, entry = facts.run, facts.pending
    if run.lease_owner is not None or run.suspect or run.run_at is None or run.run_at <= now:
        return None
    if entry is None or entry.wake_at is None or entry.kind not in (CallKind.SLEEP, CallKind.STEP):
        return None
    what = "sleep" if entry.kind is CallKind.SLEEP else f"retry of step {entry.name!r}"
    return (
        "resting",
        {"daemon": _daemon_facts(facts), "wake_at": iso(entry.wake_at), **lease},
        f"resting: its handler waits in memory for its {what} at {when(entry.wake_at, now)}"
        f" in the daemon that ran it; if that daemon stops, any daemon takes it at once,"
        f" if it dies, at {when(run.run_at, now)} (at once when it is found gone)",
    )


def _recovering(
    facts: WhyFacts, now: datetime, owner: str, doing: str, lease: dict[str, Any]
) -> Answer | None:
    """A suspect (its worker died under it) running alone in a worker process of its own,
    or waiting for one; or a run a stopping daemon handed back (no suspect)."""
    run = facts.run
    alone, waiting = facts.suspects
    counts = {"suspects_alone": alone, "suspects_waiting": waiting}
    lapsed = run.lease_until is not None and run.lease_until <= now
    if run.suspect and run.solo and not lapsed and not facts.lease_owner_gone:
        return (
            "suspect_alone",
            {**counts, "crashes": run.crashes, **lease},
            f"its worker died under it, so {doing} runs alone in {owner}, a worker process"
            f" of its own, lease until {when(run.lease_until, now)}: a crash is charged to it"
            f" alone ({run.crashes} of {POISON_CRASHES} charged); other runs go on beside it",
        )
    claimer = "a daemon" if _alive(facts) else f"the next daemon ({_no_daemon_text(facts, now)})"
    if run.lease_owner is None and not run.suspect:
        return (
            "released",
            {"daemon": _daemon_facts(facts), **lease},
            f"handed back by a stopping daemon at {when(run.run_at, now)} (no crash, so no"
            f" suspect); {claimer} claims it with the other due runs",
        )
    if run.suspect and (lapsed or facts.lease_owner_gone) and _alive(facts):
        return (
            "suspect_waiting",
            {**counts, "crashes": run.crashes, "daemon": _daemon_facts(facts), **lease},
            f"its worker ({owner}) died or stopped under it, so it is a suspect: a daemon runs"
            f" it alone in a worker process of its own at its next reclaim pass (within a"
            f" second), up to {ISOLATED_AT_ONCE} at a time each; {waiting} suspect(s) wait,"
            f" {alone} run(s) alone now; other runs go on meanwhile",
        )
    return None


def _paused(facts: WhyFacts, now: datetime) -> Answer | None:
    """Paused by an operator: since when, by whom, and when resuming makes it due."""
    run = facts.run
    if run.status is not RunStatus.PAUSED:
        return None
    ev = facts.paused
    since = f" since {when(ev.at, now)}{_by(ev)}" if ev else ""
    wake = facts.paused_wake
    if wake is None:
        then = "resume makes it due at once"
    elif wake <= now:
        then = f"its wake time {when(wake, now)} passed while paused: resume makes it due at once"
    else:
        then = f"resume makes it due at its wake time {when(wake, now)}"
    return (
        "paused",
        {
            "paused_at": iso(ev.at) if ev else None,
            "paused_by": ev.by if ev else None,
            "wake_at": iso(wake),
            "resume": f"flowctl resume {run.run_id}",
        },
        f"paused{since}; it is never claimed while paused ({then}; `flowctl resume {run.run_id}`)",
    )


def _parked_or_due(facts: WhyFacts, now: datetime) -> Answer:
    """Parked until a time or an event (and, with no daemon, that nothing will wake it),
    or due now: then who will claim it."""
    run = facts.run
    due = run.run_at is not None and run.run_at <= now
    parked = _flow_held(facts, now) or _parked(facts, now)
    if parked is not None and not due:
        reason, extra, message = parked
        if not _alive(facts):
            message += f"; but {_no_daemon_text(facts, now)}"
        return reason, {"daemon": _daemon_facts(facts), **extra}, message
    return _due(facts, now, _DUE_WHAT.get(parked[0] if parked else "", str(run.status)))


def _due(facts: WhyFacts, now: datetime, what: str) -> Answer:
    """Due now (`what` made it due): no daemon to claim it, every slot busy, or a free
    slot that claims it within moments."""
    run = facts.run
    since = when(run.run_at, now)
    daemon = _daemon_facts(facts)
    alive = _alive(facts)
    if not alive:
        return (
            "no_daemon",
            {"due_at": iso(run.run_at), "daemon": daemon},
            f"due since {since} ({what}), but {_no_daemon_text(facts, now)}",
        )
    slots = sum(d.concurrency for d in alive)
    busy = sum(d.held for d in alive)
    load = {
        "due_at": iso(run.run_at),
        "queued_behind": facts.due_ahead,
        "slots": slots,
        "busy": busy,
        "daemon": daemon,
    }
    if busy >= slots:
        return (
            "queued_no_slot",
            load,
            f"due since {since}, queued behind {facts.due_ahead} run(s): all {slots} worker"
            f" slot(s) of {len(alive)} daemon(s) are busy",
        )
    return (
        "due",
        load,
        f"due since {since}; a daemon has {slots - busy} free slot(s) and claims it within moments",
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


def _parked(facts: WhyFacts, now: datetime) -> Answer | None:
    """What a sleeping, waiting or queued run is parked on."""
    if facts.run.status is RunStatus.SLEEPING:
        return _sleeping(facts, now)
    if facts.run.status is RunStatus.WAITING:
        return _waiting(facts, now)
    if facts.run.status is RunStatus.QUEUED:
        return _queued(facts, now)
    return None


def _flow_held(facts: WhyFacts, now: datetime) -> Answer | None:
    """Held behind its full concurrency key, or waiting for a named limit (flowctl.flow)."""
    run, flow = facts.run, facts.flow or FlowFacts()
    if run.status not in (RunStatus.QUEUED, RunStatus.SLEEPING, RunStatus.WAITING):
        return None
    if run.held_at is not None and run.flow_key is not None and run.run_at in (None, run.deadline):
        return held_by_key(run, flow, now, when)
    if run.flow_wait is not None and run.status is RunStatus.SLEEPING and facts.pending is None:
        return waiting_for_limit(run, flow, now, when)
    return None


def _sleeping(facts: WhyFacts, now: datetime) -> Answer:
    pending = facts.pending
    index = f" (sleep #{pending.call_index} {pending.name!r})" if pending else ""
    wake = pending.wake_at if pending and pending.wake_at else facts.run.run_at
    extra: dict[str, Any] = {"wake_at": iso(wake)}
    if pending:
        extra["call_index"] = pending.call_index
    return "sleeping", extra, f"sleeping until {when(wake, now)}{index}"


def _waiting(facts: WhyFacts, now: datetime) -> Answer:
    """Waiting for a signal (since when, until when, whether one is buffered already), or
    for a child run."""
    pending = facts.pending
    if pending is not None and pending.kind is CallKind.SIGNAL:
        since = f" since {when(pending.recorded_at, now)}" if pending.recorded_at else ""
        timeout = (
            f", timeout at {when(pending.wake_at, now)}" if pending.wake_at else ", with no timeout"
        )
        buffered = "; a matching signal is buffered, it is due now" if facts.buffered_signal else ""
        return (
            "waiting_signal",
            {
                "signal": pending.name,
                "since": iso(pending.recorded_at),
                "timeout_at": iso(pending.wake_at),
                "call_index": pending.call_index,
            },
            f"waiting for signal {pending.name!r}{since}{timeout}"
            f" (call #{pending.call_index}){buffered}",
        )
    if pending is not None and pending.name.endswith("]") and facts.children:
        return _waiting_children(facts.children)
    child = facts.child
    if child is None:
        return "waiting_child", {}, "waiting for a child run"
    return (
        "waiting_child",
        {"child_run_id": child.run_id, "child_status": str(child.status)},
        f"waiting for child run {child.run_id} ({child.workflow}), which is {child.status}",
    )


CHILDREN_NAMED = 10  # child runs a why names; the rest are counted


def _waiting_children(children: tuple[Run, ...]) -> Answer:
    """Parked on ctx.children: how many children still run, named, and how many ended."""
    running = [c for c in children if not c.status.is_terminal]
    named = ", ".join(f"{c.run_id} ({c.status})" for c in running[:CHILDREN_NAMED])
    more = f" and {len(running) - CHILDREN_NAMED} more" if len(running) > CHILDREN_NAMED else ""
    return (
        "waiting_children",
        {
            "children_running": len(running),
            "children_total": len(children),
            "children": [
                {"run_id": c.run_id, "workflow": c.workflow, "status": str(c.status)}
                for c in running
            ],
        },
        f"waiting for {len(running)} of {len(children)} child runs still running: {named}{more}",
    )


def _queued(facts: WhyFacts, now: datetime) -> Answer:
    """Queued: behind its schedule's active run, for a step's retry, for its workflow to
    load, for its next attempt, or to start."""
    run = facts.run
    pending = facts.pending
    if run.run_at is None and run.schedule:
        return (
            "held",
            {"schedule": run.schedule},
            f"queued behind the active run of schedule {run.schedule!r} (overlap=queue)",
        )
    if pending is not None and pending.state is EntryState.RETRYING:
        error = error_line(pending.value)
        return (
            "retry_step",
            {
                "retry_at": iso(pending.wake_at),
                "step": pending.name,
                "call_index": pending.call_index,
                "error": error,
            },
            f"queued for a retry of step {pending.name!r} (call #{pending.call_index},"
            f" try {pending.tries + 1}) at {when(pending.wake_at, now)} after {error}",
        )
    failures = load_failures(run)
    error = error_line(run.error)
    if failures:
        return (
            "retry_load",
            {"retry_at": iso(run.run_at), "load_failures": failures, "error": error},
            f"waiting for its workflow to load: tried again at {when(run.run_at, now)},"
            f" no attempt spent ({failures} failure(s) in a row: fix the workflow or"
            f" cancel the run) after {error}",
        )
    if run.attempt > 1:
        return (
            "retry_run",
            {"retry_at": iso(run.run_at), "attempt": run.attempt, "error": error},
            f"queued for attempt {run.attempt}/{run.max_attempts} at"
            f" {when(run.run_at, now)} after {error}",
        )
    return "scheduled", {"start_at": iso(run.run_at)}, f"queued to start at {when(run.run_at, now)}"
