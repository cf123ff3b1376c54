"""A claim says what it saw of the run's journal (issue 14, item 2): a fresh run's claim
carries an empty journal and no version markers, read with its row, so the replay makes
no read for them; a run with checkpoints is read as before, and replays them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
from flowctl import workflow

@workflow
def napper(ctx):
    a = ctx.step("before", lambda: 1)
    ctx.sleep(60)
    return ctx.step("after", lambda: a + 1)
"""


def test_a_fresh_claim_says_there_is_nothing_to_read_and_a_resumed_one_reads(
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
        assert resumed.journal is None and resumed.versions == {}
        store.release_runs([resumed.lease], now, "test")
        clock.advance(timedelta(seconds=1))
        daemon.tick()
        run = store.get_run(run_id)
        assert run.status is RunStatus.COMPLETED and run.result == 2
        assert [e.name for e in store.journal(run_id).values()] == ["before", "sleep", "after"]
