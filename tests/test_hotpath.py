"""The daemon's hot path does less without promising less (issue 14, item 2).

A checkpoint's fence check is its own INSERT's condition; the last step's checkpoint is
written with the completion, in one transaction; the claim says whether there is
suspicion to clear and a parent or schedule to tell. What must still hold, on both
backends: a write under a lost lease changes nothing, every checkpoint is committed
before the next step runs, and a handler stopped after its last step keeps that step.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import durable_flows as flows
import pytest
from durable_flows import CALLS, HOOKS, calls, start
from helpers import open_same

from flowctl.clock import FakeClock
from flowctl.daemon.lifecycle import DaemonStopping
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.runtime.engine import Engine, Outcome
from flowctl.runtime.live import LiveRun
from flowctl.store import Claim, Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
LEASE = timedelta(seconds=15)


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def claim_one(store: Store, owner: str, now: datetime, *, alone: bool = False) -> Claim:
    claims, _ = store.claim_due(owner, now, now + LEASE, 1, alone=alone)
    assert len(claims) == 1
    return claims[0]


def reclaimed(store: Store, clock: FakeClock, rid: str) -> tuple[Claim, Claim]:
    """The run claimed by "a/1/1", whose lease then lapses and "b/1/1" reclaims it (alone,
    as a suspect is): the first claim's lease is lost."""
    first = claim_one(store, "a/1/1", clock.now())
    clock.advance(LEASE + timedelta(seconds=1))
    second = claim_one(store, "b/1/1", clock.now(), alone=True)
    assert second.lease.fence > first.lease.fence
    return first, second


def entry(rid: str, index: int, name: str, value: object) -> JournalEntry:
    return JournalEntry(rid, index, CallKind.STEP, name, EntryState.DONE, value, recorded_at=T0)


def test_a_checkpoint_under_a_lost_lease_is_refused_and_writes_nothing(
    store: Store, fake_clock: FakeClock
) -> None:
    rid = start(store, fake_clock, "two_steps")
    first, second = reclaimed(store, fake_clock, rid)
    now = fake_clock.now()
    for suspicion in (False, True):
        assert not store.record_entry(first.lease, entry(rid, 0, "a", 1), now, suspicion=suspicion)
    assert store.journal(rid) == {}
    run = store.get_run(rid)
    assert (run.lease_owner, run.fence, run.reclaims) == ("b/1/1", second.lease.fence, 1)
    # The holder's own write goes through.
    assert store.record_entry(second.lease, entry(rid, 0, "a", 1), now)
    assert calls(store, rid) == [(0, "step", "a", "done")]


def test_a_completion_under_a_lost_lease_writes_neither_its_checkpoint_nor_the_ending(
    store: Store, fake_clock: FakeClock
) -> None:
    rid = start(store, fake_clock, "two_steps")
    first, second = reclaimed(store, fake_clock, rid)
    now = fake_clock.now()
    last = entry(rid, 1, "b", 20)
    assert not store.complete_run(first.lease, {"b": 20}, now, 0.0, entry=last)
    # With the claim's links and no checkpoint, the completion's UPDATE is the fence check.
    assert not store.complete_run(first.lease, {"b": 20}, now, 0.0, links=(None, None))
    run = store.get_run(rid)
    assert (run.status, run.lease_owner, run.result) == (RunStatus.RUNNING, "b/1/1", None)
    assert store.journal(rid) == {}
    assert store.complete_run(second.lease, {"b": 20}, now, 0.0, entry=last, links=(None, None))
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.COMPLETED, {"b": 20})
    assert calls(store, rid) == [(1, "step", "b", "done")]


def test_the_first_checkpoint_of_a_reclaimed_run_clears_its_suspicion(
    store: Store, fake_clock: FakeClock
) -> None:
    rid = start(store, fake_clock, "two_steps")
    _, second = reclaimed(store, fake_clock, rid)
    assert (second.run.reclaims, second.run.suspect) == (1, True)  # what the claim showed
    seen: list[tuple[int, bool, int]] = []

    def inside_b() -> None:  # after step a's checkpoint, before step b's
        run = store.get_run(rid)
        seen.append((run.reclaims, run.suspect, run.crashes))

    HOOKS["b"] = inside_b
    outcome = Engine(store, fake_clock).execute(second)
    assert outcome.status is RunStatus.COMPLETED
    assert seen == [(0, False, 0)]


def test_each_checkpoint_is_committed_before_the_next_step_runs(
    store: Store, fake_clock: FakeClock
) -> None:
    rid = start(store, fake_clock, "three_steps")
    seen: dict[str, list[tuple[int, str, str, str]]] = {}
    other = open_same(store)  # another connection: it sees only what is committed
    try:
        for name in ("b", "c"):
            HOOKS[name] = lambda name=name: seen.setdefault(name, calls(other, rid))
        claim = claim_one(store, "a/1/1", fake_clock.now())
        outcome = Engine(store, fake_clock).execute(claim)
    finally:
        other.close()
    assert outcome == Outcome(rid, RunStatus.COMPLETED, result=["A", "B", "C"])
    assert seen == {
        "b": [(0, "step", "a", "done")],
        "c": [(0, "step", "a", "done"), (1, "step", "b", "done")],
    }
    assert [c[2] for c in calls(store, rid)] == ["a", "b", "c"]


def test_a_handler_stopped_after_its_last_step_keeps_that_step(
    store: Store, fake_clock: FakeClock
) -> None:
    """A drain's stop reaching a handler that then returns: nothing is ended (the run is
    left to be reclaimed), but the last step's result is journaled, so it never runs again."""
    rid = start(store, fake_clock, "two_steps")
    claim = claim_one(store, "a/1/1", fake_clock.now())
    live = LiveRun(claim.lease, fake_clock, 0.0, None)
    HOOKS["b"] = lambda: live.interrupt(DaemonStopping("daemon stopping"))
    outcome = Engine(store, fake_clock).execute(claim, live)
    assert outcome == Outcome(rid, None)
    assert calls(store, rid) == [(0, "step", "a", "done"), (1, "step", "b", "done")]
    assert store.get_run(rid).status is RunStatus.RUNNING
    # The next claim replays both steps from the journal: neither body runs again.
    fake_clock.advance(LEASE + timedelta(seconds=1))
    again = claim_one(store, "b/1/1", fake_clock.now(), alone=True)
    HOOKS.clear()
    assert Engine(store, fake_clock).execute(again).status is RunStatus.COMPLETED
    assert (CALLS["a"], CALLS["b"]) == (1, 1)


def test_a_three_step_run_commits_four_times_with_the_last_checkpoint_in_its_completion(
    tmp_path: object, fake_clock: FakeClock
) -> None:
    from pathlib import Path

    from flowctl.store.sqlite import SqliteStore

    with SqliteStore(Path(str(tmp_path)) / "c.db") as store:
        rid = start(store, fake_clock, "three_steps")
        before = store.commit_stats().commits
        claim = claim_one(store, "a/1/1", fake_clock.now())
        assert Engine(store, fake_clock).execute(claim).status is RunStatus.COMPLETED
        # claim, step a, step b, step c with the completion
        assert store.commit_stats().commits - before == 4
        assert [c[2] for c in calls(store, rid)] == ["a", "b", "c"]
