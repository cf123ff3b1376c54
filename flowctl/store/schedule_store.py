"""The schedules and the notification outbox of the Store protocol (flowctl.store.protocol):
what the daemon's scheduler and notifier, and the schedule commands, call. A part of
`Store` of its own, so that code needing only these can say so in its type."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from flowctl.store.records import (
        FireOutcome,
        FirePlan,
        NewSchedule,
        Notification,
        ScheduleEvent,
        ScheduleRow,
    )


class ScheduleStore(Protocol):
    """Schedules (each with its history and next fire) and the outbox of run-ending
    notifications, each write one transaction."""

    # -- schedules -------------------------------------------------------------

    def add_schedule(
        self, new: NewSchedule, now: datetime, *, replace: bool = False
    ) -> ScheduleRow:
        """Insert a schedule (ScheduleError if the name exists), or with `replace` redefine
        it from `now`, keeping its history, pause state and last fire (no backfill)."""
        ...

    def get_schedule(self, name: str) -> ScheduleRow:
        """The schedule with this name; ScheduleNotFoundError when there is none."""
        ...

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        ...

    def set_schedule_paused(
        self, name: str, paused: bool, next_fire_at: datetime | None, now: datetime
    ) -> ScheduleRow:
        """Pause (no fires) or resume from `now` (fires that fell in the pause never happen)."""
        ...

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule and its history (its runs stay); ScheduleNotFoundError if none."""
        ...

    def schedule_history(self, name: str, limit: int = 20) -> list[ScheduleEvent]:
        """The newest `limit` decisions for a schedule, oldest first, with each run's status."""
        ...

    def last_schedule_events(self) -> dict[str, ScheduleEvent]:
        """Each schedule's newest history row, by schedule name."""
        ...

    def due_schedules(self, now: datetime) -> list[ScheduleRow]:
        """Unpaused schedules whose next fire is at or before `now`, soonest first."""
        ...

    def next_schedule_fire(self) -> datetime | None:
        """The soonest unhandled fire over unpaused schedules: when the daemon must wake."""
        ...

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
        """Apply one tick's fire decisions in ONE transaction (runs by idempotency key,
        history, last/next fire); None, changing nothing, if the schedule's revision moved."""
        ...

    def trigger_schedule(
        self, name: str, plan: FirePlan, *, overlap: str, now: datetime
    ) -> FireOutcome:
        """A manual fire under the schedule's overlap policy; last/next fire do not move."""
        ...

    # -- the notification outbox -----------------------------------------------

    def due_notifications(self, now: datetime, limit: int = 64) -> list[Notification]:
        """Pending outbox rows due at `now`, oldest first, each with its run's pinned override."""
        ...

    def claim_notification(self, seq: int, now: datetime, until: datetime, owner: str) -> bool:
        """Take a due pending row for one try by `owner` (due again at `until`, tries + 1);
        False, changing nothing, when it is no longer pending or due (another took it)."""
        ...

    def notification_claims(self, now: datetime) -> list[tuple[int, str]]:
        """(seq, owner) of pending rows held by a deliverer for a try not yet due again."""
        ...

    def release_notification(self, seq: int, owner: str, now: datetime) -> bool:
        """Make a row held by `owner` (a process now gone) due at `now`; False if it moved on."""
        ...

    def settle_notification(
        self,
        seq: int,
        run_id: str,
        now: datetime,
        *,
        done: Sequence[str],
        error: str | None,
        retry_at: datetime | None,
        events: Sequence[tuple[str, dict[str, Any]]],
    ) -> None:
        """Record a try in one transaction: channels done, the row delivered (no error),
        pending again at `retry_at`, or failed; and `events` in the run's timeline."""
        ...

    def drop_notifications(self, seqs: Sequence[int]) -> None:
        """Delete outbox rows no channel wants."""
        ...

    def drop_unwanted_notifications(
        self, statuses: Sequence[str], now: datetime, limit: int
    ) -> int:
        """Delete up to `limit` pending outbox rows due at `now` whose ending status is one
        of `statuses` and whose run has no notify override (notify.unwanted_endings says
        which statuses); returns how many."""
        ...
