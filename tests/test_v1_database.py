"""The on-disk format is guarded, not only the API: a database file written by the first
schema (tests/fixtures/v1.db, made by tests/fixtures/make_v1_db.py and committed) is
opened by the current Store, migrated, and every golden journal in it replays as
tests/journals/ says, then runs on to its end.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import durable_flows as flows
import pytest
from durable_flows import CALLS, KNOBS, calls

from flowctl.clock import FakeClock
from flowctl.daemon.foreground import drive_run
from flowctl.model import RunStatus
from flowctl.store import SCHEMA_VERSION
from flowctl.store.sqlite import SqliteStore as Store

TESTS = Path(__file__).resolve().parent
FIXTURE = TESTS / "fixtures" / "v1.db"
JOURNALS = sorted((TESTS / "journals").glob("*.json"))
V1_TABLES = {"runs", "journal", "versions", "timeline", "signals", "daemons"}

# Where each run ends once it is driven past the point its journal describes.
FINAL: dict[str, tuple[str, object]] = {
    "hello_replayed": ("completed", {"greeting": "hello, ana", "loud": "HELLO, ANA!"}),
    "nondeterminism": ("dead", None),
    "retrying_step": ("completed", "ok"),
    "signal_pending_then_buffered": ("completed", "yes"),
    "sleep_due_while_down": ("completed", 2),
    "sleep_recorded_deadline": ("completed", 2),
    "step_error_replayed": ("completed", "caught ValueError: bad input"),
    "step_error_without_args": ("completed", "caught ValueError: bad input"),
    "values_and_signal": (
        "completed",
        {
            "now": "2026-03-29T00:59:00.123456+00:00",
            "uuid": "6f1c1f3e-4a5b-4c2d-9e8f-0a1b2c3d4e5f",
            "random": 0.25,
            "signal": {"by": "ana"},
        },
    ),
    "version_old_run": ("completed", 1),
    "version_recorded": ("completed", 2),
}


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def _read(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def test_the_fixture_is_a_first_schema_database(tmp_path: Path) -> None:
    """Guards the fixture itself: regenerating it with today's schema would defeat it."""
    db = tmp_path / "v1.db"
    shutil.copyfile(FIXTURE, db)  # read a copy: a WAL reader may leave files beside it
    assert _read(db, "PRAGMA user_version") == [(1,)]
    assert _read(db, "PRAGMA journal_mode") == [("wal",)]
    tables = {r[0] for r in _read(db, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == V1_TABLES
    ids = {r[0] for r in _read(db, "SELECT run_id FROM runs")}
    assert ids == {f"v1-{p.stem}" for p in JOURNALS}  # one run per golden journal
    assert set(FINAL) == {p.stem for p in JOURNALS}


@pytest.mark.parametrize("path", JOURNALS, ids=[p.stem for p in JOURNALS])
def test_a_golden_journal_replays_from_a_migrated_first_schema_file(
    tmp_path: Path, path: Path
) -> None:
    db = tmp_path / "v1.db"
    shutil.copyfile(FIXTURE, db)
    golden = json.loads(path.read_text())
    KNOBS.update(golden.get("knobs", {}))
    run_id = f"v1-{path.stem}"
    clock = FakeClock(datetime.fromisoformat(golden["now"]))
    with Store(db) as store:  # migrates 1 -> SCHEMA_VERSION
        assert _read(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        before = store.journal(run_id)
        assert [e.call_index for e in before.values()] == [r["index"] for r in golden["journal"]]
        for row, entry in zip(golden["journal"], before.values(), strict=True):
            assert (str(entry.kind), entry.name, str(entry.state)) == (
                row["kind"],
                row["name"],
                row["state"],
            )
            assert entry.value == row.get("value")
            assert entry.wake_at == _when(row.get("wake_at"))
            assert entry.resolved_at == _when(row.get("resolved_at"))

        run = drive_run(store, clock, run_id, wait=False)  # replay once, at the journal's `now`

        expect = golden["expect"]
        assert str(run.status) == expect["status"]
        assert dict(CALLS) == expect["calls"]
        if "result" in expect:
            assert run.result == expect["result"]
        if "run_at" in expect:
            assert run.run_at == _when(expect["run_at"])
        if "error" in expect:
            assert run.error is not None
            wanted = {k: v.replace("{run_id}", run_id) for k, v in expect["error"].items()}
            assert {k: run.error[k] for k in wanted} == wanted
        if "checkpoints" in expect:
            assert calls(store, run_id) == [tuple(c) for c in expect["checkpoints"]]
        if "versions" in expect:
            assert store.versions(run_id) == expect["versions"]
        for index, tries in expect.get("tries", {}).items():
            assert store.journal(run_id)[int(index)].tries == tries

        # ... and on to its end: each wait passes at the time the run recorded for it.
        while not run.status.is_terminal:
            assert run.status is RunStatus.SLEEPING and run.run_at is not None
            clock.set(run.run_at)
            run = drive_run(store, clock, run_id, wait=False)
        assert (str(run.status), run.result) == FINAL[path.stem]
        assert store.integrity_check() == "ok"
