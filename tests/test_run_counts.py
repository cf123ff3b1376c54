"""Schema for a million runs (issue 14, items 5 and 6): counts kept by triggers, the pinned
source stored once per definition hash, listings merged per status, a bounded search, and
migration 11 moving an older database."""

from __future__ import annotations

import importlib
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store

rows = importlib.import_module("flowctl.store.rows")

FLOWS = """\
from flowctl import workflow

@workflow
def quick(ctx, user: str = "u"):
    return ctx.step("fetch", lambda: user)

@workflow
def nap(ctx, user: str = "u"):
    ctx.sleep(3600)
    return user

@workflow(max_attempts=1)
def fail(ctx, user: str = "u"):
    def boom():
        raise RuntimeError("no")
    ctx.step("boom", boom)
"""
V1 = Path(__file__).resolve().parent / "fixtures" / "v1.db"


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def grouped(db: Path) -> dict[tuple[str, str], int]:
    conn = sqlite3.connect(str(db))
    try:
        real = dict(
            ((w, s), n)
            for w, s, n in conn.execute(
                "SELECT workflow, status, COUNT(*) FROM runs GROUP BY workflow, status"
            )
        )
        kept = {(w, s): n for w, s, n in conn.execute("SELECT * FROM run_counts") if n}
    finally:
        conn.close()
    assert kept == real
    return kept


def test_counts_follow_every_transition(tmp_path: Path, flows: Path) -> None:
    db = tmp_path / "c.db"
    clock = FakeClock()
    with Store(db) as store:
        for name in ("quick", "nap", "fail"):
            ops.start_many(
                store, f"{flows}:{name}", [{"user": str(i)} for i in range(7)], clock=clock
            )
        assert grouped(db) == {("quick", "queued"): 7, ("nap", "queued"): 7, ("fail", "queued"): 7}
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
        assert grouped(db) == {
            ("quick", "completed"): 7,
            ("nap", "sleeping"): 7,
            ("fail", "dead"): 7,
        }
        napping = store.list_runs(statuses=[RunStatus.SLEEPING], limit=2)
        ops.cancel(store, napping[0].run_id, clock=clock)
        ops.pause(store, napping[1].run_id, clock=clock)
        dead = store.list_runs(statuses=[RunStatus.DEAD], limit=1)[0]
        ops.redrive(store, dead.run_id, clock=clock)
        counts = grouped(db)
        assert counts[("nap", "cancelled")] == 1 and counts[("nap", "paused")] == 1
        assert counts[("fail", "queued")] == 1 and counts[("fail", "dead")] == 6
        clock.advance(timedelta(hours=2))
        Daemon(store, clock, DaemonConfig(concurrency=2)).tick()
        grouped(db)
        assert store.count_by_status()[RunStatus.COMPLETED] == 7 + 5
        assert store.count_by_status("nap")[RunStatus.COMPLETED] == 5
        assert store.workflows_seen() == ["fail", "nap", "quick"]
        conn = sqlite3.connect(str(db))
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM runs WHERE workflow = 'quick'")
        conn.commit()
        conn.close()
        assert store.workflows_seen() == ["fail", "nap"]
        assert store.count_by_status("quick") == {s: 0 for s in RunStatus}
    grouped(db)


def test_the_source_is_stored_once_per_definition(tmp_path: Path, flows: Path) -> None:
    db = tmp_path / "s.db"
    clock = FakeClock()
    with Store(db) as store:
        first = ops.start_many(store, f"{flows}:nap", [{}] * 50, clock=clock)
        flows.write_text(FLOWS + "\n# edited\n")
        edited = ops.start(store, f"{flows}:nap", {}, clock=clock).run
        assert store.run_source(first[0].run.run_id)[0] == FLOWS
        assert store.run_source(edited.run_id)[0] == FLOWS + "\n# edited\n"
    conn = sqlite3.connect(str(db))
    try:
        assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 2
        assert conn.execute("SELECT COUNT(*) FROM runs WHERE source IS NOT NULL").fetchone()[0] == 0
    finally:
        conn.close()


def test_migration_11_moves_an_older_database(tmp_path: Path, flows: Path) -> None:
    db = tmp_path / "v10.db"
    clock = FakeClock()
    with Store(db) as store:
        ids = [s.run.run_id for s in ops.start_many(store, f"{flows}:nap", [{}] * 3, clock=clock)]
        ids.append(ops.start(store, f"{flows}:quick", {}, clock=clock).run.run_id)
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.executescript(  # the same rows as schema 10 held them: the text in every run row
        """
        ALTER TABLE runs DROP COLUMN rested_by;  -- migration 25's
        DROP INDEX runs_flow_due;  -- migration 24's (its runs_flow is 22's, dropped below)
        DROP INDEX runs_resumed;  -- migration 23's
        DROP TRIGGER runs_flow_release;  -- migration 22's
        DROP INDEX runs_flow; DROP INDEX runs_flow_held; DROP INDEX runs_priority;
        DROP INDEX runs_flow_wait; DROP INDEX runs_debounce;
        DROP TABLE limit_holds; DROP TABLE limit_starts; DROP TABLE limits;
        ALTER TABLE runs DROP COLUMN priority; ALTER TABLE runs DROP COLUMN flow_key;
        ALTER TABLE runs DROP COLUMN flow_limit; ALTER TABLE runs DROP COLUMN held_at;
        ALTER TABLE runs DROP COLUMN flow_wait; ALTER TABLE runs DROP COLUMN debounce_key;
        ALTER TABLE runs DROP COLUMN traceparent;  -- migration 21's
        CREATE TABLE timeline_rowid (  -- migration 19's: the timeline by rowid, runs_created
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            at INTEGER NOT NULL, type TEXT NOT NULL, data TEXT) STRICT;
        INSERT INTO timeline_rowid (run_id, at, type, data)
            SELECT run_id, at, type, data FROM timeline ORDER BY run_id, seq;
        DROP TABLE timeline; ALTER TABLE timeline_rowid RENAME TO timeline;
        CREATE INDEX timeline_run ON timeline(run_id);
        CREATE INDEX timeline_woke ON timeline(at) WHERE type = 'woke';
        CREATE INDEX runs_created ON runs(created_at);
        DROP INDEX runs_key;  -- (key keeps no UNIQUE of its own: the rebuild needs none)
        ALTER TABLE runs ADD COLUMN target TEXT NOT NULL DEFAULT '';  -- migration 16's
        ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT '';
        ALTER TABLE runs ADD COLUMN source_hash TEXT;
        ALTER TABLE runs ADD COLUMN source_path TEXT;
        ALTER TABLE runs ADD COLUMN cwd TEXT;
        UPDATE runs SET (target, kind, source_hash, source_path, cwd) = (SELECT target, kind,
            source_hash, source_path, cwd FROM definitions d WHERE d.def_id = runs.def_id);
        ALTER TABLE runs DROP COLUMN def_id; DROP TABLE definitions;
        DROP TABLE event_counts;  -- migration 18's (its triggers went with the timeline)
        DROP INDEX timeline_run; CREATE INDEX timeline_run ON timeline(run_id, seq);
        DROP INDEX timeline_woke;  -- migration 15's
        CREATE INDEX timeline_type_at ON timeline(type, at);
        DROP INDEX runs_status_finished;
        CREATE INDEX runs_status_finished ON runs(status, finished_at);
        UPDATE runs SET source = (SELECT source FROM sources s
                                  WHERE s.source_hash = runs.source_hash);
        DROP TABLE sources;
        DROP TRIGGER run_counts_insert; DROP TRIGGER run_counts_delete;
        DROP TRIGGER run_counts_update; DROP TABLE run_counts;
        DROP INDEX runs_workflow; CREATE INDEX runs_workflow ON runs(workflow, created_at);
        DROP INDEX runs_due; CREATE INDEX runs_due ON runs(status, run_at);
        DROP TABLE notifications; ALTER TABLE runs DROP COLUMN notify;  -- migration 13's
        DROP TABLE output;  -- migration 14's
        ALTER TABLE runs DROP COLUMN step_started_at;  -- migration 17's
        PRAGMA user_version = 10;
        """
    )
    conn.close()
    with Store(db) as store:
        assert {store.run_source(rid)[0] for rid in ids} == {FLOWS}
    conn = sqlite3.connect(str(db))
    try:
        assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 1
        assert conn.execute("SELECT COUNT(*) FROM runs WHERE source IS NOT NULL").fetchone()[0] == 0
    finally:
        conn.close()
    assert grouped(db) == {("nap", "queued"): 3, ("quick", "queued"): 1}


def test_migration_11_counts_the_first_schemas_runs(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    shutil.copy(V1, db)
    conn = sqlite3.connect(str(db))
    real = dict(
        ((w, s), n)
        for w, s, n in conn.execute("SELECT workflow, status, COUNT(*) FROM runs GROUP BY 1, 2")
    )
    conn.close()
    assert real, "the fixture has runs to count"
    Store(db).close()
    assert grouped(db) == real


def test_several_statuses_merge_in_order(tmp_path: Path, flows: Path) -> None:
    clock = FakeClock()
    with Store(tmp_path / "m.db") as store:
        for i in range(30):
            name = ("quick", "nap", "fail")[i % 3]
            ops.start(store, f"{flows}:{name}", {"user": str(i)}, clock=clock)
            clock.advance(timedelta(seconds=i % 4))  # ties in created_at, too
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
        every = store.list_runs(limit=1000)
        assert [r.created_at for r in every] == sorted((r.created_at for r in every), reverse=True)
        wanted = [RunStatus.SLEEPING, RunStatus.DEAD]
        expect = [r.run_id for r in every if r.status in wanted]
        got = [
            r.run_id
            for page in range(4)
            for r in store.list_runs(statuses=wanted, limit=6, offset=6 * page)
        ]
        assert got == expect
        only_nap = [r.run_id for r in every if r.workflow == "nap"]
        assert [r.run_id for r in store.list_runs(workflow="nap", limit=100)] == only_nap


def test_search_reads_a_bounded_window_and_exact_ids(
    tmp_path: Path, flows: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows, "SEARCH_WINDOW", 5)
    clock = FakeClock()
    with Store(tmp_path / "w.db") as store:
        old = ops.start(store, f"{flows}:quick", {"user": "needle"}, clock=clock).run
        # 'l' and 'o' are not in the run ids' alphabet: "hayloft" never matches a random id
        for i in range(10):
            clock.advance(timedelta(seconds=1))
            ops.start(store, f"{flows}:quick", {"user": f"hayloft{i}"}, clock=clock)
        clock.advance(timedelta(seconds=1))
        new = ops.start(store, f"{flows}:quick", {"user": "needle"}, clock=clock).run
        assert [r.run_id for r in store.list_runs(search="needle")] == [new.run_id]
        assert [r.run_id for r in store.list_runs(search=old.run_id)] == [old.run_id]
        assert store.count_by_status_matching(None, "needle")[RunStatus.QUEUED] == 1
        assert store.count_by_status_matching(None, "hayloft")[RunStatus.QUEUED] == 4
