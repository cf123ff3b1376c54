"""Wakes before fresh work (issue 40, item 3): among due runs of one priority, a claim
takes sleepers, signal waits past their timeout, step retries and runs released or taken
back before fresh queued runs, however many fresh runs are older; a higher priority
still goes first. On both stores, through the claim itself."""

from __future__ import annotations

from datetime import datetime

from claiming import SECOND, T0, claim, lease, new

from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import Store


def park(store: Store, run_id: str, status: RunStatus, until: datetime, now: datetime) -> None:
    """Claim `run_id` alone and park it as a handler would: sleeping, waiting with a
    timeout, or queued for a step's retry."""
    assert claim(store, now, 1) == [run_id]
    kind = {RunStatus.SLEEPING: CallKind.SLEEP, RunStatus.WAITING: CallKind.SIGNAL}
    state = EntryState.RETRYING if status is RunStatus.QUEUED else EntryState.PENDING
    entry = JournalEntry(
        run_id, 0, kind.get(status, CallKind.STEP), "x", state, None, wake_at=until, tries=1
    )
    event = ("parked", {"index": 0})
    applied = store.suspend_run(lease(store, run_id), status, until, now, 0.0, entry, event)
    assert applied is not None and applied.status is status


def test_due_wakes_are_claimed_before_older_fresh_runs(store: Store) -> None:
    wakes = [
        ("sleeper", RunStatus.SLEEPING, T0 + 10 * SECOND),
        ("waiter", RunStatus.WAITING, T0 + 11 * SECOND),  # its signal's timeout
        ("retry", RunStatus.QUEUED, T0 + 12 * SECOND),  # a step's retry
    ]
    for rid, status, until in wakes:
        new(store, rid, T0 - 60 * SECOND)
        park(store, rid, status, until, T0 - 50 * SECOND)
    fresh = [new(store, f"fresh{i}", T0 - 40 * SECOND + i * SECOND) for i in range(30)]
    now = T0 + 20 * SECOND
    # every fresh run has been due for longer; the three wakes still go first
    assert claim(store, now, 3) == ["sleeper", "waiter", "retry"]
    assert claim(store, now, 5) == fresh[:5]  # then fresh runs, oldest first


def test_a_higher_priority_fresh_run_still_goes_before_a_wake(store: Store) -> None:
    new(store, "sleeper", T0 - 60 * SECOND)
    park(store, "sleeper", RunStatus.SLEEPING, T0 + SECOND, T0 - 50 * SECOND)
    new(store, "vip", T0, priority=5)
    new(store, "plain", T0 - 30 * SECOND)
    assert claim(store, T0 + 2 * SECOND) == ["vip", "sleeper", "plain"]


def test_a_wake_not_yet_due_waits_behind_due_fresh_runs(store: Store) -> None:
    new(store, "sleeper", T0 - 60 * SECOND)
    park(store, "sleeper", RunStatus.SLEEPING, T0 + 60 * SECOND, T0 - 50 * SECOND)
    new(store, "plain", T0)
    assert claim(store, T0 + SECOND) == ["plain"]
