"""Deferred checkpoints (issue 14): on the batch runner's thread a one-statement checkpoint
is not a transaction of its own but a row of the round's one executemany, run by the
round before its other writers; each still returns only after the COMMIT that holds it,
a lost lease is still refused (alone, while the round's other rows are written), and an
error reaches the writer it belongs to.

Driven as the runner drives them (tests/helpers.ParkedRound): greenlets park on the
store's parker, and the test, as the runner's main greenlet, runs the round
(write_deferred, the other writers, commit_pending) and then resumes them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import ParkedRound

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.errors import FlowctlError
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import Claim
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
from flowctl import workflow

@workflow
def one(ctx, n: int = 0):
    return ctx.step("one", lambda: n)
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore(tmp_path / "d.db") as s:
        yield s


def claims(store: SqliteStore, tmp_path: Path, clock: FakeClock, n: int) -> list[Claim]:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    ops.start_many(store, f"{flows}:one", [{"n": i} for i in range(n)], clock=clock)
    now = clock.now()
    got, _ = store.claim_due("me/1/1/0", now, now + timedelta(seconds=30), n)
    assert len(got) == n
    return got


def lock_free(path: str) -> bool:
    """Whether another connection could take the write lock now."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def entry(claim: Claim, clock: FakeClock) -> JournalEntry:
    return JournalEntry(
        claim.run.run_id, 0, CallKind.STEP, "one", EntryState.DONE, claim.run.input["n"]
    )


def checkpointer(
    store: SqliteStore, claim: Claim, clock: FakeClock, results: dict[str, bool]
) -> Callable[[], None]:
    """A greenlet's body: checkpoint `claim`'s step, and note what the write returned."""

    def write() -> None:
        ok = store.record_entry(claim.lease, entry(claim, clock), clock.now(), suspicion=False)
        results[claim.run.run_id] = ok

    return write


def test_a_rounds_checkpoints_are_one_commit_and_durable_when_they_return(
    store: SqliteStore, tmp_path: Path, fake_clock: FakeClock
) -> None:
    held = claims(store, tmp_path, fake_clock, 20)
    runner = ParkedRound(store, rounds=True)
    results: dict[str, bool] = {}
    before = store.commit_stats().commits
    for claim in held:
        runner.start(checkpointer(store, claim, fake_clock, results))
    assert len(runner.parked) == 20 and results == {}  # each waits for its round
    assert store.journal(held[0].run.run_id) == {}  # nothing written before the round
    assert lock_free(store.path)  # and no transaction opened for them: they are deferred
    runner.write_round()
    assert results == {c.run.run_id: True for c in held}
    assert store.commit_stats().commits - before == 1
    for claim in held:
        assert store.journal(claim.run.run_id)[0].value == claim.run.input["n"]


def test_a_lost_lease_is_refused_alone_and_the_rounds_other_rows_are_written(
    store: SqliteStore, tmp_path: Path, fake_clock: FakeClock
) -> None:
    held = claims(store, tmp_path, fake_clock, 6)
    runner = ParkedRound(store, rounds=True)
    results: dict[str, bool] = {}
    for claim in held:
        runner.start(checkpointer(store, claim, fake_clock, results))
    assert lock_free(store.path)
    lost = held[2].run.run_id
    other = sqlite3.connect(store.path)  # another claimer moved the fence meanwhile
    other.execute("UPDATE runs SET fence = fence + 1 WHERE run_id = ?", [lost])
    other.commit()
    other.close()
    runner.write_round()
    assert results == {c.run.run_id: c.run.run_id != lost for c in held}
    assert store.journal(lost) == {}
    assert all(store.journal(c.run.run_id) for c in held if c.run.run_id != lost)


def test_a_failing_deferred_statement_raises_in_its_own_writer(
    store: SqliteStore, tmp_path: Path, fake_clock: FakeClock
) -> None:
    held = claims(store, tmp_path, fake_clock, 2)
    runner = ParkedRound(store, rounds=True)
    outcome: list[object] = []

    def bad() -> None:
        try:
            store.deferred("INSERT INTO no_such_table VALUES (?)", [1])
        except FlowctlError as e:
            outcome.append(str(e))

    def good() -> None:
        c = held[0]
        ok = store.record_entry(c.lease, entry(c, fake_clock), fake_clock.now(), suspicion=False)
        outcome.append(ok)

    runner.start(bad)
    runner.start(good)
    runner.write_round()
    assert outcome[1] is True and "no_such_table" in str(outcome[0])
    assert store.journal(held[0].run.run_id)[0].value == held[0].run.input["n"]


def test_outside_the_runner_a_checkpoint_writes_itself(
    store: SqliteStore, tmp_path: Path, fake_clock: FakeClock
) -> None:
    [claim] = claims(store, tmp_path, fake_clock, 1)
    assert store.deferred("SELECT 1", []) is None  # no parker here: not deferred
    before = store.commit_stats().commits
    assert store.record_entry(claim.lease, entry(claim, fake_clock), fake_clock.now(),
                              suspicion=False)  # fmt: skip
    assert store.commit_stats().commits - before == 1


@pytest.mark.parametrize("lose", [None, 5], ids=["all-held", "one-lost"])
def test_a_rounds_completions_are_written_together_and_a_lost_lease_alone_is_refused(
    store: SqliteStore, tmp_path: Path, fake_clock: FakeClock, lose: int | None
) -> None:
    """Completions with their last checkpoint, deferred: each run's row, journal, event,
    outbox row and count, in one COMMIT (all by one statement each when every lease held,
    run by run when one was lost); the run whose lease was lost keeps none of them."""
    held = claims(store, tmp_path, fake_clock, 8)
    runner = ParkedRound(store, rounds=True)
    results: dict[str, bool] = {}

    def completer(claim: Claim) -> Callable[[], None]:
        def complete() -> None:
            results[claim.run.run_id] = store.complete_run(
                claim.lease,
                claim.run.input["n"] * 10,
                fake_clock.now(),
                0.001,
                entry=entry(claim, fake_clock),
                links=(None, None),
            )

        return complete

    for claim in held:
        runner.start(completer(claim))
    assert lock_free(store.path) and results == {}
    lost = None if lose is None else held[lose].run.run_id
    other = sqlite3.connect(store.path)
    other.execute("UPDATE runs SET fence = fence + 1 WHERE run_id = ?", [lost])
    other.commit()
    other.close()
    before = store.commit_stats().commits
    runner.write_round()
    assert store.commit_stats().commits - before == 1
    assert results == {c.run.run_id: c.run.run_id != lost for c in held}
    for claim in held:
        run = store.get_run(claim.run.run_id)
        events = [e.type for e in store.timeline(claim.run.run_id)]
        if claim.run.run_id == lost:
            assert run.status is RunStatus.RUNNING and store.journal(lost) == {}
            assert "completed" not in events
        else:
            assert (run.status, run.result) == (RunStatus.COMPLETED, claim.run.input["n"] * 10)
            assert store.journal(claim.run.run_id)[0].value == claim.run.input["n"]
            assert events[-1] == "completed"
    counts = store.count_by_status()
    expect = (8, 0) if lost is None else (7, 1)
    assert (counts[RunStatus.COMPLETED], counts[RunStatus.RUNNING]) == expect
    told = {n.run_id for n in store.due_notifications(fake_clock.now(), limit=100)}
    assert told == {c.run.run_id for c in held if c.run.run_id != lost}


def test_a_deferred_write_resumed_before_any_round_writes_and_commits_it_itself(
    store: SqliteStore, tmp_path: Path, fake_clock: FakeClock
) -> None:
    """The runner's own greenlet parks by committing and returning at once (no round will
    resume it later): its deferred write then runs and commits the round itself."""
    [claim] = claims(store, tmp_path, fake_clock, 1)
    store.set_group_commit(True)
    store.set_parker(lambda: None, lambda: None)
    try:
        before = store.commit_stats().commits
        results: dict[str, bool] = {}
        checkpointer(store, claim, fake_clock, results)()
        assert results == {claim.run.run_id: True}
        assert store.commit_stats().commits - before == 1
    finally:
        store.set_parker(None)
        store.set_group_commit(False)
    assert store.journal(claim.run.run_id)[0].value == claim.run.input["n"]
