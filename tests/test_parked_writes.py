"""The batch runner's writes on SQLite (a write round open on the runner's thread): each
write is queued, the writer parks until the round's one COMMIT holds it, and returns only
then; a writer that fails leaves nothing of itself and the others commit; a COMMIT that
fails is raised by every writer whose changes it held (on a full disk:
tests/test_db_faults.py). A queued write takes no lock, so the write lock is free while
handlers run; with take_turns, the round's transaction holds the lock file other daemons
wait on.

Greenlets on this thread stand in for the runner's handlers, as in flowctl.daemon.batch.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import ParkedRound

from flowctl.store.records import NewRun
from flowctl.store.round import Write
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
    rnd.write_round()
    assert len(failed) == 1
    for rid in ("r0", "r1", "r3"):
        assert seen_on_return[rid] == ["r0", "r1", "r3"]  # durable before it returned
    after = store.commit_stats()
    assert (after.commits - before.commits, after.writes - before.writes) == (1, 3)


def test_a_write_made_by_another_thread_is_not_part_of_the_round(
    db_path: Path, store_with_runs: Store
) -> None:
    """The daemon's loop writes (claims) on its own thread: that write commits on its own,
    and the runner's queued writes wait for their round."""
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
    assert probes(db_path) == ["r1"] and returned == []  # its own COMMIT, not the round's
    rnd.write_round()
    assert returned == ["r0"] and probes(db_path) == ["r0", "r1"]
    rnd.close()


def write_lock_free(db: Path) -> bool:
    """Whether another connection could take SQLite's write lock right now."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        assert "locked" in str(e)
        return False
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
    return True


def turn_free(db: Path) -> bool:
    """Whether another daemon could take the lock file's turn right now."""
    fd = os.open(f"{db}-lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing the descriptor releases a lock it took
    return True


def test_writes_wait_for_their_round_so_the_write_lock_is_free_while_handlers_run(
    db_path: Path, store_with_runs: Store
) -> None:
    store = store_with_runs
    rnd = ParkedRound(store)
    returned: list[str] = []
    held_in_round: list[bool] = []

    def write(rid: str) -> None:
        store.add_event(rid, "probe", {}, NOW)
        returned.append(rid)

    for i in range(3):
        rnd.start(write, f"r{i}")
        # Each handler has asked to write, and the next one's Python runs now: nothing
        # of the writes has run, so no other process is kept from writing meanwhile.
        assert write_lock_free(db_path)
    rnd.start(
        lambda: rnd.round.add(Write(lambda tx: held_in_round.append(not write_lock_free(db_path))))
    )
    assert len(rnd.parked) == 4 and returned == []
    before = store.commit_stats()
    rnd.write_round()
    assert held_in_round == [True]  # held for the round's statements and COMMIT
    assert write_lock_free(db_path)
    assert returned == ["r0", "r1", "r2"] and probes(db_path) == ["r0", "r1", "r2"]
    after = store.commit_stats()
    assert (after.commits - before.commits, after.writes - before.writes) == (1, 4)
    rnd.close()


def test_a_write_round_still_commits_the_writes_that_succeed(
    db_path: Path, store_with_runs: Store
) -> None:
    store = store_with_runs
    rnd = ParkedRound(store)
    failed: list[BaseException] = []

    def write(rid: str) -> None:
        try:
            store.add_event(rid, "probe", {"bad": object()} if rid == "r1" else {}, NOW)
        except TypeError as e:
            failed.append(e)

    for i in range(3):
        rnd.start(write, f"r{i}")
    rnd.write_round()
    assert len(failed) == 1 and probes(db_path) == ["r0", "r2"]
    assert write_lock_free(db_path)


def test_a_write_transaction_holds_the_lock_file_other_daemons_take_turns_on(
    db_path: Path, store_with_runs: Store
) -> None:
    store = store_with_runs
    assert not Path(f"{db_path}-lock").exists()  # only a daemon's store takes turns
    store.take_turns()
    rnd = ParkedRound(store)
    held: list[bool] = []
    rnd.start(lambda: store.add_event("r0", "probe", {}, NOW))
    rnd.start(lambda: rnd.round.add(Write(lambda tx: held.append(not turn_free(db_path)))))
    assert turn_free(db_path)  # queued writes take no turn
    rnd.write_round()
    assert held == [True]  # the round's transaction is open: another daemon waits
    assert turn_free(db_path) and probes(db_path) == ["r0"]
    rnd.close()
    with pytest.raises(TypeError):  # a failed write on its own: rolled back at once
        store.add_event("r1", "probe", {"bad": object()}, NOW)
    assert turn_free(db_path)
    store.add_event("r2", "probe", {}, NOW)  # a plain write (no runner) takes its turn
    assert turn_free(db_path) and probes(db_path) == ["r0", "r2"]


def test_without_a_lock_file_it_can_open_a_daemon_still_writes(
    db_path: Path, store_with_runs: Store
) -> None:
    Path(f"{db_path}-lock").mkdir()  # in the way: a folder cannot be opened as the file
    store = store_with_runs
    store.take_turns()
    store.add_event("r0", "probe", {}, NOW)
    assert probes(db_path) == ["r0"]
