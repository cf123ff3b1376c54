"""The store on its own: schema and migrations, file creation, JSON only, run lookup,
claims raced on separate connections, fenced writes, reclaims and poison runs.

Instants are explicit (T0 = 2026-03-29T00:59Z); nothing here runs a workflow except
the dead-owner test, which needs a daemon to notice the owner is gone.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import durable_flows as flows
import pytest

from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.errors import (
    FlowctlError,
    InvalidStateError,
    RunNotFoundError,
    SerializationError,
)
from flowctl.ids import HOST
from flowctl.model import (
    CallKind,
    EntryState,
    JournalEntry,
    RunStatus,
    from_us,
    iso,
    to_us,
)
from flowctl.store import SCHEMA_VERSION, Claim, HeartbeatReply, NewRun
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.store.sqlite import schema as store_module
from flowctl.transitions import Applied

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
SECOND = timedelta(seconds=1)
LEASE = 15 * SECOND
OWNER_A = "host-a/100/1/aaaa"
OWNER_B = "host-b/200/2/bbbb"


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def new_run(store: Store, run_id: str = "r1", at: datetime = T0, **kw: Any) -> str:
    store.create_run(NewRun(run_id, "wf", "wf.py:wf", "python", {"n": 1}, **kw), at)
    return run_id


def claim_one(
    store: Store, owner: str, now: datetime, run_id: str | None = None, *, alone: bool = False
) -> Claim:
    """Claim the one due run. A run whose lease lapsed is a suspect: `alone` claims it for a
    claimer that runs it alone (the only claim a suspect accepts)."""
    claims, ended = store.claim_due(owner, now, now + LEASE, 10, run_id=run_id, alone=alone)
    assert ended == []
    assert len(claims) == 1
    return claims[0]


def step_entry(run_id: str, index: int, value: Any, at: datetime = T0) -> JournalEntry:
    return JournalEntry(run_id, index, CallKind.STEP, f"s{index}", EntryState.DONE, value, None, at)


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read by an independent connection."""
    conn = sqlite3.connect(str(db))
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("runs", "journal", "versions", "timeline", "signals", "daemons")
        }
    finally:
        conn.close()


# ---------------------------------------------------------------- schema and file


CORE_TABLES = ("daemons", "journal", "runs", "signals", "timeline", "versions")


def user_version(db: Path) -> int:
    conn = sqlite3.connect(str(db))
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_a_new_database_is_migrated_from_empty(store: Store, db_path: Path) -> None:
    assert user_version(db_path) == SCHEMA_VERSION == len(store_module.MIGRATIONS)
    conn = sqlite3.connect(str(db_path))
    try:
        tables = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    assert set(CORE_TABLES) <= set(tables)
    for name in CORE_TABLES:
        assert tables[name].rstrip().endswith(("STRICT", "STRICT, WITHOUT ROWID")), name
    settings = store.pragmas()
    assert settings["journal_mode"] == "wal"
    assert settings["synchronous"] == 2  # FULL: the default durability
    assert settings["foreign_keys"] == 1
    assert settings["busy_timeout"] == 10_000


@pytest.mark.parametrize("old", range(1, SCHEMA_VERSION))
def test_a_database_at_each_older_version_migrates_forward_keeping_its_runs(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, old: int
) -> None:
    with monkeypatch.context() as m:
        m.setattr(store_module, "MIGRATIONS", store_module.MIGRATIONS[:old])
        m.setattr(store_module, "SCHEMA_VERSION", old)
        Store(db_path).close()
    # The run is written as that version's code wrote it: only the columns it had.
    conn = sqlite3.connect(db_path)
    with conn:
        if old < 16:
            conn.execute(
                "INSERT INTO runs (run_id, workflow, target, kind, input, status, run_at,"
                " created_at) VALUES ('r1', 'wf', 'wf.py:wf', 'python', '{\"n\":1}', 'queued',"
                " ?, ?)",
                [to_us(T0), to_us(T0)],
            )
        else:  # migration 16 keeps a run's definition once in `definitions`
            conn.execute(
                "INSERT INTO definitions (def_id, target, kind) VALUES (1, 'wf.py:wf', 'python')"
            )
            conn.execute(
                "INSERT INTO runs (run_id, workflow, def_id, input, status, run_at, created_at)"
                " VALUES ('r1', 'wf', 1, '{\"n\":1}', 'queued', ?, ?)",
                [to_us(T0), to_us(T0)],
            )
    conn.close()
    assert user_version(db_path) == old
    with Store(db_path) as current:
        assert current.get_run("r1").input == {"n": 1}
        assert current.get_run("r1").target == "wf.py:wf"
    assert user_version(db_path) == SCHEMA_VERSION


def test_reopening_a_current_database_changes_nothing(store: Store, db_path: Path) -> None:
    new_run(store)
    before = snapshot(db_path)
    Store(db_path).close()
    assert snapshot(db_path) == before


def test_a_forward_migration_runs_once_on_an_older_database(
    store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_run(store)
    store.close()

    def add_note(db: Any) -> None:
        db.execute("ALTER TABLE runs ADD COLUMN note TEXT DEFAULT 'migrated'")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, add_note])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    Store(db_path).close()
    Store(db_path).close()  # a second open does not run it again (ALTER would fail)
    assert user_version(db_path) == SCHEMA_VERSION + 1
    conn = sqlite3.connect(str(db_path))
    try:
        assert conn.execute("SELECT note FROM runs").fetchall() == [("migrated",)]
    finally:
        conn.close()


def test_a_failing_migration_leaves_the_database_as_it_was(
    store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.close()

    def half_done(db: Any) -> None:
        db.execute("CREATE TABLE half (x INTEGER)")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, half_done])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(RuntimeError, match="migration bug"):
        Store(db_path)
    assert user_version(db_path) == SCHEMA_VERSION
    conn = sqlite3.connect(str(db_path))
    try:
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []
    finally:
        conn.close()


def test_a_database_from_a_newer_flowctl_is_refused(store: Store, db_path: Path) -> None:
    store.close()
    conn = sqlite3.connect(str(db_path))
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(FlowctlError) as exc:
        Store(db_path)
    assert str(exc.value) == (
        f"database schema version 99 is newer than this flowctl understands ({SCHEMA_VERSION});"
        " upgrade flowctl"
    )


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("x" * 4096)
    with pytest.raises(FlowctlError) as exc:
        Store(path)
    assert str(exc.value) == f"{path} is not a flowctl database (file is not a database)"


def test_the_database_files_are_created_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the 0600 must come from flowctl, not from the caller's umask
    try:
        path = tmp_path / "deep" / "flowctl.db"
        with Store(path) as store:
            new_run(store)
            modes = {
                p.name: p.stat().st_mode & 0o777
                for p in path.parent.iterdir()
                if p.name.startswith("flowctl.db")
            }
    finally:
        os.umask(old)
    assert modes == {"flowctl.db": 0o600, "flowctl.db-wal": 0o600, "flowctl.db-shm": 0o600}


def _open_in_turn(paths: list[str], barrier: Any, results: Any) -> None:
    """In a child process: at each barrier, open (and so create) the next database."""
    from flowctl.store.sqlite import SqliteStore as Store

    for path in paths:
        barrier.wait()
        try:
            Store(path).close()
            results.put(("ok", path))
        except Exception as e:
            results.put(("error", f"{type(e).__name__}: {e}"))


def test_processes_creating_one_new_database_at_the_same_moment_all_succeed(
    tmp_path: Path,
) -> None:
    procs, tries = 4, 10
    paths = [str(tmp_path / f"race-{i}.db") for i in range(tries)]
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(procs)
    results = mp.Queue()
    workers = [
        mp.Process(target=_open_in_turn, args=(paths, barrier, results)) for _ in range(procs)
    ]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=60) for _ in range(procs * tries)]
    for w in workers:
        w.join(30)
    assert [o for o in outcomes if o[0] != "ok"] == []
    for path in paths:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()


# ---------------------------------------------------------------- JSON only


def test_a_non_json_input_is_refused_and_nothing_is_written(store: Store, db_path: Path) -> None:
    before = snapshot(db_path)
    with pytest.raises(SerializationError) as exc:
        store.create_run(NewRun("r1", "wf", "wf.py:wf", "python", {"when": T0}), T0)
    assert str(exc.value) == (
        "the input is not JSON-serialisable (Object of type datetime is not JSON serializable);"
        " return str, int, float, bool, None, lists and dicts of those"
    )
    assert exc.value.exit_code == 2
    assert snapshot(db_path) == before


def test_nan_is_not_json_either(store: Store) -> None:
    rid = new_run(store)
    with pytest.raises(SerializationError) as exc:
        store.send_signal(rid, "go", float("nan"), T0)
    assert str(exc.value).startswith(
        "the signal payload is not JSON-serialisable (Out of range float values are not JSON"
        " compliant"
    )
    assert store.pending_signals(rid) == []


def test_values_are_stored_as_json_text(store: Store, db_path: Path) -> None:
    rid = new_run(store)
    claim = claim_one(store, OWNER_A, T0)
    assert store.record_entry(claim.lease, step_entry(rid, 0, {"k": [1, 2.5]}), T0)
    assert store.complete_run(claim.lease, ["done"], T0, 0.5)
    conn = sqlite3.connect(str(db_path))
    try:
        row = conn.execute(
            "SELECT typeof(input), input, typeof(result), result FROM runs"
        ).fetchone()
        value = conn.execute("SELECT typeof(value), value FROM journal").fetchone()
    finally:
        conn.close()
    assert row == ("text", '{"n":1}', "text", '["done"]')
    assert value == ("text", '{"k":[1,2.5]}')
    assert json.loads(value[1]) == {"k": [1, 2.5]}


# ---------------------------------------------------------------- finding runs


def test_a_unique_prefix_finds_its_run(store: Store) -> None:
    for rid in ("abc123", "abd456", "abd789"):
        new_run(store, rid)
    assert store.find_run("abc").run_id == "abc123"
    assert store.find_run("abd4").run_id == "abd456"
    assert store.find_run(" abd789 ").run_id == "abd789"


def test_an_exact_id_wins_over_longer_ids_it_prefixes(store: Store) -> None:
    new_run(store, "abc")
    new_run(store, "abcd")
    assert store.find_run("abc").run_id == "abc"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("abd", "run id prefix 'abd' is ambiguous: give more characters"),
        ("zzz", "no run matches 'zzz': give a run id or a unique prefix"),
        ("%", "no run matches '%': give a run id or a unique prefix"),
        ("  ", "a run id is required: give a run id or a unique prefix (see `flowctl ls`)"),
    ],
)
def test_a_run_reference_that_matches_no_single_run_is_an_error(
    store: Store, ref: str, message: str
) -> None:
    for rid in ("abc123", "abd456", "abd789"):
        new_run(store, rid)
    with pytest.raises(RunNotFoundError) as exc:
        store.find_run(ref)
    assert str(exc.value) == message


# ---------------------------------------------------------------- claims


def test_a_run_starting_later_says_when_in_its_timeline(store: Store) -> None:
    rid = new_run(store, run_at=T0 + timedelta(hours=3))
    (created,) = store.timeline(rid)
    assert created.to_json() == {
        "at": "2026-03-29T00:59:00.000000Z",
        "type": "created",
        "attempt": 1,
        "run_at": "2026-03-29T03:59:00.000000Z",
    }


def test_a_claim_takes_due_runs_only_in_run_at_order(store: Store) -> None:
    new_run(store, "late", run_at=T0 + 2 * SECOND)
    new_run(store, "first", run_at=T0 - 2 * SECOND)
    new_run(store, "second", run_at=T0 - SECOND)
    claims, ended = store.claim_due(OWNER_A, T0, T0 + LEASE, 10)
    assert ([c.run.run_id for c in claims], ended) == (["first", "second"], [])
    run = store.get_run("first")
    assert (run.status, run.lease_owner, run.lease_until, run.run_at, run.fence) == (
        RunStatus.RUNNING,
        OWNER_A,
        T0 + LEASE,
        T0 + LEASE,
        1,
    )
    assert store.claim_due(OWNER_B, T0, T0 + LEASE, 10) == ([], [])


def test_racing_claims_on_separate_connections_have_one_winner_per_run(db_path: Path) -> None:
    with Store(db_path) as setup:
        run_ids = [new_run(setup, f"r{i:02d}") for i in range(40)]
    workers = 4
    stores = [Store(db_path) for _ in range(workers)]
    try:
        for round_ in (1, 2, 3):  # each round starts after every lease has lapsed
            now = T0 + (round_ - 1) * 2 * LEASE
            barrier = threading.Barrier(workers)
            won: list[list[Claim]] = [[] for _ in range(workers)]
            threads = [
                threading.Thread(
                    target=race, args=(stores[i], f"host/{i}/1/x", now, barrier, won[i])
                )
                for i in range(workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            claimed = [c.run.run_id for claims in won for c in claims]
            assert sorted(claimed) == run_ids  # every run once, none twice
            assert {c.lease.fence for claims in won for c in claims} == {round_}
            for claims in won:
                for c in claims:
                    assert stores[0].get_run(c.run.run_id).lease_owner == c.lease.owner
    finally:
        for s in stores:
            s.close()


def race(
    store: Store, owner: str, now: datetime, barrier: threading.Barrier, won: list[Claim]
) -> None:
    """One contender: wait for the others, then claim everything due (as a claimer that
    runs what it claims alone: later rounds reclaim lapsed leases, which only such take)."""
    barrier.wait()
    claims, ended = store.claim_due(owner, now, now + LEASE, 100, alone=True)
    assert ended == []
    won.extend(claims)


def test_fences_only_grow(store: Store) -> None:
    new_run(store)
    fences = []
    now = T0
    for _ in range(4):
        fences.append(claim_one(store, OWNER_A, now, alone=True).lease.fence)
        now += LEASE
    assert fences == [1, 2, 3, 4]


# ---------------------------------------------------------------- fenced writes


def test_every_write_with_a_stale_fence_changes_nothing(store: Store, db_path: Path) -> None:
    rid = new_run(store)
    stale = claim_one(store, OWNER_A, T0)
    store.send_signal(rid, "go", {"x": 1}, T0)
    fresh = claim_one(store, OWNER_B, T0 + LEASE, alone=True)  # A's lease lapsed; B reclaimed it
    assert (stale.lease.fence, fresh.lease.fence) == (1, 2)
    before = snapshot(db_path)
    now = T0 + LEASE + SECOND
    pending = JournalEntry(rid, 0, CallKind.SLEEP, "sleep", EntryState.PENDING, wake_at=now)
    assert store.record_entry(stale.lease, step_entry(rid, 0, "late"), now) is False
    assert (
        store.suspend_run(stale.lease, RunStatus.SLEEPING, now, now, 1.0, pending, ("x", {}))
        is None
    )
    assert store.complete_run(stale.lease, "late", now, 1.0) is False
    assert store.fail_attempt(stale.lease, {"type": "E", "message": "m"}, now, 1.0, None) is None
    assert store.end_run(stale.lease, RunStatus.CANCELLED, None, now, 1.0) is False
    assert store.consume_signal(stale.lease, "go", 0, now) == (False, None, False)
    assert store.record_version(stale.lease, "change", 2, now) is False
    assert store.heartbeat(OWNER_A, [(stale.lease, 9.0)], now + LEASE, now) == [
        HeartbeatReply(rid, lost=True)
    ]
    assert snapshot(db_path) == before
    assert store.record_entry(fresh.lease, step_entry(rid, 0, "current"), now) is True


def test_a_current_fence_cannot_write_once_the_run_is_no_longer_running(store: Store) -> None:
    rid = new_run(store)
    claim = claim_one(store, OWNER_A, T0)
    assert store.complete_run(claim.lease, "first", T0, 0.0)
    assert store.complete_run(claim.lease, "second", T0, 0.0) is False
    assert store.record_entry(claim.lease, step_entry(rid, 0, "late"), T0) is False
    assert store.get_run(rid).result == "first"
    assert store.journal(rid) == {}


def test_suspending_clears_the_lease_and_waits_no_longer_than_the_deadline(store: Store) -> None:
    rid = new_run(store, deadline=T0 + 60 * SECOND)
    claim = claim_one(store, OWNER_A, T0)
    wake = T0 + 3600 * SECOND
    pending = JournalEntry(rid, 0, CallKind.SLEEP, "sleep", EntryState.PENDING, wake_at=wake)
    applied = store.suspend_run(
        claim.lease, RunStatus.SLEEPING, wake, T0, 2.5, pending, ("sleep started", {})
    )
    # What it applied is what it returns: the wheel takes this run_at, not the wake time.
    assert applied == Applied(RunStatus.SLEEPING, T0 + 60 * SECOND)
    run = store.get_run(rid)
    assert (run.status, run.run_at, run.lease_owner, run.lease_until, run.exec_spent) == (
        RunStatus.SLEEPING,
        T0 + 60 * SECOND,
        None,
        None,
        2.5,
    )
    assert store.journal(rid)[0].wake_at == wake


def test_a_heartbeat_extends_the_lease_and_reports_what_the_handler_must_hear(
    store: Store,
) -> None:
    rid = new_run(store, deadline=T0 + 100 * SECOND, timeout=10.0)
    claim = claim_one(store, OWNER_A, T0)
    now = T0 + 5 * SECOND
    assert store.heartbeat(OWNER_A, [(claim.lease, 4.0)], now + LEASE, now) == [HeartbeatReply(rid)]
    run = store.get_run(rid)
    assert (run.lease_until, run.run_at, run.exec_spent) == (now + LEASE, now + LEASE, 4.0)
    store.request_cancel(rid, "enough", "ana", now)
    assert store.heartbeat(OWNER_A, [(claim.lease, 10.0)], now + LEASE, now)[0] == (
        HeartbeatReply(rid, cancel=True, timeout=True)
    )
    later = T0 + 100 * SECOND
    assert store.heartbeat(OWNER_A, [(claim.lease, 10.0)], later + LEASE, later)[0] == (
        HeartbeatReply(rid, cancel=True, deadline=True, timeout=True)
    )


def test_one_read_says_which_running_runs_an_operator_asked_to_cancel_or_pause(
    store: Store,
) -> None:
    """The daemon's look after another process wrote: both flags in one statement, only
    for running runs among the ids given, however many ids (read a chunk at a time)."""
    for rid in ("c", "p", "cp", "none", "other", "done"):
        new_run(store, rid)
    claims, _ = store.claim_due(OWNER_A, T0, T0 + LEASE, 10)
    now = T0 + SECOND
    store.request_cancel("c", "enough", "ana", now)
    store.request_pause("p", "ana", now)
    store.request_pause("cp", "ana", now)
    store.request_cancel("cp", "enough", "ana", now)
    store.request_cancel("other", "enough", "ana", now)  # running, asked, but not ours
    store.request_cancel("done", "enough", "ana", now)  # asked, then it completed anyway
    (done,) = [c.lease for c in claims if c.run.run_id == "done"]
    store.complete_run(done, 1, now, 0.0)
    assert store.get_run("done").cancel_requested
    ours = [f"x{i}" for i in range(1200)] + ["c", "p", "cp", "none", "done"]
    asked = store.interrupts_requested(ours)
    assert (sorted(asked.cancels), sorted(asked.pauses)) == (["c", "cp"], ["cp", "p"])
    assert store.interrupts_requested([]) == ([], [])


# ---------------------------------------------------------------- reclaims


def test_a_crash_reclaim_does_not_spend_an_attempt(store: Store) -> None:
    rid = new_run(store)
    claim_one(store, OWNER_A, T0)
    assert store.claim_due(OWNER_B, T0 + LEASE - SECOND, T0 + 2 * LEASE, 10) == ([], [])
    claim = claim_one(store, OWNER_B, T0 + LEASE, alone=True)
    assert (claim.run.attempt, claim.run.reclaims, claim.lease.fence, claim.woke_from) == (
        1,
        1,
        2,
        RunStatus.RUNNING,
    )
    reclaimed = store.timeline(rid)[-1]
    assert (reclaimed.type, reclaimed.data) == (
        "reclaimed",
        {"from": OWNER_A, "by": OWNER_B, "fence": 2, "alone": True, "crashes": 0},
    )


def test_a_reclaimed_run_is_a_suspect_held_for_a_claimer_that_runs_it_alone(
    store: Store,
) -> None:
    rid = new_run(store)
    claim_one(store, OWNER_A, T0)  # A runs it among others, and dies
    now = T0 + LEASE
    assert store.claim_due(OWNER_B, now, now + LEASE, 10) == ([], [])  # held, not claimed
    run = store.get_run(rid)
    assert (run.status, run.suspect, run.crashes, run.solo) == (RunStatus.RUNNING, True, 0, False)
    (held,) = [e for e in store.timeline(rid) if e.type == "suspect"]
    assert (held.data["from"], held.data["crashes"]) == (OWNER_A, 0)
    assert store.suspect_due(now)
    claim, ended = store.claim_suspect(OWNER_B, now, now + LEASE)
    assert claim is not None and ended == []
    assert (claim.run.suspect, claim.run.solo, claim.run.crashes, claim.lease.fence) == (
        True,
        True,
        0,
        2,
    )
    assert not store.suspect_due(now)


def test_a_run_whose_isolated_worker_keeps_dying_is_dead_lettered_as_poison(
    store: Store,
) -> None:
    rid = new_run(store)
    claim_one(store, OWNER_A, T0)  # the first worker dies with others in flight: no charge
    now = T0 + LEASE - SECOND
    for crashes in (0, 1, 2, 3, 4):  # then it runs alone, and each isolated worker dies under it
        now += SECOND
        claim, _ = store.claim_suspect(OWNER_B, now, now + LEASE)
        assert claim is not None and claim.run.crashes == crashes
        assert store.charge_crash(claim.lease, now) == crashes + 1  # its daemon saw it die
        assert store.suspects_due(now, 10) == [rid]  # due again at once
    now += SECOND
    assert store.claim_suspect(OWNER_B, now, now + LEASE) == (None, [rid])
    run = store.get_run(rid)
    assert (run.status, run.attempt) == (RunStatus.DEAD, 1)
    assert run.error == {
        "type": "PoisonRunError",
        "kind": "poison",
        "message": "its worker died 5 times while running it alone, without a new"
        " checkpoint: it is killing its worker",
    }
    charged = [e.data["crashes"] for e in store.timeline(rid) if e.type == "crashed"]
    assert charged == [1, 2, 3, 4, 5]


def test_daemons_looking_at_once_are_given_different_due_suspects(store: Store) -> None:
    """Each daemon reads the due suspects in an order of its own (`spread`) among equal
    crashes, so two that look at once start workers mostly for different runs; without
    one, the oldest lapse first. A run charged a crash still comes after the others."""
    ids = [new_run(store, f"r{i:02}") for i in range(12)]
    claims, _ = store.claim_due(OWNER_A, T0, T0 + LEASE, 12)
    assert len(claims) == 12
    now = T0 + LEASE  # every lease lapsed under OWNER_A's name: twelve suspects
    crashed, _ = store.claim_suspect(OWNER_B, now, now + LEASE)
    assert crashed is not None and store.charge_crash(crashed.lease, now) == 1
    assert store.suspects_due(now, 11) == [r for r in ids if r != crashed.run.run_id]
    one, other = store.suspects_due(now, 3, b"daemon-1"), store.suspects_due(now, 3, b"daemon-2")
    assert len(set(one) & set(other)) < 3
    assert store.suspects_due(now, 12, b"daemon-1")[:3] == one
    assert store.suspects_due(now, 12, b"daemon-2")[-1] == crashed.run.run_id


def test_a_suspect_whose_lease_lapsed_alone_is_charged_nothing(store: Store) -> None:
    """A whole process group killed at once (its daemon with it): nobody charges the crash,
    however often it happens; a stale lease charges nothing either."""
    rid = new_run(store)
    now = T0
    claim_one(store, OWNER_A, now)
    stale = None
    for _ in range(8):
        now += LEASE
        claim, _ = store.claim_suspect(OWNER_B, now, now + LEASE)
        assert claim is not None and claim.run.crashes == 0
        stale = stale or claim.lease
    assert stale is not None and store.charge_crash(stale, now) is None  # not held any more
    run = store.get_run(rid)
    assert (run.status, run.crashes, run.reclaims) == (RunStatus.RUNNING, 0, 8)


def test_a_run_released_by_a_drain_is_no_suspect(store: Store) -> None:
    rid = new_run(store)
    claim = claim_one(store, OWNER_A, T0)
    assert store.release_runs([claim.lease], T0, "grace period over") == 1
    run = store.get_run(rid)
    assert (run.status, run.lease_owner, run.run_at) == (RunStatus.RUNNING, None, T0)
    assert store.suspects_due(T0, 10) == []
    again = claim_one(store, OWNER_B, T0)  # the usual claim takes it: nobody died
    assert (again.run.suspect, again.run.reclaims, again.run.crashes) == (False, 0, 0)
    assert again.lease.fence == 2
    assert not store.record_entry(claim.lease, step_entry(rid, 0, "late"), T0)  # fenced off
    assert not [e for e in store.timeline(rid) if e.type == "suspect"]


def test_a_suspect_released_by_a_drain_stays_a_suspect(store: Store) -> None:
    rid = new_run(store)
    claim_one(store, OWNER_A, T0)
    now = T0 + LEASE
    claim, _ = store.claim_suspect(OWNER_B, now, now + LEASE)
    assert claim is not None
    store.release_runs([claim.lease], now, "grace period over")
    assert store.suspects_due(now, 10) == [rid]
    assert store.claim_due(OWNER_A, now, now + LEASE, 10) == ([], [])  # held for isolation


def test_a_crash_with_others_in_flight_is_charged_to_nobody(store: Store) -> None:
    rid = new_run(store)
    claim_one(store, OWNER_A, T0)  # not alone: its death says nothing about this run
    now = T0
    for _ in range(8):  # however often claimers that are not alone look at it
        now += LEASE
        assert store.claim_due(OWNER_B, now, now + LEASE, 10) == ([], [])
    run = store.get_run(rid)
    assert (run.status, run.suspect, run.crashes) == (RunStatus.RUNNING, True, 0)
    assert [e.type for e in store.timeline(rid)].count("suspect") == 1


def test_a_new_checkpoint_clears_the_suspect_and_its_charges(store: Store) -> None:
    rid = new_run(store)
    now = T0
    claim_one(store, OWNER_A, now)
    for _ in range(3):
        now += LEASE
        claim = claim_one(store, OWNER_B, now, alone=True)
        assert store.charge_crash(claim.lease, now) is not None
    claim = claim_one(store, OWNER_B, now, alone=True)
    assert claim.run.crashes == 3
    assert store.record_entry(claim.lease, step_entry(rid, 0, "progress"), now)
    run = store.get_run(rid)
    assert (run.reclaims, run.crashes, run.suspect) == (0, 0, False)
    assert store.charge_crash(claim.lease, now) == 1  # one crash charged since the checkpoint


def test_a_lapsed_run_that_used_its_budget_fails_its_attempt_as_a_timeout(store: Store) -> None:
    rid = new_run(store, timeout=10.0)
    claim = claim_one(store, OWNER_A, T0)
    store.heartbeat(OWNER_A, [(claim.lease, 10.0)], T0 + LEASE, T0)
    now = T0 + LEASE
    assert store.claim_due(OWNER_B, now, now + LEASE, 10) == ([], [rid])
    run = store.get_run(rid)
    assert (run.status, run.attempt, run.run_at) == (RunStatus.QUEUED, 2, now + SECOND)
    assert run.error == {
        "type": "ExecutionTimeoutError",
        "kind": "timeout",
        "message": "attempt 1 used its execution budget of 10s",
        "attempt": 1,
    }
    timed_out = [e for e in store.timeline(rid) if e.type == "timed out"]
    assert [e.data for e in timed_out] == [
        {
            "attempt": 1,
            "kind": "timeout",
            "error": "ExecutionTimeoutError: attempt 1 used its execution budget of 10s",
            "lease": "lapsed",
        }
    ]


def test_a_lapsed_run_with_a_cancel_request_ends_cancelled(store: Store) -> None:
    rid = new_run(store)
    claim_one(store, OWNER_A, T0)
    assert store.request_cancel(rid, "stop", "ana", T0) is RunStatus.RUNNING
    assert store.claim_due(OWNER_B, T0 + LEASE, T0 + 2 * LEASE, 10) == ([], [rid])
    run = store.get_run(rid)
    assert (run.status, run.error) == (
        RunStatus.CANCELLED,
        {"type": "Cancelled", "kind": "cancelled", "message": "stop", "by": "ana"},
    )


def test_no_claim_succeeds_past_the_deadline(store: Store) -> None:
    rid = new_run(store, run_at=T0 + 60 * SECOND, deadline=T0 + 30 * SECOND)
    assert store.get_run(rid).run_at == T0 + 30 * SECOND
    assert store.claim_due(OWNER_A, T0 + 30 * SECOND, T0 + LEASE, 10) == ([], [rid])
    run = store.get_run(rid)
    assert (run.status, run.fence, run.error) == (
        RunStatus.DEAD,
        0,
        {
            "type": "DeadlineExceededError",
            "kind": "deadline",
            "message": "deadline 2026-03-29 00:59:30 UTC passed",
        },
    )


def test_an_owner_proven_dead_makes_its_runs_claimable_at_once(store: Store) -> None:
    new_run(store)
    store.register_daemon(OWNER_A, "host-a", 100, "1", T0, {})
    claim_one(store, OWNER_A, T0)
    now = T0 + SECOND
    assert store.claim_due(OWNER_B, now, now + LEASE, 10) == ([], [])
    assert store.expire_owner(OWNER_A, now) == 1
    assert store.daemons() == []
    claim = claim_one(store, OWNER_B, now, alone=True)
    assert (claim.lease.fence, claim.run.attempt, claim.run.reclaims) == (2, 1, 1)


def test_the_daemon_reclaims_at_once_from_an_owner_whose_process_is_gone(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_owner = f"{HOST}/{int(gone.stdout)}/1/dead"
    rid = flows.start(store, fake_clock, "two_steps")
    store.claim_due(dead_owner, T0, T0 + LEASE, 10)
    assert store.get_run(rid).lease_owner == dead_owner
    fake_clock.advance(SECOND)  # far from the lease's end
    assert daemon.tick() == 1
    run = store.get_run(rid)
    assert (run.status, run.fence, run.attempt) == (RunStatus.COMPLETED, 2, 1)


# ---------------------------------------------------------------- signals and operator writes


def test_signals_are_consumed_oldest_first_and_journaled(store: Store) -> None:
    rid = new_run(store)
    store.send_signal(rid, "go", "first", T0)
    store.send_signal(rid, "go", "second", T0 + SECOND)
    store.send_signal(rid, "other", "x", T0)
    claim = claim_one(store, OWNER_A, T0 + SECOND)
    assert store.consume_signal(claim.lease, "go", 3, T0 + SECOND) == (True, "first", True)
    assert store.consume_signal(claim.lease, "none", 4, T0 + SECOND) == (True, None, False)
    entry = store.journal(rid)[3]
    assert (entry.kind, entry.name, entry.state, entry.value) == (
        CallKind.SIGNAL,
        "go",
        EntryState.DONE,
        {"payload": "first", "timed_out": False},
    )
    assert [(n, p) for n, p, _ in store.pending_signals(rid)] == [("go", "second"), ("other", "x")]


def _park_waiting_for(store: Store, claim: Claim, entry: JournalEntry, now: datetime) -> Any:
    return store.suspend_run(claim.lease, RunStatus.WAITING, None, now, 0.1, entry, ("wait", {}))


def test_a_child_that_ended_while_its_parent_ran_leaves_the_parent_due_not_stranded(
    store: Store,
) -> None:
    # A second worker ran the child to its end while the parent was still running, so the
    # child's ending found no waiting parent to wake. The parent's park must see it.
    parent = new_run(store, "parent")
    claim = claim_one(store, OWNER_A, T0, "parent")
    new_run(store, "child", T0, parent_run_id=parent)
    child_claim = claim_one(store, OWNER_B, T0, "child")
    assert store.complete_run(child_claim.lease, 2, T0, 0.0)
    now = T0 + SECOND
    pending = JournalEntry(
        parent, 0, CallKind.STEP, "workflow wf.py:wf", EntryState.PENDING, {"child_run_id": "child"}
    )
    assert _park_waiting_for(store, claim, pending, now) == Applied(RunStatus.WAITING, now)
    run = store.get_run(parent)
    assert (run.status, run.run_at) == (RunStatus.WAITING, now)


def test_a_child_still_running_leaves_its_parent_parked_with_no_wake(store: Store) -> None:
    parent = new_run(store, "parent")
    claim = claim_one(store, OWNER_A, T0, "parent")
    new_run(store, "child", T0, parent_run_id=parent)
    claim_one(store, OWNER_B, T0, "child")
    pending = JournalEntry(
        parent, 0, CallKind.STEP, "workflow wf.py:wf", EntryState.PENDING, {"child_run_id": "child"}
    )
    assert _park_waiting_for(store, claim, pending, T0) == Applied(RunStatus.WAITING, None)
    assert store.get_run(parent).run_at is None


def test_a_signal_sent_while_its_run_ran_leaves_the_run_due_when_it_parks(store: Store) -> None:
    now = T0 + SECOND
    for rid, awaited, due in (("r1", "go", now), ("r2", "late", None)):
        new_run(store, rid)
        claim = claim_one(store, OWNER_A, T0, rid)
        store.send_signal(rid, "go", 1, T0)  # it is running: nothing to make due yet
        pending = JournalEntry(rid, 0, CallKind.SIGNAL, awaited, EntryState.PENDING)
        assert _park_waiting_for(store, claim, pending, now) == Applied(RunStatus.WAITING, due)
        assert store.get_run(rid).run_at == due


def test_a_signal_to_a_finished_run_is_refused(store: Store) -> None:
    rid = new_run(store)
    store.request_cancel(rid, None, "ana", T0)
    with pytest.raises(InvalidStateError) as exc:
        store.send_signal(rid, "go", 1, T0)
    assert str(exc.value) == (
        f"run {rid} is cancelled: signals go to queued, running, sleeping or waiting runs"
    )
    assert store.pending_signals(rid) == []


def test_an_unknown_run_is_reported_by_every_operator_write(store: Store) -> None:
    for call in (
        lambda: store.send_signal("nope", "go", 1, T0),
        lambda: store.request_cancel("nope", None, "ana", T0),
        lambda: store.redrive("nope", "ana", T0, deadline=None),
    ):
        with pytest.raises(RunNotFoundError) as exc:
            call()
        assert str(exc.value) == "no run matches 'nope': give a run id or a unique prefix"


# ---------------------------------------------------------------- row types and times


@pytest.mark.parametrize(
    "when",
    [
        T0,
        datetime(2026, 3, 29, 0, 59, 0, 123456, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 3, 29, 2, 59, tzinfo=timezone(timedelta(hours=2))),
    ],
)
def test_instants_are_stored_as_exact_microseconds(when: datetime) -> None:
    assert from_us(to_us(when)) == when
    assert from_us(to_us(when)).tzinfo is UTC


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        to_us(datetime(2026, 3, 29))


def test_json_times_are_utc_with_microseconds_and_a_z() -> None:
    paris = datetime(2026, 3, 29, 3, 0, tzinfo=timezone(timedelta(hours=2)))
    assert iso(paris) == "2026-03-29T01:00:00.000000Z"
    assert iso(None) is None


def test_checkpoints_have_the_shape_show_json_promises() -> None:
    sleep = JournalEntry(
        "r1",
        1,
        CallKind.SLEEP,
        "sleep",
        EntryState.DONE,
        None,
        wake_at=T0 + LEASE,
        recorded_at=T0,
        resolved_at=T0 + LEASE,
    )
    assert sleep.to_json() == {
        "index": 1,
        "kind": "sleep",
        "name": "sleep",
        "state": "done",
        "recorded_at": "2026-03-29T00:59:00.000000Z",
        "value": None,
        "wake_at": "2026-03-29T00:59:15.000000Z",
        "resolved_at": "2026-03-29T00:59:15.000000Z",
    }
    failed = JournalEntry(
        "r1", 0, CallKind.STEP, "send", EntryState.ERROR, {"type": "E"}, recorded_at=T0, tries=2
    )
    assert failed.to_json() == {
        "index": 0,
        "kind": "step",
        "name": "send",
        "state": "error",
        "recorded_at": "2026-03-29T00:59:00.000000Z",
        "error": {"type": "E"},
        "tries": 2,
    }
    assert [str(k) for k in CallKind] == [
        "step", "sleep", "signal", "now", "uuid", "random", "version", "fanout",
    ]  # fmt: skip


def test_a_run_prints_every_time_in_one_form(store: Store) -> None:
    rid = new_run(store, deadline=T0 + LEASE)
    data = store.get_run(rid).to_json()
    assert (data["id"], data["status"], data["created_at"], data["run_at"], data["deadline"]) == (
        rid,
        "queued",
        "2026-03-29T00:59:00.000000Z",
        "2026-03-29T00:59:00.000000Z",
        "2026-03-29T00:59:15.000000Z",
    )
    assert [s.value for s in RunStatus if s.is_terminal] == ["completed", "dead", "cancelled"]
