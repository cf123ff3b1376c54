"""The batch runner's writes (SqliteConnection._write with a parker set): each write's
statements run at once, the writer parks until the round's one COMMIT holds them, and
returns only then; a writer that fails leaves nothing of itself and the others commit;
a COMMIT that fails is raised by every writer whose changes it held (on a full disk:
tests/test_db_faults.py).

Greenlets on this thread stand in for the runner's handlers, as in flowctl.batch.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import ParkedRound

from flowctl.store.records import NewRun
from flowctl.store.sqlite import SqliteStore as Store

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def probes(db: Path) -> list[str]:
    """What another connection sees committed: the probe events' runs."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT run_id FROM timeline WHERE type = 'probe' ORDER BY run_id")
        return [r[0] for r in rows]


@pytest.fixture
def store_with_runs(db_path: Path) -> Any:
    with Store(db_path) as store:
        for i in range(4):
            store.create_run(
                NewRun(run_id=f"r{i}", workflow="w", target="t", kind="python", input={}), NOW
            )
        yield store


def test_parked_writes_share_one_commit_and_each_is_durable_when_it_returns(
    db_path: Path, store_with_runs: Store
) -> None:
    store = store_with_runs
    rnd = ParkedRound(store)
    seen_on_return: dict[str, list[str]] = {}
    failed: list[BaseException] = []
    before = store.commit_stats()

    def write(rid: str) -> None:
        if rid == "r2":  # fails inside its write: only its own savepoint is undone
            try:
                store.add_event(rid, "probe", {"bad": object()}, NOW)
            except TypeError as e:
                failed.append(e)
                return
        store.add_event(rid, "probe", {"i": rid}, NOW)
        seen_on_return[rid] = probes(db_path)

    for i in range(4):
        rnd.start(write, f"r{i}")
    assert len(rnd.parked) == 3  # r2 failed at once and did not park
    assert probes(db_path) == []  # nothing is committed while the writers are parked
    assert seen_on_return == {}  # and none of them has returned
    rnd.commit_and_resume()
    assert len(failed) == 1
    for rid in ("r0", "r1", "r3"):
        assert seen_on_return[rid] == ["r0", "r1", "r3"]  # durable before it returned
    after = store.commit_stats()
    assert (after.commits - before.commits, after.writes - before.writes) == (1, 3)


def test_a_write_made_by_another_thread_commits_the_parked_ones_too(
    db_path: Path, store_with_runs: Store
) -> None:
    """The daemon's loop writes (claims) on its own thread, with no parker: its COMMIT holds
    whatever the runner's writers left parked, and they return without another COMMIT."""
    import threading

    store = store_with_runs
    rnd = ParkedRound(store)
    returned: list[str] = []

    def write(rid: str) -> None:
        store.add_event(rid, "probe", {}, NOW)
        returned.append(rid)

    rnd.start(write, "r0")
    assert probes(db_path) == [] and returned == []
    other = threading.Thread(target=lambda: store.add_event("r1", "probe", {}, NOW))
    other.start()
    other.join(10)
    assert probes(db_path) == ["r0", "r1"]  # one COMMIT, made by the other thread
    before = store.commit_stats()
    rnd.commit_and_resume()  # nothing left to commit: the parked writer just returns
    assert returned == ["r0"]
    assert store.commit_stats().commits == before.commits
