"""Migration 19 (issue 14, item 6): a database written by schema 18 (tests/fixtures/v18.db,
made by that release's own Store with tests/fixtures/make_v18_db.py) is moved to the
timeline keyed by (run_id, seq) and the rebuilt runs table, and reads back exactly what
schema 18 read (v18.json): every run, checkpoint and timeline event, the listing order
(the rowids are kept), the keys, the counts. Then its sleepers wake and finish, and
their new events follow the old ones. A database the rebuild would leave inconsistent is
refused, unchanged.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import DatabaseError
from flowctl.model import RunStatus
from flowctl.store import SCHEMA_VERSION
from flowctl.store.sqlite import SqliteStore

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORD: dict[str, Any] = json.loads((FIXTURES / "v18.json").read_text())


def rows(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params or []).fetchall()
    finally:
        conn.close()


def version(db: Path) -> int:
    return int(rows(db, "PRAGMA user_version")[0][0])


@pytest.fixture
def v18(tmp_path: Path) -> Path:
    db = tmp_path / "v18.db"
    shutil.copy(FIXTURES / "v18.db", db)
    assert version(db) == 18
    return db


@pytest.fixture
def migrated(v18: Path) -> Path:
    with SqliteStore(v18):
        pass  # opening migrates
    assert version(v18) == SCHEMA_VERSION >= 19
    return v18


def test_every_run_reads_back_as_schema_18_read_it(migrated: Path) -> None:
    with SqliteStore(migrated) as store:
        assert len(RECORD["runs"]) == 10
        for run_id, want in RECORD["runs"].items():
            assert store.get_run(run_id).to_json() == want["run"]
            assert [e.to_json() for e in store.journal(run_id).values()] == want["journal"]
            assert [e.to_json() for e in store.timeline(run_id)] == want["timeline"]
            assert list(store.run_source(run_id)) == [want["source"], want["source_hash"]]
        assert [r.run_id for r in store.list_runs(limit=50)] == RECORD["order"]
        assert {str(s): n for s, n in store.count_by_status().items()} == RECORD["counts"]
        assert store.metrics_snapshot([0.1], [0.1]).claims == RECORD["claims"]
        for key, run_id in RECORD["keys"].items():
            got = store.get_run_by_key(key)
            assert got is not None and got.run_id == run_id
        assert store.get_run_by_key("no-such-key") is None


def test_the_schema_holds_no_index_a_sleeping_run_does_not_need(v18: Path) -> None:
    before = dict(rows(v18, "SELECT run_id, rowid FROM runs"))
    counted = rows(v18, "SELECT COUNT(*) FROM timeline")[0][0]
    with SqliteStore(v18):
        pass
    sql = {name: text for name, text in rows(v18, "SELECT name, sql FROM sqlite_master")}
    assert "PRIMARY KEY (run_id, seq)" in sql["timeline"] and "WITHOUT ROWID" in sql["timeline"]
    for gone in ("timeline_run", "runs_created", "sqlite_autoindex_runs_2", "runs_rebuilt"):
        assert gone not in sql
    assert "WHERE key IS NOT NULL" in sql["runs_key"]
    for kept in ("runs_due", "runs_workflow", "runs_status_created", "runs_status_finished"):
        assert kept in sql  # put back after the rebuild, as they were
    for trigger in ("run_counts_insert", "run_counts_update", "event_counts_insert"):
        assert trigger in sql
    assert dict(rows(v18, "SELECT run_id, rowid FROM runs")) == before
    assert rows(v18, "SELECT COUNT(*) FROM timeline")[0][0] == counted
    # Each run's events are numbered 1, 2 ... in the order they were written.
    for (run_id,) in rows(v18, "SELECT DISTINCT run_id FROM timeline"):
        seqs = [s for (s,) in rows(v18, "SELECT seq FROM timeline WHERE run_id = ?", [run_id])]
        assert seqs == list(range(1, len(seqs) + 1))
    assert rows(v18, "PRAGMA foreign_key_check") == []


def test_keys_stay_unique(migrated: Path) -> None:
    clock = FakeClock()
    with SqliteStore(migrated) as store:
        again = ops.start(store, "v14_flows:quick", {"user": "x"}, clock=clock, key="k-1")
        assert again.run.run_id == RECORD["keys"]["k-1"]  # the idempotency key still holds
    conn = sqlite3.connect(migrated)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            conn.execute(
                "INSERT INTO runs (run_id, workflow, input, status, created_at, key)"
                " VALUES ('dup', 'w', '{}', 'queued', 0, 'k-2')"
            )
    finally:
        conn.close()


def test_the_sleepers_wake_and_their_new_events_follow_the_old(
    migrated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))  # v14_flows, the fixture's workflows
    sleeping = [k for k, v in RECORD["runs"].items() if v["run"]["status"] == "sleeping"]
    assert len(sleeping) == 4
    made_at = max(v["run"]["created_at"] for v in RECORD["runs"].values())
    clock = FakeClock(datetime.fromisoformat(made_at) + timedelta(hours=3))  # past every sleep
    with SqliteStore(migrated) as store:
        daemon = Daemon(store, clock, DaemonConfig(concurrency=2))
        for _ in range(4):
            daemon.tick()
        for run_id in sleeping:
            run = store.get_run(run_id)
            assert run.status is RunStatus.COMPLETED, run_id
            events = [e.to_json() for e in store.timeline(run_id)]
            old = RECORD["runs"][run_id]["timeline"]
            assert events[: len(old)] == old
            assert [e["type"] for e in events[len(old) :]] == ["woke", "claimed", "completed"]
        counts = store.count_by_status()
        assert counts[RunStatus.SLEEPING] == 0
        assert counts[RunStatus.COMPLETED] == RECORD["counts"]["completed"] + 4
        # A pruned run's events go with it (the key's cascade), as before.
        clock.advance(timedelta(days=40))
        pruned = store.prune_runs([RunStatus.COMPLETED], clock.now(), 100)
        assert set(sleeping) <= {p.run_id for p in pruned}
    assert rows(migrated, "SELECT COUNT(*) FROM timeline WHERE run_id IN (?,?,?,?)", sleeping) == [
        (0,)
    ]


def test_a_database_the_rebuild_would_break_is_refused_unchanged(v18: Path) -> None:
    conn = sqlite3.connect(v18)  # foreign keys off: an orphan checkpoint, written by hand
    try:
        conn.execute(
            "INSERT INTO journal (run_id, call_index, kind, name, state, recorded_at)"
            " VALUES ('no-such-run', 0, 'step', 'a', 'done', 0)"
        )
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(DatabaseError, match="journal row whose runs is missing"):
        SqliteStore(v18)
    assert version(v18) == 18
    assert rows(v18, "SELECT COUNT(*) FROM timeline")[0][0] > 0
    assert "timeline_run" in {n for (n,) in rows(v18, "SELECT name FROM sqlite_master")}
