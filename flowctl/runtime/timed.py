"""Timed suspensions, a sleep and a step's retry: what parks a run until a time, and
resting through one in memory where the daemon's batch runner allows it (issue 40)."""

from __future__ import annotations

from datetime import datetime

from flowctl.clock import Clock
from flowctl.durations import format_duration
from flowctl.errors import Cancelled
from flowctl.model import JournalEntry, RunStatus
from flowctl.runtime.live import LiveRun
from flowctl.runtime.recorded import error_line
from flowctl.runtime.suspend import Parked, Suspend, resting
from flowctl.store import Lease, Store


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


def resumed_sleep(index: int, wake_at: datetime) -> Suspend:
    """Park again a run whose replay reached its sleep before the wake (woken early)."""
    resumed = {"index": index, "wake_at": wake_at.isoformat(timespec="microseconds")}
    return Suspend(RunStatus.SLEEPING, wake_at, None, ("sleep resumed", resumed))


def retry_suspension(entry: JournalEntry) -> Suspend:
    """Park the run until the step's backoff ends: a durable timer, no worker held."""
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
    return Suspend(RunStatus.QUEUED, wake_at, entry, ("step retry scheduled", scheduled))


def rest_through(
    store: Store,
    lease: Lease,
    live: LiveRun,
    clock: Clock,
    suspend: Suspend,
    *,
    attempt: int,
    deadline: datetime | None,
) -> Lease | Parked | None:
    """Wait out a timed suspension in memory where the batch runner allows it
    (runtime.suspend.Rester, flowctl.store.resting): journal the pending call and let the
    run rest, then take it back at the wake, with no claim and no replay: the new lease.
    None: not here (the caller parks the run, as everywhere else). Parked: the run stays
    resting for another daemon to take (this one stops, or the run moved on meanwhile)."""
    rester, until, entry = resting.get(), suspend.run_at, suspend.entry
    if rester is None or until is None or entry is None:
        return None
    margin = rester.may_rest(until)
    if margin is None or live.pause_requested or (deadline is not None and deadline < until):
        return None
    spent = live.spent()
    live.rest()  # first: a heartbeat's reply from now on is stale
    if not store.rest_run(lease, entry, margin, clock.now(), spent, suspend.event):
        live.back(lease)
        return None  # lost, or a cancel or pause was asked: parked the usual way
    resting_for = Parked(RunStatus.RUNNING, margin)  # due to any daemon at its margin
    if not rester.rest(live, until):
        return resting_for
    resumed = store.resume_run(
        lease, suspend.status, until, clock.now(), rester.lease_until(), attempt
    )
    if resumed is None:
        return resting_for
    live.back(resumed.lease)
    rester.back(live)
    if resumed.cancel:  # asked while it rested: told as a heartbeat would tell it
        live.interrupt(Cancelled("cancel requested by operator"))
    if resumed.pause:
        live.request_pause()
    return resumed.lease


__all__ = ["rest_through", "resumed_sleep", "retry_suspension", "sleep_suspension"]
