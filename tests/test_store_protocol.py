"""The store's interface: the Store protocol, open_store, and the one Lease a claim mints.

A second backend is written against `flowctl.store.Store`; these tests hold the SQLite
backend to the same contract at run time (mypy checks the types), and show that every
fenced write is refused for a lease that is not the run's current one.
"""

from __future__ import annotations

import ast
import inspect
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl.errors import DatabaseError, FlowctlError
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import (
    Claim,
    HeartbeatReply,
    Lease,
    NewRun,
    RunListing,
    Store,
    open_store,
)
from flowctl.store.sqlite import SqliteStore

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
LEASE = timedelta(seconds=15)
FLOWCTL = Path(__file__).resolve().parent.parent / "flowctl"


def _operations(cls: type) -> dict[str, Any]:
    """The public operations a protocol declares (methods and properties), by name, its
    base protocols' included (Store extends RunListing)."""
    return {
        name: value
        for base in reversed(cls.__mro__)
        if base.__module__ == cls.__module__
        for name, value in vars(base).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def test_the_sqlite_store_offers_every_operation_of_the_protocol_with_its_parameters(
    store: SqliteStore,
) -> None:
    """Parameter names and defaults too: callers pass many of them by keyword, which a
    structural type check alone does not hold a backend to."""
    operations = _operations(Store)
    assert len(operations) > 60  # the whole interface, not an empty protocol
    assert set(_operations(RunListing)) < set(operations)  # with the run list's reads
    for name, declared in operations.items():
        if isinstance(declared, property):
            assert hasattr(store, name), name  # an attribute or property of an open store
            continue
        implemented = inspect.getattr_static(SqliteStore, name)
        want = [
            (p.name, p.kind, p.default) for p in inspect.signature(declared).parameters.values()
        ]
        got = [
            (p.name, p.kind, p.default) for p in inspect.signature(implemented).parameters.values()
        ]
        assert got == want, name


def test_open_store_opens_a_sqlite_path(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "flowctl.db"
    store = open_store(path)
    try:
        run, created = store.create_run(NewRun("r1", "wf", "wf.py:wf", "python", {}), T0)
        assert (created, store.get_run("r1"), store.path) == (True, run, str(path))
    finally:
        store.close()
    assert path.is_file()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_url_opens_the_postgresql_store_and_nothing_is_created_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """A URL is never taken for a file name: open_store goes to the server (here one that
    is not there: one line naming it, no password), and no folder or file appears."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"{scheme}://flow:s3cret@127.0.0.1:{port}/flowctl"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatabaseError) as raised:
        open_store(url)
    message = str(raised.value)
    assert isinstance(raised.value, FlowctlError) and raised.value.exit_code == 1
    assert "\n" not in message
    assert message.startswith(f"cannot connect to PostgreSQL at 127.0.0.1:{port}/flowctl: ")
    assert "s3cret" not in message  # a password in the URL is never echoed
    assert list(tmp_path.iterdir()) == []  # no "postgresql:" folder, no file


def test_nothing_outside_the_store_imports_a_backend_or_sqlite() -> None:
    """Callers reach a backend only through open_store and the Store protocol."""
    banned = ("flowctl.store.sqlite", "sqlite3", "sqlite_utils")
    offenders = []
    for path in sorted(FLOWCTL.rglob("*.py")):
        if "store" in path.relative_to(FLOWCTL).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(FLOWCTL)}: {n}"
                for n in names
                if any(n == b or n.startswith(b + ".") for b in banned)
            ]
    assert offenders == []


# ---------------------------------------------------------------- the lease


def _claimed(store: Store, owner: str = "host-a/1/1/aaaa") -> Claim:
    store.create_run(NewRun("r1", "wf", "wf.py:wf", "python", {"n": 1}), T0)
    store.send_signal("r1", "go", {"x": 1}, T0)
    (claim,), ended = store.claim_due(owner, T0, T0 + LEASE, 1)
    assert ended == []
    return claim


def test_a_claim_mints_the_one_lease_the_run_row_records(store: SqliteStore) -> None:
    claim = _claimed(store)
    run = store.get_run("r1")
    assert claim.lease == Lease("r1", run.fence, "host-a/1/1/aaaa")
    assert (run.status, run.lease_owner, run.fence) == (RunStatus.RUNNING, claim.lease.owner, 1)


def _state(store: Store) -> tuple[Any, ...]:
    run = store.get_run("r1")
    return (
        run,
        store.journal("r1"),
        store.versions("r1"),
        store.published("r1"),
        store.pending_signals("r1"),
        store.timeline("r1"),
    )


@pytest.mark.parametrize(
    "forge",
    [
        lambda lease: Lease(lease.run_id, lease.fence, "host-b/2/2/bbbb"),  # another owner
        lambda lease: Lease(lease.run_id, lease.fence - 1, lease.owner),  # an older fence
        lambda lease: Lease(lease.run_id, lease.fence + 1, lease.owner),  # a fence not minted
    ],
    ids=["owner", "older-fence", "unminted-fence"],
)
def test_every_fenced_write_refuses_a_lease_that_is_not_the_current_one(
    store: SqliteStore, forge: Any
) -> None:
    claim = _claimed(store)
    bad: Lease = forge(claim.lease)
    now = T0 + timedelta(seconds=1)
    step = JournalEntry("r1", 0, CallKind.STEP, "s0", EntryState.DONE, 1, None, now)
    sleep = JournalEntry("r1", 0, CallKind.SLEEP, "sleep", EntryState.PENDING, wake_at=now)
    error = {"type": "E", "message": "m"}
    before = _state(store)
    assert store.record_entry(bad, step, now) is False
    assert store.consume_signal(bad, "go", 0, now) == (False, None, False)
    assert store.record_version(bad, "change", 2, now) is False
    assert store.publish(bad, "progress", 50, now) is False
    assert store.suspend_run(bad, RunStatus.SLEEPING, now, now, 1.0, sleep, ("x", {})) is None
    assert store.complete_run(bad, "late", now, 1.0) is False
    assert store.fail_attempt(bad, error, now, 1.0, None) is None
    assert store.end_run(bad, RunStatus.CANCELLED, None, now, 1.0) is False
    assert store.heartbeat(bad.owner, [(bad, 9.0)], now + LEASE, now) == [
        HeartbeatReply("r1", lost=True)
    ]
    assert store.release_runs([bad], now, "stopping") == 0
    assert _state(store) == before
    # The lease the claim minted still writes.
    assert store.record_entry(claim.lease, step, now) is True
    assert store.complete_run(claim.lease, "done", now, 1.0) is True
    assert store.get_run("r1").status is RunStatus.COMPLETED
