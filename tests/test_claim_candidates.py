"""A claim reads its candidates' rows in one statement and falls back to the next
candidates only when some were passed over (claim_due, SQLite): what it claims is still
the soonest due runs in (run_at, run_id) order, across statuses, suspects held."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers import query

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.model import RunStatus
from flowctl.store.claims import CLAIM_COLUMNS, still_due
from flowctl.store.rows import RUNS
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
from flowctl import workflow

@workflow
def one(ctx):
    return ctx.step("a", lambda: 1)
"""

LEASE = timedelta(seconds=15)


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def _start(store: SqliteStore, flows: Path, clock: FakeClock, n: int) -> list[str]:
    return [ops.start(store, f"{flows}:one", {}, clock=clock).run.run_id for _ in range(n)]


def test_the_soonest_due_runs_are_claimed_in_order(tmp_path: Path, flows: Path) -> None:
    clock = FakeClock()
    with SqliteStore(tmp_path / "c.db") as store:
        ids = []
        for _ in range(5):
            ids += _start(store, flows, clock, 2)
            clock.advance(timedelta(seconds=1))
        now = clock.now()
        order = sorted(ids, key=lambda rid: (store.get_run(rid).run_at, rid))
        got: list[str] = []
        for limit in (3, 1, 4, 8):
            claims, ended = store.claim_due("t/1/1/0", now, now + LEASE, limit)
            assert ended == []
            assert len(claims) == min(limit, len(ids) - len(got))
            got += [c.run.run_id for c in claims]
        assert got == order
        assert {store.get_run(rid).status for rid in ids} == {RunStatus.RUNNING}


def test_runs_passed_over_as_suspects_leave_the_claim_to_the_next_candidates(
    tmp_path: Path, flows: Path
) -> None:
    clock = FakeClock()
    with SqliteStore(tmp_path / "c.db") as store:
        lapsed = _start(store, flows, clock, 3)
        now = clock.now()
        claims, _ = store.claim_due("t/1/1/0", now, now + LEASE, 8)
        assert store.expire_owner("t/1/1/0", now) == 3  # a dead owner's: due now
        clock.advance(timedelta(seconds=1))
        queued = _start(store, flows, clock, 3)  # due after the lapsed ones
        now = clock.now()
        claims, ended = store.claim_due("t/2/1/0", now, now + LEASE, 2)
        assert ended == []
        queued.sort()  # due at the same time: in run_id order
        assert [c.run.run_id for c in claims] == queued[:2]
        for rid in lapsed:  # held for a claimer that runs it alone, each marked once
            run = store.get_run(rid)
            assert (run.status, run.suspect, run.lease_owner) == (
                RunStatus.RUNNING,
                True,
                "t/1/1/0",
            )
        assert store.get_run(queued[2]).status is RunStatus.QUEUED
        claim, _ = store.claim_suspect("t/3/1/0", now, now + LEASE)
        assert claim is not None and claim.run.run_id in lapsed and claim.run.solo


def test_a_candidate_that_ended_after_the_claims_snapshot_is_dropped_not_compared(
    tmp_path: Path, flows: Path
) -> None:
    """PostgreSQL locks a candidate as it is now, not as the claim's snapshot chose it: a
    run another daemon completed meanwhile comes back with no run_at. The claim drops it
    rather than order it beside due runs (a TypeError there once broke a claim)."""
    clock = FakeClock()
    with SqliteStore(tmp_path / "c.db") as store:
        ids = _start(store, flows, clock, 3)
        now = clock.now()
        (claim,), _ = store.claim_due("t/1/1/0", now, now + LEASE, 1)
        store.complete_run(claim.lease, 1, now, 0.0)
        rows = query(tmp_path / "c.db", f"SELECT {CLAIM_COLUMNS} FROM {RUNS}")
        assert len(rows) == 3  # the ended run's row is among them, as PostgreSQL gives it
        assert [r[0] for r in still_due(rows)] == sorted(set(ids) - {claim.run.run_id})
