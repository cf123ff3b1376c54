"""Schedules made real: the daemon's Scheduler fires what is due, exactly once, via the store.

flowctl.schedule.calendar decides *when* (pure: due_fires, jitter_offset); this module turns
those decisions into one store transaction per schedule (`Store.fire_schedule`): the runs
(each with the idempotency key `schedule:{name}:{fire time}`), the history rows and the new
last/next fire times commit together, so a crash never fires twice or loses a fire.

A schedule whose workflow fails to load (file moved, YAML broken, input no longer valid)
does not stop the daemon: the fire is recorded as `error` in the schedule's history, with
the message, and the schedule moves on to its next fire.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flowctl.clock import Clock
from flowctl.durations import format_duration
from flowctl.errors import FlowctlError
from flowctl.model import iso
from flowctl.runtime.targets import WorkflowDef, load_target
from flowctl.schedule.calendar import DueFires, ScheduleSpec, due_fires, jitter_offset
from flowctl.store import FireOutcome, FirePlan, NewRun, ScheduleRow, Store

log = logging.getLogger(__name__)

# When a tick could not handle a due schedule (e.g. the database stayed locked), try again
# this much later rather than spinning on it.
RETRY_AFTER = timedelta(seconds=1)
_LATE = timedelta(minutes=1)  # a fire enqueued later than this was a missed one caught up


def _key_instant(when: datetime) -> str:
    """An instant as fire keys spell it (UTC, +00:00). Frozen: keys already stored by
    earlier versions must match, or a fire made before an upgrade would fire again."""
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def fire_key(name: str, fire_at: datetime) -> str:
    """The idempotency key of one scheduled fire: the same fire always maps to the same key."""
    return f"schedule:{name}:{_key_instant(fire_at)}"


def manual_key(name: str, at: datetime) -> str:
    """A manual trigger's key: one run per trigger, even if the trigger's write is retried."""
    return f"schedule:{name}:manual:{_key_instant(at)}"


@dataclass(frozen=True)
class Loaded:
    """A schedule's workflow, loaded and with its input validated, ready to make runs."""

    wf: WorkflowDef
    input: dict[str, Any]


def load_schedule_workflow(row: ScheduleRow) -> Loaded:
    """Load the target the way a run would and validate the stored input against it.

    Raises FlowctlError (TargetError, InputError, ValidationError ...) when it cannot.
    """
    wf = load_target(row.target, cwd=row.cwd)
    return Loaded(wf, wf.check_input(dict(row.input)))


def scheduled_run(
    loaded: Loaded, name: str, fire_at: datetime, run_at: datetime, key: str
) -> NewRun:
    """What ops.start would build, for a schedule fire: the run pins the workflow's source,
    records the schedule and the fire time (`scheduled_at`, separate from when it starts)."""
    return loaded.wf.new_run(
        loaded.input, run_at=run_at, key=key, schedule=name, scheduled_at=fire_at
    )


class Scheduler:
    """Fires due schedules. `tick(now)` fires what is due and says when to call again; the
    daemon keeps that answer in `next_at` (`reread`, `fire_due_at`) and waits for it."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.fired = 0  # runs created, for logs and tests
        self.next_at: datetime | None = None  # the soonest fire not yet handled, as last read

    def next_fire(self) -> datetime | None:
        """The soonest unhandled fire of any active schedule (a read of one index)."""
        return self.store.next_schedule_fire()

    def reread(self) -> None:
        """Another process may have changed the schedules (`schedule add/pause/resume`)."""
        self.next_at = self.next_fire()

    def fire_due_at(self, now: datetime) -> bool:
        """Fire what is due at `now` if `next_at` says anything is; True if it did (the runs
        it created are new, and due)."""
        if self.next_at is None or self.next_at > now:
            return False
        self.next_at = self.tick(now)
        return True

    def tick(self, now: datetime | None = None) -> datetime | None:
        """Fire everything due at `now`; return the soonest next fire time (None: no schedule).

        Never raises: a failure is logged and the schedule is retried RETRY_AFTER later, so a
        broken schedule cannot take the daemon down or make it spin.
        """
        now = self.clock.now() if now is None else now
        try:
            due = self.store.due_schedules(now)
        except Exception:
            log.exception("reading due schedules failed")
            return now + RETRY_AFTER
        for row in due:
            try:
                self.fire_due(row, now)
            except Exception:
                log.exception("schedule %s: firing failed; retrying", row.name)
        try:
            nxt = self.store.next_schedule_fire()
        except Exception:
            log.exception("reading the next schedule fire failed")
            return now + RETRY_AFTER
        if nxt is not None and nxt <= now:
            nxt = now + RETRY_AFTER  # still due after trying: it failed, don't spin
        return nxt

    def fire_due(self, row: ScheduleRow, now: datetime) -> list[FireOutcome] | None:
        """Handle every fire of one schedule up to `now` in one store transaction.

        Returns the outcomes, or None when the schedule changed under us (another daemon
        fired it, or it was paused/redefined): nothing was written, the next tick re-reads.
        """
        try:
            spec = ScheduleSpec.from_json(row.spec)
        except FlowctlError as e:
            # A stored spec that no longer validates (e.g. tzdata lost the zone): stop it
            # (next_fire_at NULL) and say why; `flowctl schedule add --replace` revives it.
            plan = FirePlan(None, "error", detail=f"{e}; the schedule is stopped")
            return self.store.fire_schedule(
                row.name,
                row.revision,
                [plan],
                overlap="allow",
                last_fire_at=row.last_fire_at,
                next_fire_at=None,
                now=now,
            )
        due = due_fires(spec, row.last_fire_at, row.active_from, now)
        last = max((f.at for f in [*due.enqueue, *due.skipped]), default=row.last_fire_at)
        plans = _plans(row, spec, due, now)
        outcomes = self.store.fire_schedule(
            row.name,
            row.revision,
            plans,
            overlap=spec.overlap,
            last_fire_at=last,
            next_fire_at=due.next_fire.at if due.next_fire else None,
            now=now,
        )
        for out in outcomes or []:
            if out.created:
                self.fired += 1
                log.info("schedule %s: fired %s for %s", row.name, out.run_id, iso(out.fire_at))
            elif out.action in ("skipped-overlap", "error"):
                log.info(
                    "schedule %s: %s at %s: %s", row.name, out.action, iso(out.fire_at), out.detail
                )
        return outcomes

    def trigger(self, name: str, now: datetime | None = None) -> FireOutcome:
        """Fire a schedule now, by hand: its own key per trigger, the schedule's overlap
        policy, no change to its calendar. Load errors are raised (the operator sees them)."""
        now = self.clock.now() if now is None else now
        row = self.store.get_schedule(name)
        spec = ScheduleSpec.from_json(row.spec)
        loaded = load_schedule_workflow(row)
        new = scheduled_run(loaded, name, now, now, manual_key(name, now))
        plan = FirePlan(now, "manual", run=new)
        return self.store.trigger_schedule(name, plan, overlap=spec.overlap, now=now)


def _plans(row: ScheduleRow, spec: ScheduleSpec, due: DueFires, now: datetime) -> list[FirePlan]:
    """What to write for a schedule's due fires, in fire order: the missed ones skipped
    (and a note for older ones not listed), a run for each fire to enqueue (an error for
    each, if its workflow does not load)."""
    plans: list[FirePlan] = []
    if due.older_skipped:
        oldest = min(f.at for f in due.skipped) if due.skipped else now
        plans.append(
            FirePlan(
                None,
                "skipped-missed",
                detail=f"older missed fires before {iso(oldest)} were skipped too"
                f" (at most {spec.max_missed} are listed)",
            )
        )
    for fire in due.skipped:
        plans.append(FirePlan(fire.at, "skipped-missed", detail=f"missed (missed={spec.missed})"))
    if due.enqueue:
        try:
            loaded = load_schedule_workflow(row)
        except FlowctlError as e:
            log.warning("schedule %s: %s", row.name, e)
            plans.extend(FirePlan(f.at, "error", detail=str(e)) for f in due.enqueue)
        else:
            for fire in due.enqueue:
                run_at = fire.at + jitter_offset(spec, row.name, fire.at)
                new = scheduled_run(loaded, row.name, fire.at, run_at, fire_key(row.name, fire.at))
                detail = fire.note
                if now - fire.at > _LATE:
                    late = f"caught up {format_duration(now - fire.at)} late (missed={spec.missed})"
                    detail = f"{detail}; {late}" if detail else late
                plans.append(FirePlan(fire.at, "fired", run=new, detail=detail))
    plans.sort(key=lambda p: p.fire_at or datetime.min.replace(tzinfo=UTC))
    return plans
