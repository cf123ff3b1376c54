"""Timed suspensions, a sleep and a step's retry: what parks a run until a time, and
resting through one in memory where the daemon's batch runner allows it (issue 40)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flowctl.clock import Clock
from flowctl.durations import Duration, format_duration, parse_duration
from flowctl.errors import Cancelled, UsageError, mark_non_retryable
from flowctl.model import JournalEntry, RunStatus
from flowctl.runtime.live import LiveRun
from flowctl.runtime.recorded import error_line
from flowctl.runtime.suspend import Parked, Suspend, resting
from flowctl.store import Lease, Store


def duration_of(value: Duration) -> timedelta:
    """parse_duration, with a bad duration flagged as an error no retry can fix."""
    try:
        return parse_duration(value)
    except UsageError as exc:
        raise mark_non_retryable(exc) from None


def target_of(when: object) -> datetime:
    """What `ctx.sleep_until(when)` sleeps until: an aware datetime (in UTC) or epoch
    seconds; anything else is a misuse no retry can fix."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise mark_non_retryable(
                UsageError(
                    "ctx.sleep_until() needs a timezone-aware datetime, got naive"
                    f" {when.isoformat()}; use e.g. datetime(..., tzinfo=UTC) or"
                    " ZoneInfo('Europe/Paris')"
                )
            )
        return when.astimezone(UTC)
    if isinstance(when, int | float) and not isinstance(when, bool):
        return datetime.fromtimestamp(when, UTC)
    raise mark_non_retryable(
        UsageError(
            f"ctx.sleep_until() takes an aware datetime or epoch seconds, got {type(when).__name__}"
        )
    )


def sleep_suspension(pending: JournalEntry, now: datetime) -> Suspend:
    """Park the run until a new sleep's wake (`pending`, its entry, carries wake_at)."""
    wake_at = pending.wake_at
    if wake_at is None:
        raise RuntimeError(f"run {pending.run_id}: sleep #{pending.call_index} has no wake_at")
    started = {
        "index": pending.call_index,
        "wake_at": wake_at.isoformat(timespec="microseconds"),
        "for": format_duration(wake_at - now),
    }
    return Suspend(RunStatus.SLEEPING, wake_at, pending, ("sleep started", started))


def resumed_sleep(index: int, wake_at: datetime, entry: JournalEntry | None = None) -> Suspend:
    """Park again a run whose replay reached its sleep before the wake (woken early: a
    daemon stopped or died while the run rested in it). With `entry`, the sleep's pending
    entry as journaled, it may rest through what is left instead; the rest, or the park,
    leaves that entry as it stands (`journaled`)."""
    resumed = {"index": index, "wake_at": wake_at.isoformat(timespec="microseconds")}
    event = ("sleep resumed", resumed)
    return Suspend(RunStatus.SLEEPING, wake_at, entry, event, journaled=entry is not None)


def retry_suspension(entry: JournalEntry, *, journaled: bool = False) -> Suspend:
    """Park the run until the step's backoff ends: a durable timer, no worker held.
    `journaled`: a replay met `entry` in the journal before its retry time."""
    wake_at = entry.wake_at
    if wake_at is None:
        raise RuntimeError(f"run {entry.run_id}: step retry #{entry.call_index} has no wake_at")
    scheduled = {
        "name": entry.name,
        "index": entry.call_index,
        "try": entry.tries + 1,
        "at": wake_at.isoformat(timespec="microseconds"),
        "error": error_line(entry.value or {}),
    }
    event = ("step retry scheduled", scheduled)
    return Suspend(RunStatus.QUEUED, wake_at, entry, event, journaled=journaled)


def signal_suspension(pending: JournalEntry, timeout_at: datetime | None) -> Suspend:
    """Park the run until signal `pending.name` arrives (the signal wakes it), or until
    its timeout if it has one. `pending`: the wait's entry (new, or as journaled)."""
    data: dict[str, Any] = {"name": pending.name, "index": pending.call_index}
    if timeout_at is not None:
        data["timeout_at"] = timeout_at.isoformat(timespec="microseconds")
    return Suspend(RunStatus.WAITING, timeout_at, pending, ("waiting for signal", data))


def begin_rest(
    store: Store,
    lease: Lease,
    live: LiveRun,
    clock: Clock,
    suspend: Suspend,
    *,
    deadline: datetime | None,
    checkpoint: JournalEntry | None,
) -> datetime | None:
    """Let the run rest through a timed suspension where the batch runner allows it
    (runtime.suspend.Rester, flowctl.store.resting): its pending call journaled (with
    `checkpoint`, the last step's, in the same write) and its lease given up. The margin
    (when any daemon may take it); None: not here, nothing written (the caller parks the
    run, as everywhere else)."""
    rester, until, entry = resting.get(), suspend.run_at, suspend.entry
    if rester is None or until is None or entry is None:
        return None
    if live.pause_requested or (deadline is not None and deadline < until):
        return None
    margin = rester.may_rest(until)  # from here on, settled() once it is done
    if margin is None:
        return None
    spent = live.spent()
    live.rest()  # first: a heartbeat's reply from now on is stale
    now = clock.now()
    try:
        rested = store.rest_run(
            lease,
            entry,
            margin,
            now,
            spent,
            suspend.event,
            checkpoint=checkpoint,
            journaled=suspend.journaled,
        )
    except BaseException:
        rester.settled()
        raise
    if not rested:
        rester.settled()
        live.back(lease)
        return None  # lost, or a cancel or pause was asked: parked the usual way
    return margin


def end_rest(
    store: Store,
    lease: Lease,
    live: LiveRun,
    clock: Clock,
    suspend: Suspend,
    margin: datetime,
    *,
    attempt: int,
) -> Parked | None:
    """Wait for the wake of a run begin_rest let rest, and take it back, with no claim
    and no replay: None, `live.lease` is the new lease. Parked: the run is left for
    another daemon (this one stops, or the run moved on meanwhile)."""
    rester, until = resting.get(), suspend.run_at
    assert rester is not None and until is not None  # as begin_rest found them
    try:
        if not rester.rest(live, until):  # this daemon stops: any other may take it now
            now = clock.now()
            released = store.release_rest(lease, now)
            return Parked(RunStatus.RUNNING, now if released else margin)
        now = clock.now()
        resumed = store.resume_run(
            lease,
            suspend.status,
            until,
            now,
            rester.lease_until(),
            attempt,
            keep_from=rester.keep_from(),
        )
        if resumed is None:  # it moved on: due to any daemon (from `margin` on), if still resting
            return Parked(RunStatus.RUNNING, margin)
        live.back(resumed.lease)
        if not rester.back(live):  # the daemon stops: taken back too late, handed back now
            now = clock.now()
            store.release_runs([resumed.lease], now, "stopped resting")
            return Parked(RunStatus.RUNNING, now)
    finally:
        rester.settled()
    if resumed.cancel:  # asked while it rested: told as a heartbeat would tell it
        live.interrupt(Cancelled("cancel requested by operator"))
    if resumed.pause:
        live.request_pause()
    return None


__all__ = [
    "begin_rest",
    "duration_of",
    "end_rest",
    "resumed_sleep",
    "retry_suspension",
    "signal_suspension",
    "sleep_suspension",
    "target_of",
]
