"""The two store operations `flowctl daemon --workers N` is built on, on both stores:
run_batch (its workers' calls in one transaction, each in a savepoint) and lapse_runs (a
dead worker's leases lapse with their crash charge kept, so a run that keeps killing its
worker is dead-lettered as poison)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from helpers import open_same

from flowctl.errors import RunNotFoundError
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import Claim, Lease, NewRun, Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
LEASE = timedelta(seconds=15)
OWNER = "host-a/1/1/aaaa"


def claimed(store: Store, run_id: str = "r1", *, alone: bool = False) -> Claim:
    store.create_run(NewRun(run_id, "wf", "wf.py:wf", "python", {}), T0)
    (claim,), _ = store.claim_due(OWNER, T0, T0 + LEASE, 1, run_id=run_id, alone=alone)
    return claim


def step(run_id: str, index: int, name: str) -> JournalEntry:
    return JournalEntry(run_id, index, CallKind.STEP, name, EntryState.DONE, index, None, T0)


def events(store: Store, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in store.timeline(run_id) if e.type == type_]


# ---------------------------------------------------------------- run_batch


def test_a_batch_commits_its_calls_and_a_failing_one_is_undone_alone(store: Store) -> None:
    lease = claimed(store).lease

    def writes_then_fails() -> None:
        store.record_entry(lease, step("r1", 1, "undone"), T0)
        raise ValueError("this call fails after its write")

    results = store.run_batch(
        [
            lambda: store.record_entry(lease, step("r1", 0, "first"), T0),
            writes_then_fails,
            lambda: store.get_run("nope"),
            lambda: store.record_entry(lease, step("r1", 2, "third"), T0),
        ]
    )
    assert [ok for ok, _ in results] == [True, False, False, True]
    assert results[0][1] is True and results[3][1] is True
    assert isinstance(results[1][1], ValueError) and isinstance(results[2][1], RunNotFoundError)
    with open_same(store) as other:  # committed when run_batch returns, seen by another
        assert [(i, e.name) for i, e in other.journal("r1").items()] == [(0, "first"), (2, "third")]


def test_a_batch_shares_one_commit(store: Store) -> None:
    lease = claimed(store).lease
    before = store.commit_stats()
    results = store.run_batch(
        [lambda i=i: store.record_entry(lease, step("r1", i, f"s{i}"), T0) for i in range(5)]
    )
    assert results == [(True, True)] * 5
    after = store.commit_stats()
    assert after.commits - before.commits == 1
    assert len(store.journal("r1")) == 5


def test_a_fenced_write_in_a_batch_is_refused_like_any_other(store: Store) -> None:
    lease = claimed(store).lease
    stale = Lease(lease.run_id, lease.fence - 1, lease.owner)
    results = store.run_batch(
        [
            lambda: store.record_entry(stale, step("r1", 0, "late"), T0),
            lambda: store.complete_run(lease, "done", T0, 0.0),
        ]
    )
    assert results == [(True, False), (True, True)]
    assert store.journal("r1") == {}
    assert store.get_run("r1").status is RunStatus.COMPLETED


# ---------------------------------------------------------------- lapse_runs


def test_a_lapsed_lease_is_due_now_noted_and_keeps_its_crash_charge(store: Store) -> None:
    lease = claimed(store, alone=True).lease
    assert store.get_run("r1").solo is True  # claimed to run alone: a crash is its own
    now = T0 + timedelta(seconds=2)
    assert store.lapse_runs([lease], now, "worker process 123 died (exit -9)") == 1
    run = store.get_run("r1")
    assert (run.status, run.lease_until, run.run_at, run.solo) == (
        RunStatus.RUNNING,
        now,
        now,
        True,
    )
    assert events(store, "r1", "worker died") == [
        {"by": OWNER, "reason": "worker process 123 died (exit -9)"}
    ]
    # Reclaimed at once, the crash charged to it (a released run would be charged none).
    (again,), _ = store.claim_due("host-b/2/2/bbbb", now, now + LEASE, 1, alone=True)
    assert (again.lease.fence, again.run.crashes) == (lease.fence + 1, 1)
    assert [e["crashes"] for e in events(store, "r1", "reclaimed")] == [1]


def test_a_released_run_is_reclaimed_uncharged_for_contrast(store: Store) -> None:
    lease = claimed(store, alone=True).lease
    now = T0 + timedelta(seconds=2)
    assert store.release_runs([lease], now, "stopping") == 1
    (again,), _ = store.claim_due("host-b/2/2/bbbb", now, now + LEASE, 1, alone=True)
    assert (again.run.solo, again.run.crashes) == (True, 0)
    assert [e["crashes"] for e in events(store, "r1", "reclaimed")] == [0]


def test_a_lease_lost_meanwhile_does_not_lapse(store: Store) -> None:
    first = claimed(store).lease
    claimed(store, "r2")
    stale = Lease(first.run_id, first.fence - 1, first.owner)
    other_owner = Lease("r2", 1, "host-b/2/2/bbbb")
    before = store.get_run("r1"), store.get_run("r2")
    assert store.lapse_runs([stale, other_owner], T0 + timedelta(seconds=1), "died") == 0
    assert (store.get_run("r1"), store.get_run("r2")) == before
    assert events(store, "r1", "worker died") == events(store, "r2", "worker died") == []
