"""Operator actions on runs, shared by the CLI, the TUI and Python callers.

Validation, defaults and writes live here so every front end behaves the same.
Nothing here prints; functions return values or raise FlowctlError. Parsing the
operator's input is flowctl.ops.parse; schedules and the agenda are flowctl.ops.schedules.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import (
    InputError,
    InvalidStateError,
    RunNotFoundError,
    UsageError,
)
from flowctl.ids import new_run_ids
from flowctl.limits import MAX_KEY, ROOM_RESERVE, one_line
from flowctl.model import ACTIVE, Run, RunStatus, iso
from flowctl.ops.options import StartOptions, check_key, redrive_options, start_options
from flowctl.ops.parse import check_workflow_filter
from flowctl.runtime.targets import TargetCache, WorkflowDef, WorkflowEntry, discover, load_target
from flowctl.store import DaemonInfo, Store
from flowctl.tracing.ids import normal_traceparent

# ---------------------------------------------------------------------------
# Starting runs


@dataclass(frozen=True)
class Started:
    run: Run
    created: bool  # False: an idempotency key matched an existing run


def start(
    store: Store,
    target: str,
    input: dict[str, Any] | None = None,
    *,
    clock: Clock,
    options: StartOptions | None = None,
    key: str | None = None,
    workflows_dir: str | Path | None = None,
    cwd: str | None = None,
    targets: TargetCache | None = None,
    run_at: datetime | None = None,
    deadline: datetime | None = None,
    timeout: timedelta | float | str | None = None,
    max_attempts: int | None = None,
    traceparent: str | None = None,
    priority: int | None = None,
) -> Started:
    """Validate and queue one run: start_many of one. Nothing is written when anything is
    wrong. A key already used returns its run before the target is loaded, so a repeated
    request is answered even when its input no longer fits the workflow.

    `options` are a front end's, resolved by start_options; a Python caller may give
    run_at, deadline, timeout and max_attempts instead, resolved the same way.
    `traceparent` (W3C) puts the run's spans in the caller's trace.
    """
    check_key(key)
    joined = normal_traceparent(traceparent)
    if key is not None:
        existing = store.get_run_by_key(key)
        if existing is not None:
            return Started(existing, False)
    resolved = _resolved(clock, options, run_at, deadline, timeout, max_attempts, priority)
    wf = (targets.load if targets is not None else load_target)(
        target, workflows_dir=workflows_dir, cwd=cwd
    )
    (started,) = _queue(store, wf, [input or {}], [key], None, resolved, clock, joined)
    return started


def start_many(
    store: Store,
    target: str,
    inputs: Sequence[dict[str, Any]],
    *,
    clock: Clock,
    options: StartOptions | None = None,
    keys: Sequence[str | None] | None = None,
    labels: Sequence[str] | None = None,
    workflows_dir: str | Path | None = None,
    cwd: str | None = None,
    targets: TargetCache | None = None,
    run_at: datetime | None = None,
    deadline: datetime | None = None,
    timeout: timedelta | float | str | None = None,
    max_attempts: int | None = None,
    traceparent: str | None = None,
    priority: int | None = None,
) -> list[Started]:
    """Validate and queue many runs of one target in one transaction (one fsync).

    Every input is checked before anything is written: one bad input writes nothing and
    its error names it by `labels[i]` (default its position, "input #1" the first).
    `keys[i]`, when given, is run i's idempotency key: a key already used, or used
    earlier in the same batch, returns that run (created False) instead of a new one.
    The options and `traceparent` are given as `start` takes them (every run joins it).
    """
    joined = normal_traceparent(traceparent)
    if keys is not None and len(keys) != len(inputs):
        raise UsageError(f"{len(keys)} keys for {len(inputs)} inputs: give one key per input")
    if labels is not None and len(labels) != len(inputs):
        raise UsageError(f"{len(labels)} labels for {len(inputs)} inputs: give one per input")
    for i, key in enumerate(keys or []):
        check_key(key, field="keys", label=f"key #{i + 1}")
    resolved = _resolved(clock, options, run_at, deadline, timeout, max_attempts, priority)
    wf = (targets.load if targets is not None else load_target)(
        target, workflows_dir=workflows_dir, cwd=cwd
    )
    shown = labels or [f"input #{i + 1}" for i in range(len(inputs))]
    return _queue(store, wf, inputs, keys or [None] * len(inputs), shown, resolved, clock, joined)


def _resolved(
    clock: Clock,
    options: StartOptions | None,
    run_at: datetime | None,
    deadline: datetime | None,
    timeout: timedelta | float | str | None,
    max_attempts: int | None,
    priority: int | None = None,
) -> StartOptions:
    """The front end's resolved options, or a Python caller's values resolved now."""
    if options is None:
        return start_options(
            clock,
            at=run_at,
            deadline=deadline,
            timeout=timeout,
            max_attempts=max_attempts,
            priority=priority,
        )
    if (run_at, deadline, timeout, max_attempts, priority) != (None,) * 5:
        raise TypeError("give options= or run_at/deadline/timeout/max_attempts, not both")
    return options


def _queue(
    store: Store,
    wf: WorkflowDef,
    inputs: Sequence[dict[str, Any]],
    keys: Sequence[str | None],
    labels: Sequence[str] | None,
    options: StartOptions,
    clock: Clock,
    traceparent: str | None = None,
) -> list[Started]:
    """Check every input against `wf` (an error names input i by labels[i], when given),
    then create the runs in one transaction."""
    _check_schedule_block(wf)
    if options.timeout is None and wf.timeout is not None and wf.timeout <= timedelta(0):
        raise UsageError(
            f"workflow {wf.name} declares a timeout of {wf.timeout.total_seconds():g}s:"
            " a budget must be a positive duration"
        )
    news = []
    for i, (raw, run_id) in enumerate(zip(inputs, new_run_ids(len(inputs)), strict=True)):
        label = None if labels is None else labels[i]
        if not isinstance(raw, dict):
            shown = label or "the input"
            raise InputError(f"{shown} is {type(raw).__name__}: each input is a JSON object")
        try:
            checked = wf.check_input(dict(raw))
        except InputError as e:
            if label is None:
                raise
            raise InputError(f"{label}: {e}") from None
        news.append(
            wf.new_run(
                checked,
                run_at=options.run_at,
                max_attempts=options.max_attempts,
                deadline=options.deadline,
                timeout=options.timeout,
                key=keys[i],
                run_id=run_id,
                traceparent=traceparent,
                priority=options.priority,
            )
        )
    return [Started(run, created) for run, created in store.create_runs(news, clock.now())]


def _check_schedule_block(wf: WorkflowDef) -> None:
    """A YAML file's own `schedule:` block is checked when a run of it is started by hand
    (a fire of the schedule itself was checked when the schedule was synced)."""
    if wf.schedule is not None:
        from flowctl.ops.schedules import check_declared_schedule  # lazy: most runs have none

        check_declared_schedule(wf)


def check_start(
    target: str,
    input: dict[str, Any] | None = None,
    *,
    workflows_dir: str | Path | None = None,
) -> TargetCache:
    """Load `target` and check `input` before any database is opened, so `flowctl run`
    with a typo creates no database file; the returned cache gives `start` the same def
    without loading it again."""
    targets = TargetCache()
    wf = targets.load(target, workflows_dir=workflows_dir)
    wf.check_input(dict(input or {}))
    return targets


def fork(
    store: Store,
    ref: str,
    from_index: int,
    *,
    clock: Clock,
    input: dict[str, Any] | None = None,
    by: str | None = None,
) -> Run:
    """A new run of the same target with the checkpoints before `from_index` copied.

    Queued now; the original run is left as it was. The input is the original's unless
    one is given. `from_index` 0 copies nothing (a rerun); the journal's length keeps every
    checkpoint. Nothing is written when anything is wrong.
    """
    origin = store.find_run(ref)
    journal = store.journal(origin.run_id)
    size = max(journal, default=-1) + 1
    if not 0 <= from_index <= size:
        raise UsageError(
            lambda f: (
                f"{f('from')} {from_index} is outside the journal of run {origin.run_id}:"
                f" use 0..{size} (0 starts over, {size} keeps every checkpoint)"
            ),
            field="from",
        )
    wf = load_target(origin.target, cwd=origin.cwd)
    checked = wf.check_input(dict(origin.input if input is None else input))
    timeout = timedelta(seconds=origin.timeout) if origin.timeout is not None else None
    new = wf.new_run(checked, max_attempts=origin.max_attempts, timeout=timeout)
    return store.fork_run(new, origin.run_id, from_index, clock.now(), by=by or _actor())


def rerun(
    store: Store,
    ref: str,
    *,
    clock: Clock,
    input: dict[str, Any] | None = None,
    by: str | None = None,
) -> Run:
    """`flowctl rerun RUN`: a fork from call index 0, so nothing is copied."""
    return fork(store, ref, 0, clock=clock, input=input, by=by)


# ---------------------------------------------------------------------------
# Acting


def _actor() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "operator"


def _check_signal_name(name: str) -> None:
    """A signal needs a name a run can wait for; names beginning with '_' are flowctl's."""
    if not name.strip():
        raise UsageError(
            f"signal name {name!r} is empty: give the name the run waits for (e.g. approved)"
        )
    if name.startswith("_"):
        raise UsageError(
            f"signal name {name!r} is reserved: names beginning with '_' are for flowctl itself"
        )
    if len(name) > MAX_KEY:
        raise UsageError(
            f"signal name is {len(name):,} characters long: at most {MAX_KEY:,} are accepted"
        )
    if any(ch < " " or ch == "\x7f" for ch in name):
        raise UsageError(
            f"signal name {name!r} holds a control character: give printable text, e.g. approved"
        )


def send_signal(store: Store, ref: str, name: str, payload: Any, *, clock: Clock) -> Run:
    _check_signal_name(name)
    run = store.find_run(ref)
    store.send_signal(run.run_id, name, payload, clock.now())
    return store.get_run(run.run_id)


def run_by_key(store: Store, key: str) -> Run:
    """The active run started with idempotency key `key`; none is RunNotFoundError (exit 1).

    Keys are unique across all runs, so at most one run has it; an ended one is not a
    target, and the error says which run ended so the sender can tell a typo from a late
    reply. A blank or over-long key is bad input (exit 2), as starting a run says.
    """
    check_key(key)
    run = store.get_run_by_key(key)
    if run is None:
        raise RunNotFoundError(
            key, f"no run has the key {key!r}: check it, or start a run with that key first"
        )
    if run.status.is_terminal:
        raise RunNotFoundError(
            key, f"no active run has the key {key!r}: run {run.run_id} with it is {run.status}"
        )
    return run


def send_signal_by_key(store: Store, key: str, name: str, payload: Any, *, clock: Clock) -> Run:
    """`flowctl signal --key KEY NAME`: the same rules as by id, to the key's active run.

    A run that ends between the look-up and the write is refused by the store's guard, in
    the same transaction as the write, so no signal is ever buffered for an ended run.
    """
    _check_signal_name(name)
    run = run_by_key(store, key)
    store.send_signal(run.run_id, name, payload, clock.now())
    return store.get_run(run.run_id)


def cancel(
    store: Store, ref: str, *, clock: Clock, reason: str | None = None, by: str | None = None
) -> Run:
    run = store.find_run(ref)
    store.request_cancel(run.run_id, reason, by or _actor(), clock.now())
    return store.get_run(run.run_id)


def redrive(
    store: Store,
    ref: str,
    *,
    clock: Clock,
    by: str | None = None,
    deadline: object = None,
    no_deadline: object = False,
) -> Run:
    """Queue a dead or cancelled run again under its own deadline; one that has passed is
    refused unless `deadline` gives a new one or `no_deadline` (see RedriveOptions)."""
    options = redrive_options(clock, deadline=deadline, no_deadline=no_deadline)
    run = store.find_run(ref)
    now = clock.now()
    return store.redrive(run.run_id, by or _actor(), now, deadline=options.deadline_for(run, now))


@dataclass(frozen=True)
class Redriven:
    """What `redrive --all` did: the runs queued again, and the dead runs left dead because
    their deadline has passed (neither a new deadline nor `no_deadline` was given)."""

    runs: list[Run]
    past_deadline: list[Run]


def redrive_many(
    store: Store,
    *,
    clock: Clock,
    workflow: str | None = None,
    since: datetime | None = None,
    by: str | None = None,
    deadline: object = None,
    no_deadline: object = False,
) -> Redriven:
    options = redrive_options(clock, deadline=deadline, no_deadline=no_deadline)
    check_workflow_filter(workflow)  # "" would redrive every dead run
    done = Redriven([], [])
    offset = 0
    while True:
        batch = store.list_runs(
            statuses=[RunStatus.DEAD], workflow=workflow, since=since, limit=500, offset=offset
        )
        if not batch:
            break
        for run in batch:
            now = clock.now()
            try:
                new_deadline = options.deadline_for(run, now)
            except UsageError:
                done.past_deadline.append(run)
                offset += 1
                continue
            try:
                done.runs.append(
                    store.redrive(run.run_id, by or _actor(), now, deadline=new_deadline)
                )
            except InvalidStateError:
                offset += 1
    return done


def wake_now(store: Store, ref: str, *, clock: Clock, by: str | None = None) -> Run:
    """End a sleep early. A sleeping run already due (woken, or its time has come, and not
    yet claimed) is left as it is: a second wake writes nothing and records no event."""
    run = store.find_run(ref)
    now = clock.now()
    if run.status is RunStatus.SLEEPING and run.run_at is not None and run.run_at <= now:
        return run
    return store.wake_now(run.run_id, by or _actor(), now)


def pause(store: Store, ref: str, *, clock: Clock, by: str | None = None) -> Run:
    """Pause a run: a parked one at once, a running one at its next durable call.

    A paused run is never claimed; its deadline keeps running and dead-letters it.
    """
    run = store.find_run(ref)
    return store.request_pause(run.run_id, by or _actor(), clock.now())


def resume(store: Store, ref: str, *, clock: Clock, by: str | None = None) -> Run:
    """Resume a paused run (due at once if its wake passed, else at its wake), or withdraw
    the pause a running run was asked for. Any other run is refused (exit 1)."""
    run = store.find_run(ref)
    return store.resume(run.run_id, by or _actor(), clock.now())


def _each_of_workflow(
    store: Store, workflow: str, statuses: list[RunStatus], act: Any
) -> list[Run]:
    """Apply `act(run)` to every run of `workflow` in `statuses`; a run whose status moved
    on meanwhile (the action refuses it) is skipped."""
    check_workflow_filter(workflow)  # "" would act on every workflow
    out: list[Run] = []
    seen: set[str] = set()
    while True:
        batch = [
            r
            for r in store.list_runs(statuses=statuses, workflow=workflow, limit=500)
            if r.run_id not in seen
        ]
        if not batch:
            if not seen:
                _check_workflow_known(store, workflow)
            return out
        for run in batch:
            seen.add(run.run_id)
            try:
                out.append(act(run))
            except InvalidStateError:
                continue


def _check_workflow_known(store: Store, workflow: str) -> None:
    """`--workflow W` that matched nothing: a W with no run at all is a typo, said as one
    (exit 2), not "0 run(s) of W paused"."""
    seen = store.workflows_seen()
    if workflow not in seen:
        import difflib

        close = difflib.get_close_matches(workflow, seen, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        known = ", ".join(seen[:10]) + (", ..." if len(seen) > 10 else "") or "none"
        raise UsageError(
            f"no run of workflow {one_line(workflow)!r} exists{hint}; workflows with runs: {known}"
        )


def pause_workflow(
    store: Store, workflow: str, *, clock: Clock, by: str | None = None
) -> list[Run]:
    """`pause --workflow W`: every active run of W (queued, running, sleeping, waiting)."""
    who = by or _actor()
    return _each_of_workflow(
        store,
        workflow,
        sorted(ACTIVE),
        lambda r: store.request_pause(r.run_id, who, clock.now()) if not r.pause_requested else r,
    )


def resume_workflow(
    store: Store, workflow: str, *, clock: Clock, by: str | None = None
) -> list[Run]:
    """`resume --workflow W`: every paused run of W, and every pause W's running runs were
    asked for."""
    who = by or _actor()

    def act(run: Run) -> Run:
        if run.status is RunStatus.RUNNING and not run.pause_requested:
            raise InvalidStateError("not paused")
        return store.resume(run.run_id, who, clock.now())

    return _each_of_workflow(store, workflow, [RunStatus.PAUSED, RunStatus.RUNNING], act)


# ---------------------------------------------------------------------------
# Status


@dataclass
class StatusReport:
    db: str
    counts: dict[RunStatus, int]
    daemons: list[tuple[DaemonInfo, bool, int]]  # info, alive, runs held
    lateness: dict[str, float | int | None]
    free_bytes: int | None = None  # on the database's filesystem; None on a server
    suspects: tuple[int, int] = (0, 0)  # running alone in worker processes of their own; due

    @property
    def short_of_room(self) -> bool:
        """Under the daemon's reserve: a daemon starts no new run (limits.ROOM_RESERVE)."""
        return self.free_bytes is not None and self.free_bytes < ROOM_RESERVE

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db,
            "free_bytes": self.free_bytes,
            "short_of_room": self.short_of_room,
            "counts": {str(k): v for k, v in self.counts.items()},
            "daemons": [
                {
                    "owner": d.owner,
                    "pid": d.pid,
                    "host": d.host,
                    "started_at": iso(d.started_at),
                    "seen_at": iso(d.seen_at),
                    "alive": alive,
                    "runs_held": held,
                    **d.info,
                }
                for d, alive, held in self.daemons
            ],
            "wake_lateness": self.lateness,
            "suspects": {"alone": self.suspects[0], "waiting": self.suspects[1]},
        }


def other_live_daemons(store: Store, owner: str) -> list[DaemonInfo]:
    """Daemons registered on this database, not `owner`, whose process may still run."""
    from flowctl.ids import owner_alive

    return [d for d in store.daemons() if d.owner != owner and owner_alive(d.owner)]


def daemon_running(store: Store, *, clock: Clock) -> bool:
    """Whether a live daemon serves this database, as `flowctl status` decides it
    (ids.daemon_live: a pid check on this host, a recent heartbeat from another)."""
    from flowctl.ids import daemon_live

    now = clock.now()
    return any(daemon_live(d.owner, d.seen_at, now, d.info.get("lease")) for d in store.daemons())


def status(store: Store, *, clock: Clock, window: timedelta = timedelta(hours=1)) -> StatusReport:
    """Counts, every registered daemon (live: see ids.daemon_live; host, pid, since, runs
    held) and recent wake lateness."""
    from flowctl.ids import daemon_live

    now = clock.now()
    daemons = [
        (d, daemon_live(d.owner, d.seen_at, now, d.info.get("lease")), store.held_count(d.owner))
        for d in store.daemons()
    ]
    lates = sorted(store.recent_wakes(clock.now() - window))
    lateness: dict[str, float | int | None] = {
        "window_s": window.total_seconds(),
        "wakes": len(lates),
    }
    for label, q in (("p50_ms", 0.5), ("p99_ms", 0.99)):
        lateness[label] = (
            round(lates[min(len(lates) - 1, int(q * len(lates)))] * 1000, 3) if lates else None
        )
    lateness["max_ms"] = round(lates[-1] * 1000, 3) if lates else None
    return StatusReport(
        store.path,
        store.count_by_status(),
        daemons,
        lateness,
        store.free_bytes(),
        store.suspect_counts(now),
    )


def list_workflows(workflows_dir: str | Path) -> list[WorkflowEntry]:
    return sorted(discover(workflows_dir).values(), key=lambda w: w.name)


# ---------------------------------------------------------------------------
# flowctl copy


def _live_on(src: Store, clock: Clock) -> list[str]:
    from flowctl.ids import daemon_live

    now = clock.now()
    return [
        f"pid {d.pid} on {d.host}"
        for d in src.daemons()
        if daemon_live(d.owner, d.seen_at, now, d.info.get("lease"))
    ]


def check_copy_source(src: Store, *, clock: Clock) -> None:
    """Refuse a SRC a daemon still serves, before DEST is opened (and, for a new file,
    created): a refused copy leaves nothing behind."""
    from flowctl.store.copy import refuse_live_source

    refuse_live_source(src, _live_on(src, clock))


def plan_copy(src: Store, dest: Store, *, clock: Clock) -> Any:
    """Check that SRC may be copied into DEST (no daemon live on SRC, DEST holds no runs)
    and count what will move; writes nothing. Returns a flowctl.store.copy.CopyPlan."""
    from flowctl.store.copy import plan_copy as plan

    return plan(src, dest, _live_on(src, clock))


COPY_NOUNS = {
    "runs": ("run", "runs"),
    "journal": ("journal entry", "journal entries"),
    "versions": ("version marker", "version markers"),
    "timeline": ("timeline event", "timeline events"),
    "signals": ("signal", "signals"),
    "published": ("published value", "published values"),
    "schedules": ("schedule", "schedules"),
    "schedule_history": ("schedule history row", "schedule history rows"),
    "notifications": ("notification", "notifications"),
    "output": ("output chunk", "output chunks"),
}


def copy_summary(copied: dict[str, int]) -> str:
    """'3 runs, 12 journal entries, ...': what a copy moved, every kind named."""
    parts = []
    for table, (one, many) in COPY_NOUNS.items():
        n = copied.get(table, 0)
        parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts)
