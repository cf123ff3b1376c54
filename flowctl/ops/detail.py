"""Reading one run in full: `flowctl show` (RunDetail), `flowctl why` (its facts), and the
notes both give; shared by the CLI, the TUI detail pane and the HTTP API. Nothing here
prints or writes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import FlowctlError, UsageError
from flowctl.flow.explain import FlowFacts, held_note
from flowctl.limits import MAX_COUNT, SHOW_STEPS
from flowctl.model import (
    CallKind,
    EntryState,
    JournalEntry,
    Run,
    RunStatus,
    TimelineEvent,
    iso,
    local_text,
)
from flowctl.ops.explain import DaemonFact, OperatorEvent, Why, WhyFacts, explain
from flowctl.store import Store
from flowctl.tracing.ids import run_trace
from flowctl.transitions import load_failures


@dataclass(frozen=True)
class ChildRow:
    """A child run of the run shown: the call that started it, by index and branch name."""

    call_index: int | None
    branch: str | None  # its journal name: "workflow kid[3]" (ctx.children), "workflow kid"
    run: Run

    def to_json(self) -> dict[str, Any]:
        return {
            "call_index": self.call_index,
            "branch": self.branch,
            "run_id": self.run.run_id,
            "workflow": self.run.workflow,
            "status": str(self.run.status),
        }


@dataclass
class RunDetail:
    run: Run
    checkpoints: list[JournalEntry]  # one page: see checkpoints_total, steps and skip
    versions: list[tuple[str, int, datetime]]
    timeline: list[TimelineEvent]
    pending_signals: list[tuple[str, Any, datetime]]
    source_changed: bool | None  # None: unknown (no file recorded)
    notes: list[str] = field(default_factory=list)
    published: dict[str, tuple[Any, datetime]] = field(default_factory=dict)
    why_facts: WhyFacts | None = None  # what `why` reads; re-explained as the clock moves
    # A running run: the step printing now ("#3 'fetch'") and its last lines (`flowctl logs`).
    output_step: str | None = None
    output_tail: list[str] = field(default_factory=list)
    checkpoints_total: int = 0  # the run's checkpoints in all (versions not counted)
    timeline_total: int = 0
    steps: int | None = None  # the page asked for: the newest `steps` after `skip`; None: all
    skip: int = 0
    children: list[ChildRow] = field(default_factory=list)  # by call index

    def left_out(self) -> tuple[int, int]:
        """(checkpoints, timeline events) the page leaves out, older and newer together."""
        return (
            self.checkpoints_total - len(self.checkpoints),
            self.timeline_total - len(self.timeline),
        )

    def to_json(self) -> dict[str, Any]:
        checkpoints = [c.to_json() for c in self.checkpoints]
        checkpoints += [
            {
                "index": None,
                "kind": str(CallKind.VERSION),
                "name": cid,
                "value": v,
                "recorded_at": iso(at),
            }
            for cid, v, at in self.versions
        ]
        where = run_trace(self.run.run_id, self.run.traceparent)
        return {
            "run": self.run.to_json(),
            "trace": {
                "trace_id": where.trace_id,
                "span_id": where.span_id,
                "parent_span_id": where.parent_span_id,
            },
            "checkpoints": checkpoints,
            "checkpoints_total": self.checkpoints_total,
            "timeline": [e.to_json() for e in self.timeline],
            "timeline_total": self.timeline_total,
            "page": {"steps": self.steps, "skip": self.skip},
            "pending_signals": [
                {"name": n, "payload": p, "sent_at": iso(at)} for n, p, at in self.pending_signals
            ],
            "source_changed": self.source_changed,
            "notes": self.notes,
            "published": {k: {"value": v, "at": iso(at)} for k, (v, at) in self.published.items()},
            "children": [c.to_json() for c in self.children],
            "output_tail": (
                {"step": self.output_step, "lines": self.output_tail}
                if self.output_step is not None
                else None
            ),
        }


def show_run(
    store: Store, ref: str, *, clock: Clock, steps: int | None = SHOW_STEPS, skip: int = 0
) -> RunDetail:
    """One run in full, but its checkpoints and timeline a page at a time: the newest
    `steps` of each after the `skip` newest (None: every one), with the totals."""
    if steps is not None and not 1 <= steps <= MAX_COUNT:
        raise UsageError(
            lambda f: f"{f('steps')} must be between 1 and {MAX_COUNT:,}, got {steps}",
            field="steps",
        )
    if not 0 <= skip <= MAX_COUNT:
        raise UsageError(
            lambda f: f"{f('skip')} must be between 0 and {MAX_COUNT:,}, got {skip}",
            field="skip",
        )
    run = store.find_run(ref)
    checkpoints, checkpoints_total = store.journal_page(run.run_id, steps, skip)
    timeline, timeline_total = store.timeline_page(run.run_id, steps, skip)
    changed: bool | None = None
    if run.source_path and run.source_hash:
        import hashlib

        try:
            changed = (
                hashlib.sha256(Path(run.source_path).read_bytes()).hexdigest() != run.source_hash
            )
        except OSError:
            changed = True
    notes = []
    now = clock.now()
    facts = why_facts(store, run.run_id, now=now)
    if run.deadline is not None and run.deadline <= now and not run.status.is_terminal:
        # Who acts on it depends on whether a daemon serves this database: explain knows.
        notes.append(explain(facts, now).message)
    if changed:
        notes.append(source_changed_note(run))
    if run.debounce_key is not None:
        collapsed = store.collapsed_starts(run.run_id)
        notes.append(f"debounce: {collapsed} more start(s) collapsed into this run")
    return RunDetail(
        run=run,
        checkpoints=checkpoints,
        versions=store.versions_detail(run.run_id),
        timeline=timeline,
        pending_signals=store.pending_signals(run.run_id),
        source_changed=changed,
        notes=notes,
        published=store.published(run.run_id),
        why_facts=facts,
        **_output_tail(store, run),
        checkpoints_total=checkpoints_total,
        timeline_total=timeline_total,
        steps=steps,
        skip=skip,
        children=children_rows(store, run.run_id),
    )


def children_rows(store: Store, run_id: str) -> list[ChildRow]:
    """The run's child runs by the call that started them (ctx.child, ctx.children)."""
    kids = store.children_of(run_id)
    if not kids:
        return []
    journal = store.journal(run_id)
    rows = []
    for kid in kids:
        index = _call_index(kid.key, run_id)
        entry = journal.get(index) if index is not None else None
        rows.append(ChildRow(index, entry.name if entry is not None else None, kid))
    return sorted(rows, key=lambda r: (r.call_index is None, r.call_index or 0))


def _call_index(key: str | None, run_id: str) -> int | None:
    """The call index in a child's key, `child:PARENT:INDEX`."""
    prefix = f"child:{run_id}:"
    if key is None or not key.startswith(prefix) or not key[len(prefix) :].isdigit():
        return None
    return int(key[len(prefix) :])


TAIL_LINES = 5  # lines of the running step's output that show and the TUI detail show


def _output_tail(store: Store, run: Run) -> dict[str, Any]:
    """The last lines the step now running printed: only for a running run."""
    if run.status is not RunStatus.RUNNING:
        return {}
    chunks = store.output_tail(run.run_id)
    if not chunks:
        return {}
    lines = [line for c in chunks if c.stream != "note" for line in c.text.splitlines()]
    last = chunks[-1]
    return {
        "output_step": f"#{last.call_index} {last.step!r}",
        "output_tail": lines[-TAIL_LINES:],
    }


def source_changed_note(run: Run) -> str:
    """What is true of a run whose workflow file changed since it started.

    A YAML run replays the definition pinned when it started. A Python run has no pinned
    copy: its next replay imports the file as it is now, so a change to the calls it makes
    before its journal frontier stops it with a non-determinism error.
    """
    if run.kind != "yaml" and run.source_path and not os.path.exists(run.source_path):
        return (
            f"{run.source_path} no longer exists: this run cannot be replayed until it is"
            " back (its next attempt fails to load it)"
        )
    if run.kind == "yaml":
        return (
            f"{run.source_path} changed since this run started; the run keeps its pinned"
            " definition (new runs use the new file)"
        )
    return (
        f"{run.source_path} changed since this run started; the run replays the new code, and"
        " a replay that meets a different call than its journal holds ends it dead with a"
        " non-determinism error (guard such changes with ctx.version())"
    )


def why(detail: RunDetail, now: datetime) -> str:
    """One sentence on what the run is doing or waiting for (the TUI's why line); times
    are local with the zone, as in every human-facing line (model.local_text)."""
    run = detail.run
    note = held_note(run)
    if note is not None:
        return f"{run.status} ({note})"
    if run.deadline is not None and run.deadline <= now and not run.status.is_terminal:
        if detail.why_facts is not None:
            return f"{run.status}: {explain(detail.why_facts, now).message}"
        return f"{run.status}: deadline passed at {local_text(run.deadline)}"
    if run.status is RunStatus.SLEEPING:
        return f"sleeping until {_until(run.run_at, now)}"
    if run.status is RunStatus.WAITING:
        pending = _last(detail, EntryState.PENDING)
        what = (
            f"signal {pending.name!r}"
            if pending is not None and pending.kind is CallKind.SIGNAL
            else "a child run"
        )
        tail = f", timeout at {_until(run.run_at, now)}" if run.run_at else ""
        return f"waiting for {what}{tail}"
    if run.status is RunStatus.QUEUED:
        return _why_queued(detail, now)
    if run.status is RunStatus.RUNNING:
        return _why_running(detail)
    if run.status is RunStatus.PAUSED:
        due = run.paused_run_at
        then = "at once" if due is None or due <= now else f"at {_until(due, now)}"
        return f"paused (was {run.paused_status}); `flowctl resume` makes it due {then}"
    if run.status is RunStatus.DEAD and run.error:
        return f"dead: {run.error.get('type')}: {str(run.error.get('message', '')).splitlines()[0] if run.error.get('message') else ''}"
    return str(run.status)


def _until(at: datetime | None, now: datetime) -> str:
    """`at` in local time, and how far off (or "due")."""
    from flowctl.durations import format_duration

    if at is None:
        return ""
    delta = at - now
    if delta.total_seconds() > 0:
        return f"{local_text(at)} (in {format_duration(delta)})"
    return f"{local_text(at)} (due)"


def _why_queued(detail: RunDetail, now: datetime) -> str:
    """Queued: behind its schedule's run, for a step retry, for its workflow to load, for
    its next attempt, or to start."""
    run = detail.run
    if run.run_at is None and run.schedule:  # held by overlap=queue
        return f"queued behind the active run of schedule {run.schedule!r} (overlap=queue)"
    retrying = _last(detail, EntryState.RETRYING)
    if retrying is not None:
        return f"queued: step {retrying.name!r} retries at {_until(run.run_at, now)}"
    if load_failures(run):
        return f"queued: its workflow did not load; tried again at {_until(run.run_at, now)}"
    if run.attempt > 1:
        return f"queued: attempt {run.attempt}/{run.max_attempts} at {_until(run.run_at, now)}"
    return f"queued to start at {_until(run.run_at, now)}"


def _why_running(detail: RunDetail) -> str:
    """Running: where, its lease, and a cancel or pause asked for and not yet acted on."""
    run = detail.run
    cancel = ""
    if run.cancel_requested:
        asked = detail.why_facts.cancel_requested if detail.why_facts else None
        by = f" by {asked.by}" if asked is not None and asked.by else ""
        at = f" at {local_text(asked.at)}" if asked is not None else ""
        cancel = f" (cancel requested{by}{at}, pending: it ends when the handler stops)"
    if run.pause_requested:
        cancel += " (pause requested: it parks at its next durable call)"
    lease = f", lease until {local_text(run.lease_until)}" if run.lease_until else ""
    return f"running on {run.lease_owner}{lease}{cancel}"


def _last(detail: RunDetail, state: EntryState) -> JournalEntry | None:
    """The run's newest checkpoint in this state: the one why_facts read when it is the
    newest pending or retrying one, else the newest on the page shown."""
    facts = detail.why_facts
    if facts is not None and facts.pending is not None and facts.pending.state is state:
        return facts.pending
    return next((c for c in reversed(detail.checkpoints) if c.state is state), None)


def explain_detail(detail: RunDetail, now: datetime) -> Why | None:
    """What `flowctl why` says of the run shown, re-explained at `now`."""
    return None if detail.why_facts is None else explain(detail.why_facts, now)


def why_facts(store: Store, ref: str, *, now: datetime | None = None) -> WhyFacts:
    """Read from the store everything `explain` needs to say why a run is not running
    (`now`: also how many suspects run alone and wait, for a running run)."""
    from flowctl.ids import owner_is_dead

    run = store.find_run(ref)
    pending = store.last_entry(run.run_id, (EntryState.PENDING, EntryState.RETRYING))
    daemons = _daemons(store)
    active = not run.status.is_terminal
    running = run.status is RunStatus.RUNNING
    buffered = (
        pending is not None
        and pending.kind is CallKind.SIGNAL
        and any(name == pending.name for name, _, _ in store.pending_signals(run.run_id))
    )

    def operator(types: list[str]) -> OperatorEvent | None:
        ev = store.last_event(run.run_id, types)
        return None if ev is None else OperatorEvent(ev.at, ev.data.get("by"))

    return WhyFacts(
        run=run,
        pending=pending,
        last_checkpoint=store.last_entry(run.run_id, (EntryState.DONE, EntryState.ERROR)),
        daemons=daemons,
        daemon_last_seen=(
            store.daemon_last_seen() if active and not any(d.alive for d in daemons) else None
        ),
        due_ahead=(
            store.due_ahead(run.run_id, run.run_at) if active and run.run_at is not None else 0
        ),
        suspects=store.suspect_counts(now) if running and now is not None else (0, 0),
        lease_owner_gone=(
            running and run.lease_owner is not None and owner_is_dead(run.lease_owner)
        ),
        cancel_requested=(
            operator(["cancel requested"]) if running and run.cancel_requested else None
        ),
        pause_requested=operator(["pause requested"]) if running and run.pause_requested else None,
        paused=operator(["paused"]) if run.status is RunStatus.PAUSED else None,
        paused_wake=run.paused_run_at,
        child=_child(store, pending),
        children=tuple(store.children_of(run.run_id)) if _parked_waiting(run) else (),
        buffered_signal=buffered,
        flow=_flow_facts(store, run, now) if active else None,
        db=store.path,
    )


def _parked_waiting(run: Run) -> bool:
    return run.status is RunStatus.WAITING or (
        run.status is RunStatus.PAUSED and run.paused_status is RunStatus.WAITING
    )


def _flow_facts(store: Store, run: Run, now: datetime | None) -> FlowFacts | None:
    """What flow control holds the run back by (flowctl.flow.explain), if anything."""
    if run.held_at is not None and run.flow_key is not None:
        return FlowFacts(key_holders=store.key_holders(run.flow_key))
    if run.flow_wait is not None:
        states = store.limit_states(now or run.created_at, run.flow_wait)
        if not states:
            return FlowFacts()
        state = states[0]
        return FlowFacts(limit=state.spec, limit_holders=state.holders, next_free=state.next_free)
    return None


def _daemons(store: Store) -> tuple[DaemonFact, ...]:
    """Every daemon registered on the database: alive or not, its slots, runs it holds."""
    from flowctl.ids import owner_alive

    return tuple(
        DaemonFact(
            d.owner,
            d.host,
            d.pid,
            owner_alive(d.owner),
            int(d.info.get("concurrency", 1)),
            store.held_count(d.owner),
        )
        for d in store.daemons()
    )


def _child(store: Store, pending: JournalEntry | None) -> Run | None:
    """The child run a step parked on waits for (None if it waits for none, or it is gone)."""
    if pending is None or pending.kind is not CallKind.STEP or not isinstance(pending.value, dict):
        return None
    child_id = pending.value.get("child_run_id")
    if not isinstance(child_id, str):
        return None
    try:
        return store.get_run(child_id)
    except FlowctlError:
        return None


def why_run(store: Store, ref: str, *, clock: Clock) -> Why:
    """`flowctl why RUN`: the one reason the run is where it is, with its facts."""
    now = clock.now()
    return explain(why_facts(store, ref, now=now), now)
