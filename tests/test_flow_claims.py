"""Flow control in the claim (issue 37, items 1, 3, 5): a run of a full concurrency key is
held (not claimed, out of the due runs) and made due again when a run of its key leaves
`running`; priority orders due runs, never past a key's limit. On both stores, with
explicit instants."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from claiming import LEASE, OWNER, SECOND, T0, claim, lease, new
from helpers import btrees_per_row

from flowctl.model import RunStatus
from flowctl.store import Store
from flowctl.store.sqlite import SqliteStore


def keyed(store: Store, run_id: str, key: str, limit: int = 1, **kw: Any) -> str:
    return new(store, run_id, flow_key=f'["wf", "{key}"]', flow_limit=limit, **kw)


def test_a_full_key_holds_its_other_runs_until_a_slot_is_given_back(store: Store) -> None:
    for rid in ("a1", "a2", "a3"):
        keyed(store, rid, "ann")
    keyed(store, "b1", "bob")
    new(store, "free")
    assert sorted(claim(store, T0 + SECOND)) == ["a1", "b1", "free"]
    held = store.get_run("a2")
    assert held.status is RunStatus.QUEUED and held.run_at is None and held.held_at == T0
    assert claim(store, T0 + 2 * SECOND) == []  # nothing due: the held runs cost no claim
    assert store.complete_run(lease(store, "a1"), 1, T0 + 3 * SECOND, 0.0)
    assert store.get_run("a2").run_at == T0  # its due time given back, a3 still held
    assert store.get_run("a3").run_at is None
    assert claim(store, T0 + 4 * SECOND) == ["a2"]


def test_a_run_that_sleeps_gives_its_slot_back(store: Store) -> None:
    keyed(store, "a1", "ann")
    keyed(store, "a2", "ann")
    assert claim(store, T0 + SECOND) == ["a1"]
    event = ("sleep started", {"index": 0})
    store.suspend_run(
        lease(store, "a1"), RunStatus.SLEEPING, T0 + 60 * SECOND, T0 + 2 * SECOND, 0.0, None, event
    )
    assert claim(store, T0 + 3 * SECOND) == ["a2"]
    # a1 wakes while a2 holds the key: it is held in turn, sleeping
    assert claim(store, T0 + 61 * SECOND) == []
    woke = store.get_run("a1")
    assert woke.status is RunStatus.SLEEPING and woke.held_at == T0 + 60 * SECOND


def test_a_workflow_limit_counts_every_run_of_it(store: Store) -> None:
    for i in range(5):
        new(store, f"r{i}", flow_key="wf", flow_limit=2)
    assert len(claim(store, T0 + SECOND)) == 2
    assert claim(store, T0 + 2 * SECOND) == []


def test_priority_goes_first_among_due_runs_ties_by_due_time(store: Store) -> None:
    new(store, "low", T0)
    new(store, "old", T0 - SECOND)
    new(store, "vip", T0 + SECOND, priority=5)
    new(store, "vip2", T0, priority=5)
    new(store, "last", T0 - 5 * SECOND, priority=-1)
    now = T0 + 2 * SECOND
    assert claim(store, now, 1) == ["vip2"]  # first even alone
    assert claim(store, now) == ["vip", "old", "low", "last"]  # claimed in this order


def test_priority_never_overtakes_a_limit(store: Store) -> None:
    keyed(store, "a1", "ann")
    keyed(store, "a2", "ann", priority=9)
    new(store, "plain")
    assert claim(store, T0 + SECOND, 1) == ["a2"]
    assert sorted(claim(store, T0 + SECOND)) == ["plain"]
    assert store.get_run("a1").held_at is not None


def test_a_reclaimed_run_keeps_its_slot(store: Store) -> None:
    keyed(store, "a1", "ann")
    keyed(store, "a2", "ann")
    assert claim(store, T0 + SECOND) == ["a1"]
    # a1's owner died: its lease lapses; it is reclaimed (a suspect, held for a claimer
    # that runs it alone) and a2 is still held, so the key never runs two at once
    later = T0 + SECOND + LEASE + SECOND
    claims, _ = store.claim_due(OWNER, later, later + LEASE, 10, alone=True)
    assert [c.run.run_id for c in claims] == ["a1"]
    assert store.get_run("a2").held_at is not None


def test_a_held_run_past_its_deadline_ends_dead(store: Store) -> None:
    keyed(store, "a1", "ann")
    keyed(store, "a2", "ann", deadline=T0 + 10 * SECOND)
    assert claim(store, T0 + SECOND) == ["a1"]
    held = store.get_run("a2")
    assert held.held_at == T0 and held.run_at == T0 + 10 * SECOND  # its deadline still acts
    _, ended = store.claim_due(OWNER, T0 + 11 * SECOND, T0 + 11 * SECOND + LEASE, 10)
    assert ended == ["a2"] and store.get_run("a2").status is RunStatus.DEAD


def test_a_held_run_made_due_another_way_is_no_longer_held(store: Store) -> None:
    keyed(store, "a1", "ann")
    keyed(store, "a2", "ann", deadline=T0 + 10 * SECOND)
    keyed(store, "a3", "ann")
    assert claim(store, T0 + SECOND) == ["a1"]
    store.heartbeat(OWNER, [(lease(store, "a1"), 0.0)], T0 + 60 * SECOND, T0 + 10 * SECOND)
    _, ended = store.claim_due(OWNER, T0 + 11 * SECOND, T0 + 11 * SECOND + LEASE, 10)
    assert ended == ["a2"]  # its deadline passed while held
    store.redrive("a2", "ana", T0 + 12 * SECOND, deadline=None)  # due now, by the operator
    assert store.get_run("a2").run_at == T0 + 12 * SECOND
    # a1's slot goes to a3, still held, not to a2, which is due already
    assert store.complete_run(lease(store, "a1"), 1, T0 + 13 * SECOND, 0.0)
    assert store.get_run("a3").run_at == T0 and store.get_run("a3").held_at is None
    assert claim(store, T0 + 14 * SECOND) == ["a3"]  # due first: a2 is held behind it
    again = store.get_run("a2")
    assert again.held_at == T0 + 12 * SECOND and again.run_at is None


def index_entries(db: Path, index: str) -> int:
    """Entries in one index of the SQLite file (its leaf cells, from dbstat)."""
    conn = sqlite3.connect(db)
    try:
        row = conn.execute(
            "SELECT COALESCE(SUM(ncell), 0) FROM dbstat WHERE name = ? AND pagetype = 'leaf'",
            [index],
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


def test_the_key_indexes_hold_no_finished_run_and_no_held_one(tmp_path: Path) -> None:
    """Item 8: runs_flow holds the runs running per key, runs_flow_due the keyed runs neither
    held nor running, so a claim and an ending of a keyed run move few of their entries:
    when the old runs_flow on (flow_key, status) kept every keyed run, a round over many
    keys rewrote most of its pages (a third of what a keyed run wrote to the WAL)."""
    db = tmp_path / "keys.db"
    with SqliteStore(db) as store:
        for user in ("ann", "bob"):
            for i in range(5):
                keyed(store, f"{user}{i}", user)
        assert sorted(claim(store, T0 + SECOND)) == ["ann0", "bob0"]  # the other 8 held
        assert store.complete_run(lease(store, "ann0"), 1, T0 + 2 * SECOND, 0.0)
        assert store.complete_run(lease(store, "bob0"), 1, T0 + 2 * SECOND, 0.0)
        # each ending gave its slot to the next run of its key: due, not held
        assert index_entries(db, "runs_flow") == 0
        assert index_entries(db, "runs_flow_due") == 2
        assert sorted(claim(store, T0 + 3 * SECOND)) == ["ann1", "bob1"]
        assert index_entries(db, "runs_flow") == 2  # ann1 and bob1, running
        assert index_entries(db, "runs_flow_due") == 0  # the other 6 are held
        assert store.get_run("ann2").held_at is not None


def test_no_write_of_a_keyed_run_builds_a_temporary_btree_per_row(
    tmp_path: Path, statements: list[str]
) -> None:
    """SQLite builds a temporary b-tree for an IN list of three or more values each time it
    evaluates one, and evaluates a partial index's condition for the old and the new row
    of every UPDATE that may move the entry: with `status IN (...)` in runs_flow_due's
    condition, each write of a keyed run built two (about 3 µs each). Spelled with OR it
    builds none. Every UPDATE of runs a keyed run's life makes here (claims, holds by key
    and by id, an ending, whose program carries the trigger that gives the slot back, a
    redrive) is traced and asked for its program. A b-tree built once per statement (an
    IN list of the statement's own, behind a Once) is allowed; one built per row is not.
    Statements with RETURNING, which builds one per statement, are left out."""
    db = tmp_path / "writes.db"
    with SqliteStore(db) as store:
        statements.clear()  # the schema's own statements, made as it opened, are not a run's
        test_a_held_run_made_due_another_way_is_no_longer_held(store)
    writes = {
        sql for sql in statements if sql.startswith("UPDATE runs SET") and "RETURNING" not in sql
    }
    assert any("held_at = run_at" in sql for sql in writes)  # the hold by id is among them
    assert any("SET status = 'running'" in sql for sql in writes)  # the claim
    # an ending, whose program carries the trigger that gives a key's slot back
    assert any("SET status = 'dead'" in sql for sql in writes)
    assert btrees_per_row(db, writes) == []
