"""Disk per run (issue 14, item 6): a database written by schema 14 (tests/fixtures/v14.db,
made by that release's own Store with tests/fixtures/make_v14_db.py) is moved forward by
the migrations, and reads back exactly what schema 14 read (v14.json): every run, every
checkpoint, every timeline event, every pinned source, the counts. Then its runs go on.
The indexes hold what the queries need and no more (test_query_plans checks the plans).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import SCHEMA_VERSION
from flowctl.store.sqlite import SqliteStore

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORD: dict[str, Any] = json.loads((FIXTURES / "v14.json").read_text())
MADE_AT = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
FLOWS = (FIXTURES / "v14_flows.py").read_text()


def utc(value: Any) -> Any:
    """JSON with every UTC time spelled one way ('Z'): flowctl's --json spelling moved from
    '+00:00' to 'Z' after schema 14 (a rendering change, not a stored one)."""
    if isinstance(value, dict):
        return {k: utc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [utc(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", value):
        return value[: -len("+00:00")] + "Z"
    return value


@pytest.fixture
def migrated(tmp_path: Path) -> Path:
    db = tmp_path / "v14.db"
    shutil.copy(FIXTURES / "v14.db", db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 14
    with SqliteStore(db):
        pass  # opening migrates
    return db


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def schema(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master")}
    finally:
        conn.close()


def test_a_schema_14_database_reads_back_as_schema_14_read_it(migrated: Path) -> None:
    assert sqlite3.connect(migrated).execute("PRAGMA user_version").fetchone()[0] == (
        SCHEMA_VERSION
    )
    with SqliteStore(migrated) as store:
        assert len(RECORD["runs"]) == 9
        for run_id, want in RECORD["runs"].items():
            assert utc(store.get_run(run_id).to_json()) == utc(want["run"])
            journal = [e.to_json() for e in store.journal(run_id).values()]
            assert utc(journal) == utc(want["journal"])
            timeline = [e.to_json() for e in store.timeline(run_id)]
            assert utc(timeline) == utc(want["timeline"])
            assert list(store.run_source(run_id)) == [want["source"], want["source_hash"]]
        assert {str(s): n for s, n in store.count_by_status().items()} == RECORD["counts"]
        finished = store.list_runs(statuses=[RunStatus.COMPLETED], order="finished_desc")
        assert len(finished) == RECORD["counts"]["completed"]


def test_the_indexes_hold_only_what_their_queries_read(migrated: Path) -> None:
    sql = schema(migrated)
    assert "timeline_type_at" not in sql
    assert "WHERE type = 'woke'" in sql["timeline_woke"]
    assert "timeline_claims" not in sql  # claims are counted by triggers (migration 18)
    assert "event_counts_insert" in sql and "event_counts_delete" in sql
    # The timeline is keyed by (run_id, seq) (migration 19): no index of run_id beside it.
    assert "timeline_run" not in sql and "runs_created" not in sql
    assert "PRIMARY KEY (run_id, seq)" in sql["timeline"] and "WITHOUT ROWID" in sql["timeline"]
    assert "WHERE finished_at IS NOT NULL" in sql["runs_status_finished"]
    conn = sqlite3.connect(migrated)
    claimed = conn.execute("SELECT COUNT(*) FROM timeline WHERE type = 'claimed'").fetchone()
    woke = conn.execute("SELECT COUNT(*) FROM timeline WHERE type = 'woke'").fetchone()
    with SqliteStore(migrated) as store:
        snapshot = store.metrics_snapshot([0.01, 1.0], [0.01, 1.0])
        assert snapshot.claims == claimed[0] > 0
        assert snapshot.wake_lateness.count == woke[0] == 1
        assert len(store.recent_wakes(MADE_AT - timedelta(days=1))) == 1


def test_the_migrated_runs_go_on_to_their_end(
    migrated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))  # v14_flows, the fixture's workflows
    clock = FakeClock(MADE_AT + timedelta(days=8))  # past every sleep and signal timeout
    with SqliteStore(migrated) as store:
        daemon = Daemon(store, clock, DaemonConfig(concurrency=2))
        for _ in range(5):
            daemon.tick()
        counts = store.count_by_status()
    assert counts[RunStatus.SLEEPING] == 0
    assert counts[RunStatus.COMPLETED] == RECORD["counts"]["completed"] + 3  # 2 sleepers, later
    # The signal wait timed out: its run retries (queued), as it would have on schema 14.
    assert (counts[RunStatus.QUEUED], counts[RunStatus.WAITING]) == (1, 0)


def test_runs_share_one_definition_row_and_read_it_back(tmp_path: Path) -> None:
    """What every run of one file repeated (target, kind, source hash and path, cwd) is a
    row of `definitions`; a run of another place or file gets its own."""
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "other").mkdir()
    clock = FakeClock(MADE_AT)
    target = f"{tmp_path / 'flows.py'}:quick"
    with SqliteStore(tmp_path / "f.db") as store:
        many = ops.start_many(store, target, [{"user": f"u{i}"} for i in range(5)], clock=clock)
        one = ops.start(store, target, {}, clock=clock).run
        elsewhere = ops.start(store, target, {}, clock=clock, cwd=str(tmp_path / "other")).run
        assert rows(tmp_path / "f.db", "SELECT COUNT(*) FROM definitions") == [(2,)]
        for run in [s.run for s in many] + [one, elsewhere]:
            got = store.get_run(run.run_id)
            assert (got.target, got.kind, got.source_hash, got.source_path, got.cwd) == (
                run.target,
                "python",
                run.source_hash,
                str(tmp_path / "flows.py"),
                run.cwd,
            )
            assert got.source_hash is not None
        assert elsewhere.cwd == str(tmp_path / "other") != one.cwd


def test_a_copy_through_postgresql_keeps_definitions_and_pinned_sources(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowctl.store import open_store
    from flowctl.store.copy import copy_rows

    src = tmp_path / "v14.db"
    shutil.copy(FIXTURES / "v14.db", src)
    clock = FakeClock(MADE_AT)
    a, pg, back = open_store(src), open_store(pg_url), open_store(tmp_path / "back.db")
    try:
        copy_rows(a, pg, ops.plan_copy(a, pg, clock=clock))
        copy_rows(pg, back, ops.plan_copy(pg, back, clock=clock))
        for run_id, want in RECORD["runs"].items():
            for store in (pg, back):
                assert utc(store.get_run(run_id).to_json()) == utc(want["run"])
                assert list(store.run_source(run_id)) == [want["source"], want["source_hash"]]
        held = "SELECT COUNT(*) FROM runs WHERE source IS NOT NULL"
        assert rows(tmp_path / "back.db", held) == [(0,)]  # the texts went to `sources`
    finally:
        for s in (a, pg, back):
            s.close()
