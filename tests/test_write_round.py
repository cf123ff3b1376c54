"""The write round (flowctl.store.round): on the batch runner's thread every store write is
queued in the round, not a transaction of its own; the round's commit writes them all in
one transaction with one COMMIT; each write still returns only after that COMMIT, a lost
lease is still refused (alone, while the round's other writes go in), and an error
reaches the writer it belongs to. Both backends offer it through the Store protocol.

Driven as the runner drives it (tests/helpers.ParkedRound): greenlets park until the
test, as the runner's main greenlet, commits the round and then resumes them.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import ParkedRound, execute

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import Claim, Store
from flowctl.store.round import Write

FLOWS = """\
from flowctl import workflow

@workflow
def one(ctx, n: int = 0):
    return ctx.step("one", lambda: n)
"""


def claims(store: Store, tmp_path: Path, clock: FakeClock, n: int) -> list[Claim]:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    ops.start_many(store, f"{flows}:one", [{"n": i} for i in range(n)], clock=clock)
    now = clock.now()
    got, _ = store.claim_due("me/1/1/0", now, now + timedelta(seconds=30), n)
    assert len(got) == n
    return got


def lock_free(path: str) -> bool:
    """Whether another connection could take a SQLite file's write lock now."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def is_pg(store: Store) -> bool:
    return store.location.startswith("postgres")


def entry(claim: Claim) -> JournalEntry:
    return JournalEntry(
        claim.run.run_id, 0, CallKind.STEP, "one", EntryState.DONE, claim.run.input["n"]
    )


def checkpointer(
    store: Store, claim: Claim, clock: FakeClock, results: dict[str, bool]
) -> Callable[[], None]:
    """A greenlet's body: checkpoint `claim`'s step, and note what the write returned."""

    def write() -> None:
        ok = store.record_entry(claim.lease, entry(claim), clock.now(), suspicion=False)
        results[claim.run.run_id] = ok

    return write


def move_fence(store: Store, run_id: str) -> None:
    """Another claimer moved the fence meanwhile (its own connection)."""
    assert execute(store.location, "UPDATE runs SET fence = fence + 1 WHERE run_id = ?", (run_id,))


def test_a_rounds_checkpoints_are_one_commit_and_durable_when_they_return(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    held = claims(store, tmp_path, fake_clock, 20)
    runner = ParkedRound(store)
    results: dict[str, bool] = {}
    before = store.commit_stats()
    for claim in held:
        runner.start(checkpointer(store, claim, fake_clock, results))
    assert len(runner.parked) == 20 and results == {}  # each waits for its round
    assert runner.round.pending == 20
    assert store.journal(held[0].run.run_id) == {}  # nothing written before the round
    if not is_pg(store):
        assert lock_free(store.path)  # and no transaction opened for them: they are queued
    runner.write_round()
    assert results == {c.run.run_id: True for c in held}
    after = store.commit_stats()
    assert after.commits - before.commits == 1  # the round's one COMMIT
    assert after.writes - before.writes == 20  # ... made every write durable
    for claim in held:
        assert store.journal(claim.run.run_id)[0].value == claim.run.input["n"]
    runner.close()


def test_a_lost_lease_is_refused_alone_and_the_rounds_other_rows_are_written(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    held = claims(store, tmp_path, fake_clock, 6)
    runner = ParkedRound(store)
    results: dict[str, bool] = {}
    for claim in held:
        runner.start(checkpointer(store, claim, fake_clock, results))
    lost = held[2].run.run_id
    move_fence(store, lost)
    runner.write_round()
    assert results == {c.run.run_id: c.run.run_id != lost for c in held}
    assert store.journal(lost) == {}
    assert all(store.journal(c.run.run_id) for c in held if c.run.run_id != lost)
    runner.close()


def test_a_failing_write_raises_in_its_own_writer_and_the_round_commits(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    held = claims(store, tmp_path, fake_clock, 2)
    runner = ParkedRound(store)
    outcome: dict[str, object] = {}

    def bad() -> None:
        try:
            runner.round.add(Write(lambda tx: tx.execute("INSERT INTO no_such_table VALUES (1)")))
        except Exception as e:
            outcome["bad"] = str(e)

    def good() -> None:
        c = held[0]
        outcome["good"] = store.record_entry(c.lease, entry(c), fake_clock.now(), suspicion=False)

    def suspend() -> None:  # a write that is not a checkpoint: runs alone, in the round
        c = held[1]
        applied = store.suspend_run(
            c.lease, RunStatus.SLEEPING, fake_clock.now() + timedelta(hours=1),
            fake_clock.now(), 0.1, None, ("sleeping", {}),
        )  # fmt: skip
        outcome["suspend"] = None if applied is None else applied.status

    runner.start(bad)
    runner.start(good)
    runner.start(suspend)
    runner.write_round()
    assert outcome["good"] is True and "no_such_table" in str(outcome["bad"])
    assert outcome["suspend"] is RunStatus.SLEEPING
    assert store.journal(held[0].run.run_id)[0].value == held[0].run.input["n"]
    assert store.get_run(held[1].run.run_id).status is RunStatus.SLEEPING
    runner.close()


def test_outside_a_round_a_checkpoint_commits_itself(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    [claim] = claims(store, tmp_path, fake_clock, 1)
    before = store.commit_stats().commits
    assert store.record_entry(claim.lease, entry(claim), fake_clock.now(), suspicion=False)
    assert store.commit_stats().commits - before == 1


@pytest.mark.parametrize("lose", [None, 5], ids=["all-held", "one-lost"])
def test_a_rounds_completions_are_written_together_and_a_lost_lease_alone_is_refused(
    store: Store, tmp_path: Path, fake_clock: FakeClock, lose: int | None
) -> None:
    """Completions with their last checkpoint: each run's row, journal, event, outbox row
    and count, in one COMMIT (all by one statement each when every lease held, run by run
    when one was lost); the run whose lease was lost keeps none of them."""
    held = claims(store, tmp_path, fake_clock, 8)
    runner = ParkedRound(store)
    results: dict[str, bool] = {}

    def completer(claim: Claim) -> Callable[[], None]:
        def complete() -> None:
            results[claim.run.run_id] = store.complete_run(
                claim.lease,
                claim.run.input["n"] * 10,
                fake_clock.now(),
                0.001,
                entry=entry(claim),
                links=(None, None),
            )

        return complete

    for claim in held:
        runner.start(completer(claim))
    assert results == {}
    lost = None if lose is None else held[lose].run.run_id
    if lost is not None:
        move_fence(store, lost)
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
    runner.close()


def test_the_runners_own_write_commits_its_round_at_once(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    """The runner's own greenlet has nobody to resume it: its write's wait commits the
    round itself, and the write returns durable."""
    [claim] = claims(store, tmp_path, fake_clock, 1)
    runner = ParkedRound(store)
    before = store.commit_stats().commits
    results: dict[str, bool] = {}
    checkpointer(store, claim, fake_clock, results)()  # on the main greenlet
    assert results == {claim.run.run_id: True}
    assert store.commit_stats().commits - before == 1
    assert store.journal(claim.run.run_id)[0].value == claim.run.input["n"]
    runner.close()


def test_a_round_is_per_thread_and_one_at_a_time(store: Store) -> None:
    opened: list[str] = []

    def other_thread() -> None:
        with store.write_round(lambda: None):
            opened.append("other")

    with store.write_round(lambda: None):
        with pytest.raises(RuntimeError, match="already open"):  # noqa: SIM117
            with store.write_round(lambda: None):
                opened.append("nested")
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(10)
    assert opened == ["other"]  # a round of its own on another thread
