"""A three-step run costs a bounded number of SQL statements (issue 14, item 2): the fence
check of a step's write also says whether there is suspicion to clear, a completion reads
its parent and schedule under the lease instead of asking for them, and a claim finds its
candidates in one statement. Counted with a trace callback; durability is untouched (each
checkpoint is still its own committed transaction, see test_engine / test_daemon)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from helpers import btrees_per_row

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
from flowctl import workflow

@workflow
def three(ctx, n: int = 0):
    a = ctx.step("one", lambda: n + 1)
    b = ctx.step("two", lambda: a + 1)
    return ctx.step("three", lambda: b + 1)

@workflow
def nap(ctx, n: int = 0):
    a = ctx.step("one", lambda: n + 1)
    ctx.sleep("1s")
    return ctx.step("two", lambda: a + 1)
"""


def test_a_three_step_run_stays_within_its_statement_budget(
    tmp_path: Path, statements: list[str]
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    clock = FakeClock()
    n = 20
    with SqliteStore(tmp_path / "b.db") as store:
        ops.start_many(
            store, f"{tmp_path / 'flows.py'}:three", [{"n": i} for i in range(n)], clock=clock
        )
        statements.clear()
        Daemon(store, clock, DaemonConfig(concurrency=1, claim_batch=1)).tick()
        assert store.count_by_status()[RunStatus.COMPLETED] == n
    # a trigger's program repeats its statement: counted once
    traced = [s for i, s in enumerate(statements) if i == 0 or statements[i - 1] != s]
    per_run = len(traced) / n
    fence_only = [s for s in traced if s.startswith("SELECT 1 FROM runs WHERE run_id")]
    commits = [s for s in traced if s == "COMMIT"]
    # claim, the first two checkpoints, the third with the completion (no step runs between
    # them): each its own durable COMMIT (and one more for the last claim, which finds
    # nothing left)
    assert len(commits) == 4 * n + 1
    assert fence_only == []  # every fence check reads what its write needs
    # 29 since issue 16: the completion also writes the run's notification outbox row, in
    # its own transaction, so no ending is lost before its notification goes out
    # 27 since issue 14's CPU pass: the claim says a fresh run has no journal rows and no
    # version markers (read with its row), so the replay does not read them
    # 20 since the fence checks are folded into the checkpoint's INSERT (its rowcount) and
    # the completion takes the last checkpoint and the claim's parent/schedule
    # 23 since migration 20: the claim moves its runs in run_counts with two statements per
    # claim (of one run each here: claim_batch=1) and the completion with one, where the
    # runs trigger was one traced program per move but ran ~8 µs each (benchmarks/
    # cost_breakdown.py): fewer µs, a few more statements counted at claim_batch 1
    assert per_run <= 23, f"{per_run:.1f} statements per three-step run (was 37 before)"
    assert not [
        s for s in traced if s.startswith(("SELECT change_id", "SELECT run_id, call_index"))
    ]


def test_no_write_of_a_run_builds_a_temporary_btree_per_row(
    tmp_path: Path, statements: list[str]
) -> None:
    """SQLite builds a temporary b-tree for an IN list of three or more values each time it
    evaluates one: in a CHECK, for every row written (the outbox's `state IN (...)` did, at
    every run's ending: about 3 µs). Every write of three-step and sleeping runs' lives
    (claims, checkpoints, a park and its wake, endings with their outbox rows and events)
    is traced and asked for its program: a b-tree built once per statement (behind a
    Once) is allowed, one built per row is not. Statements with RETURNING, which builds
    one per statement, are left out."""
    (tmp_path / "flows.py").write_text(FLOWS)
    clock = FakeClock()
    db = tmp_path / "w.db"
    with SqliteStore(db) as store:
        for name in ("three", "nap"):
            ops.start_many(store, f"{tmp_path / 'flows.py'}:{name}", [{}, {}], clock=clock)
        statements.clear()
        daemon = Daemon(store, clock, DaemonConfig(concurrency=4))
        daemon.tick()
        clock.advance(timedelta(seconds=2))
        daemon.tick()
        assert store.count_by_status()[RunStatus.COMPLETED] == 4
    writes = {
        sql
        for sql in statements
        if sql.startswith(("INSERT", "UPDATE", "DELETE")) and "RETURNING" not in sql
    }
    assert any(sql.startswith("INSERT INTO notifications") for sql in writes)
    assert any(sql.startswith("INSERT INTO journal") for sql in writes)
    assert btrees_per_row(db, writes) == []
