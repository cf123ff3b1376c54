"""A claim says what it saw of the run's journal (issue 14, item 2): a fresh run's claim
carries an empty journal and no version markers, read with its row, so the replay makes
no read for them; a run with checkpoints gets them read by its claim, in the claim's
transaction (issue 40, item 1: a wake's replay costs no statement), up to a bound past
which a run reads its own as before."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers import query

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import EntryState, RunStatus
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
from flowctl import workflow

@workflow
def napper(ctx):
    a = ctx.step("before", lambda: 1)
    ctx.sleep(60)
    return ctx.step("after", lambda: a + 1)
"""


def test_a_fresh_claim_says_there_is_nothing_to_read_and_a_resumed_one_carries_its_journal(
    tmp_path: Path,
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    clock = FakeClock()
    with SqliteStore(tmp_path / "c.db") as store:
        run_id = ops.start(store, f"{tmp_path / 'flows.py'}:napper", {}, clock=clock).run.run_id
        now = clock.now()
        (claim,), _ = store.claim_due("t/1/1/0", now, now + timedelta(seconds=15), 8)
        assert (claim.journal, claim.versions) == ({}, {})
        store.release_runs([claim.lease], now, "test")  # hand it back to the daemon
        daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
        daemon.tick()
        run = store.get_run(run_id)
        assert run.status is RunStatus.SLEEPING and len(store.journal(run_id)) == 2
        clock.advance(timedelta(seconds=61))
        now = clock.now()
        (resumed,), _ = store.claim_due("t/1/1/0", now, now + timedelta(seconds=15), 8)
        # As the store has it after the claim: its step, and its sleep resolved by the claim.
        assert resumed.journal == store.journal(run_id) and resumed.versions == {}
        assert [e.state for e in resumed.journal.values()] == [EntryState.DONE] * 2
        store.release_runs([resumed.lease], now, "test")
        clock.advance(timedelta(seconds=1))
        daemon.tick()
        run = store.get_run(run_id)
        assert run.status is RunStatus.COMPLETED and run.result == 2
        assert [e.name for e in store.journal(run_id).values()] == ["before", "sleep", "after"]


def test_one_claim_of_fresh_woken_and_reclaimed_runs_writes_each_runs_timeline_in_order(
    tmp_path: Path,
) -> None:
    """A claim transaction writes the claimed runs' timeline rows together: each run still
    gets its own rows in order with the next seq numbers — `claimed` for a fresh run,
    `woke` then `claimed` for a sleeper whose time came — among the rows of a run passed
    over in the same transaction (a lapsed lease makes it a suspect), and a later claim
    appends after them (`reclaimed`, by a claimer that runs the suspect alone)."""
    (tmp_path / "flows.py").write_text(FLOWS)
    clock = FakeClock()
    target = f"{tmp_path / 'flows.py'}:napper"
    db = tmp_path / "c.db"
    with SqliteStore(db) as store:
        sleeper = ops.start(store, target, {}, clock=clock).run.run_id
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()  # it sleeps 60 s
        lapsed = ops.start(store, target, {}, clock=clock).run.run_id
        now = clock.now()
        store.claim_due("dead/1/1/0", now, now + timedelta(seconds=15), 8)  # never heard of again
        clock.advance(timedelta(seconds=61))
        fresh = ops.start(store, target, {}, clock=clock).run.run_id
        now = clock.now()
        claims, ended = store.claim_due("t/1/1/0", now, now + timedelta(seconds=15), 8)
        assert ended == [] and {c.run.run_id for c in claims} == {sleeper, fresh}
        # A wake's claim says so (the batch runner starts it first), a fresh one's does not.
        assert {c.run.run_id: c.wakes for c in claims} == {sleeper: True, fresh: False}

        def tail(run_id: str, n: int) -> list[str]:
            rows = query(
                db, "SELECT seq, type FROM timeline WHERE run_id = ? ORDER BY seq", (run_id,)
            )
            assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
            return [t for _, t in rows[-n:]]

        assert tail(fresh, 1) == ["claimed"]
        assert tail(sleeper, 3) == ["sleep started", "woke", "claimed"]
        assert tail(lapsed, 2) == ["claimed", "suspect"]
        suspect, _ = store.claim_suspect("t/1/1/0", now, now + timedelta(seconds=15))
        assert suspect is not None and suspect.run.run_id == lapsed and not suspect.wakes
        assert tail(lapsed, 3) == ["claimed", "suspect", "reclaimed"]


def test_a_woken_runs_replay_reads_nothing_and_a_journal_past_the_bound_is_read_by_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three sleepers wake in one claim: with room for all their rows the replays read no
    journal; with the bound cutting them, the runs it did not carry read their own, and
    every run still ends with its journal replayed, not run again."""
    (tmp_path / "flows.py").write_text(FLOWS)
    assert _journal_reads_at_wake(tmp_path, monkeypatch, bound=64) == 0
    assert _journal_reads_at_wake(tmp_path, monkeypatch, bound=3) == 2  # 2 rows each


def _journal_reads_at_wake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: int) -> int:
    from flowctl.store import prefetch

    monkeypatch.setattr(prefetch, "JOURNAL_ROWS", bound)
    clock = FakeClock()
    target = f"{tmp_path / 'flows.py'}:napper"
    with SqliteStore(tmp_path / f"b{bound}.db") as store:
        ids = [ops.start(store, target, {}, clock=clock).run.run_id for _ in range(3)]
        daemon = Daemon(store, clock, DaemonConfig(concurrency=8))
        daemon.tick()  # all three sleep 60 s
        clock.advance(timedelta(seconds=61))
        reads: list[str] = []
        real = store.journal
        with monkeypatch.context() as m:
            m.setattr(store, "journal", lambda rid: reads.append(rid) or real(rid))
            daemon.tick()
        for rid in ids:
            run = store.get_run(rid)
            assert run.status is RunStatus.COMPLETED and run.result == 2
            journal = store.journal(rid).values()
            assert [(e.name, e.tries) for e in journal] == [
                ("before", 1),
                ("sleep", 0),
                ("after", 1),
            ]
    return len(reads)
