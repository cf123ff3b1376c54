"""Migration 20 (issue 14): the runs trigger no longer moves a run into `running` or
`completed` in run_counts; the claim and the completion make those moves themselves. A
database written by schema 18's release (tests/fixtures/v18.db) with a run that an old
daemon claimed (counted by the old trigger) and then lost keeps exact counts through the
migration, that run's reclaim and completion, the first completion of a workflow that
had none, and every wake after; and a batch claim of many runs of several workflows moves
each exactly once.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import execute, query

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import SCHEMA_VERSION
from flowctl.store.sqlite import SqliteStore

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORD: dict[str, Any] = json.loads((FIXTURES / "v18.json").read_text())


def stored_counts(db: Path) -> dict[tuple[str, str], int]:
    rows = query(db, "SELECT workflow, status, n FROM run_counts WHERE n != 0")
    return {(w, s): n for w, s, n in rows}


def real_counts(db: Path) -> dict[tuple[str, str], int]:
    rows = query(db, "SELECT workflow, status, COUNT(*) FROM runs GROUP BY 1, 2")
    return {(w, s): n for w, s, n in rows}


def trigger_sql(db: Path) -> str:
    sql = "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'run_counts_update'"
    return str(query(db, sql)[0][0])


def test_counts_stay_exact_through_the_migration_and_the_runs_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))  # v14_flows, the fixture's workflows
    db = tmp_path / "v18.db"
    shutil.copy(FIXTURES / "v18.db", db)
    queued = [k for k, v in RECORD["runs"].items() if v["run"]["status"] == "queued"]
    assert len(queued) == 1
    made_at = datetime.fromisoformat(max(v["run"]["created_at"] for v in RECORD["runs"].values()))
    # An old daemon claims the queued run (its trigger counts the move) and dies holding it.
    lapsed = int((made_at - datetime(1970, 1, 1, tzinfo=made_at.tzinfo)).total_seconds() * 1e6)
    execute(
        db,
        "UPDATE runs SET status = 'running', lease_owner = 'gone/1/1/0', lease_until = ?,"
        " run_at = ?, fence = fence + 1 WHERE run_id = ?",
        (lapsed, lapsed, queued[0]),
    )
    assert stored_counts(db) == real_counts(db)
    assert "'running', 'completed'" not in trigger_sql(db)

    clock = FakeClock(made_at + timedelta(hours=3))  # past every sleep and the lapsed lease
    with SqliteStore(db) as store:
        assert "NOT IN ('running', 'completed')" in trigger_sql(db)  # migrated
        assert SCHEMA_VERSION >= 20
        assert stored_counts(db) == real_counts(db)
        daemon = Daemon(store, clock, DaemonConfig(concurrency=2))
        for _ in range(8):
            daemon.tick()
            assert stored_counts(db) == real_counts(db)
        assert store.get_run(queued[0]).status is RunStatus.COMPLETED  # reclaimed, then done
        followups = [k for k, v in RECORD["runs"].items() if v["run"]["workflow"] == "followup"]
        assert RECORD["counts"]["completed"] == 3  # none of them a followup: its first here
        assert {store.get_run(r).status for r in followups} == {RunStatus.COMPLETED}
        assert stored_counts(db)[("followup", "completed")] == len(followups)


FLOWS = """\
from flowctl import workflow

@workflow
def a(ctx, n: int = 0):
    return ctx.step("one", lambda: n)

@workflow
def b(ctx, n: int = 0):
    ctx.sleep(60)
    return n
"""


def test_a_batch_claim_moves_each_run_once(tmp_path: Path) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    db = tmp_path / "x.db"
    clock = FakeClock()
    with SqliteStore(db) as store:
        for fn in ("a", "b"):
            ops.start_many(store, f"{flows}:{fn}", [{"n": i} for i in range(40)], clock=clock)
        now = clock.now()
        claims, _ = store.claim_due("me/1/1/0", now, now + timedelta(seconds=30), 50)
        assert len(claims) == 50
        by = Counter((c.run.workflow, "running") for c in claims)
        assert stored_counts(db) == real_counts(db)
        assert {k: v for k, v in stored_counts(db).items() if k[1] == "running"} == dict(by)
        daemon = Daemon(store, clock, DaemonConfig(concurrency=64))
        clock.advance(60)  # the claimed runs' leases lapse: the daemon reclaims them
        while daemon.tick():
            assert stored_counts(db) == real_counts(db)
        clock.advance(61)  # the sleepers of b wake and finish
        while daemon.tick():
            assert stored_counts(db) == real_counts(db)
        assert store.count_by_status()[RunStatus.COMPLETED] == 80
