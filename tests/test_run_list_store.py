"""open_run_list: the run list read without the rest of the store (issue 17, item 4).

`flowctl ls` opens the SQLite run-list reads alone (flowctl/store/listing.py) so its
start-up loads none of the writes, leases or schedules. What it reads must be exactly what
the whole store reads, it must open a file as open_store(create=False,
allow_read_only=True) does, and it must offer every RunListing operation with the
parameters the protocol declares.
"""

from __future__ import annotations

import inspect
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl.errors import DatabaseError, DatabaseNotFoundError, FlowctlError
from flowctl.model import RunStatus
from flowctl.store import NewRun, RunListing, open_run_list, open_store
from flowctl.store.listing import RunList

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)


def _declared(cls: type) -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def test_run_list_offers_every_run_listing_operation_with_its_parameters(tmp_path: Path) -> None:
    open_store(tmp_path / "f.db").close()
    reader = open_run_list(tmp_path / "f.db")
    try:
        operations = _declared(RunListing)
        assert {"list_runs", "count_by_status", "last_event", "close"} <= set(operations)
        for name, declared in operations.items():
            if isinstance(declared, property):
                assert hasattr(reader, name), name
                continue
            want = [
                (p.name, p.kind, p.default) for p in inspect.signature(declared).parameters.values()
            ]
            got = [
                (p.name, p.kind, p.default)
                for p in inspect.signature(getattr(RunList, name)).parameters.values()
            ]
            assert got == want, name
    finally:
        reader.close()


def _seed(db: str) -> None:
    """Runs of two workflows in several statuses, one waiting on a signal, one cancelled."""
    store = open_store(db)
    try:
        for i in range(7):
            store.create_run(
                NewRun(f"r{i}", "a" if i % 2 else "b", "wf.py:wf", "python", {"n": i}),
                T0 + timedelta(seconds=i),
            )
        store.request_cancel("r3", "wrong input", "ana", T0 + timedelta(minutes=1))
    finally:
        store.close()


def test_the_run_list_reads_what_the_whole_store_reads(db: str) -> None:
    """Once per backend: SQLite's is the run-list reads alone, PostgreSQL's its store."""
    _seed(db)
    full, reader = open_store(db, create=False), open_run_list(db)
    try:
        if db.startswith("postgresql://"):
            assert type(reader) is type(full)
        else:
            assert type(reader) is RunList
            assert not hasattr(reader, "create_run")  # the writes are not loaded at all

        def both(call: str, *args: Any, **kwargs: Any) -> Any:
            ours, theirs = (
                getattr(reader, call)(*args, **kwargs),
                getattr(full, call)(*args, **kwargs),
            )
            assert ours == theirs, call
            return ours

        listed = both("list_runs", limit=50)
        assert [r.run_id for r in listed] == [f"r{i}" for i in reversed(range(7))]
        assert len(both("list_runs", statuses=[RunStatus.QUEUED], workflow="a", limit=2)) == 2
        assert [r.run_id for r in both("list_runs", search="r4", limit=5)] == ["r4"]
        assert both("list_runs", order="run_at", workflow="b", limit=3)
        counts = both("count_by_status")
        assert (counts[RunStatus.QUEUED], counts[RunStatus.CANCELLED]) == (6, 1)
        assert both("count_by_status", "a")[RunStatus.QUEUED] == 2
        assert both("count_by_status_matching", None, "r5")[RunStatus.QUEUED] == 1
        assert both("workflows_seen") == ["a", "b"]
        assert both("pending_calls", ["r0", "r1"]) == {}
        assert both("last_event", "r3", ["cancelled"]) is not None
        assert both("last_event", "r2", ["created"]) is not None  # implied (migration 18)
        assert (reader.path, reader.read_only) == (full.path, full.read_only)
    finally:
        full.close()
        reader.close()


def test_a_missing_database_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "nowhere" / "f.db"
    with pytest.raises(DatabaseNotFoundError):
        open_run_list(db)
    assert list(tmp_path.iterdir()) == []


def test_a_postgresql_url_opens_the_whole_postgresql_store(tmp_path: Path) -> None:
    """Any other backend is its whole store: here a server that is not there gives
    open_store's one line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DatabaseError) as raised:
        open_run_list(f"postgresql://flow:s3cret@127.0.0.1:{port}/flowctl")
    assert isinstance(raised.value, FlowctlError)
    assert str(raised.value).startswith(f"cannot connect to PostgreSQL at 127.0.0.1:{port}/")
    assert "s3cret" not in str(raised.value)


def test_a_search_for_text_that_is_not_ascii_finds_the_input_that_holds_it(db: str) -> None:
    # SQLite keeps the input as ASCII JSON ("ü" as \u00fc): `--search ünï` must still find
    # what `show` prints as ünï, on both backends; ASCII search is unchanged.
    store = open_store(db)
    try:
        for rid, name in (
            ("r1", "ünï 😀"),
            ("r2", "plain"),
            ("r3", "C:\\u00fc"),
            ("r4", 'say "hi"'),
            ("r5", "a\\b"),
        ):
            store.create_run(NewRun(rid, "wf", "wf.py:wf", "python", {"name": name}), T0)
        found = {
            s: sorted(r.run_id for r in store.list_runs(search=s, limit=9))
            for s in ("ünï", "😀", "plain", "u00fc", '"hi"', "a\\b")
        }
    finally:
        store.close()
    assert found["ünï"] == ["r1"] and found["😀"] == ["r1"] and found["plain"] == ["r2"]
    assert "r3" in found["u00fc"]  # the literal text, as typed
    assert found['"hi"'] == ["r4"] and found["a\\b"] == ["r5"]  # quotes and backslashes


def test_a_search_ignores_ascii_case_on_both_backends(db: str) -> None:
    """SQLite's LIKE ignores ASCII case; PostgreSQL's search does the same (ILIKE), so one
    `ls --search` finds the same runs on either."""
    store = open_store(db)
    try:
        store.create_run(NewRun("r1", "wf", "wf.py:wf", "python", {"name": "Ana Smith"}), T0)
        store.create_run(NewRun("r2", "wf", "wf.py:wf", "python", {"name": "bob"}), T0)
        found = {
            s: sorted(r.run_id for r in store.list_runs(search=s, limit=9))
            for s in ("ana", "ANA", "smith", "Ana Smith", "BOB", "R1")
        }
    finally:
        store.close()
    assert found == {
        "ana": ["r1"],
        "ANA": ["r1"],
        "smith": ["r1"],
        "Ana Smith": ["r1"],
        "BOB": ["r2"],
        "R1": ["r1"],
    }
