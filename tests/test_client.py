"""The Python client: the same behaviour as the CLI, without shelling out."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flowctl import Client
from flowctl.client import WaitTimeoutError
from flowctl.clock import SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import InputError, InvalidStateError
from flowctl.model import RunStatus
from tests.dbs import counts

FLOWS = """\
from flowctl import workflow

@workflow
def nap(ctx, who: str = "ana"):
    first = ctx.step("first", lambda: who.upper())
    ctx.sleep("200ms")
    return {"first": first, "second": ctx.step("second", lambda: len(who))}

@workflow
def approval(ctx):
    return ctx.wait_signal("approved", timeout="1h")
"""


@pytest.fixture
def flows(tmp_path: Path) -> str:
    (tmp_path / "flows.py").write_text(FLOWS)
    return str(tmp_path / "flows.py")


def test_run_drives_a_workflow_through_its_sleep(db: str, flows: str) -> None:
    with Client(db) as client:
        run = client.run(f"{flows}:nap", {"who": "bo"})
        assert run.status is RunStatus.COMPLETED
        assert run.result == {"first": "BO", "second": 2}
        assert client.get(run.run_id[:8]).run_id == run.run_id


def test_start_queues_and_a_daemon_runs_it(db: str, flows: str) -> None:
    with Client(db) as client:
        run_id = client.start(f"{flows}:nap")
        assert client.get(run_id).status is RunStatus.QUEUED
        assert [r.run_id for r in client.list(status="queued")] == [run_id]
        daemon = Daemon(client.store, SystemClock(), DaemonConfig(concurrency=1))
        thread = threading.Thread(
            target=daemon.run_forever, kwargs={"until_idle": False}, daemon=True
        )
        thread.start()
        try:
            done = client.wait(run_id, timeout=10)
        finally:
            daemon.stop()
            thread.join(5)
        assert done.result == {"first": "ANA", "second": 3}


def test_wait_gives_up_with_a_clear_error(db: str, flows: str) -> None:
    with Client(db) as client:
        run_id = client.start(f"{flows}:approval")
        with pytest.raises(WaitTimeoutError, match=f"run {run_id} is still queued"):
            client.wait(run_id, timeout="100ms")


def test_key_returns_the_first_run_and_actions_work(db: str, flows: str) -> None:
    with Client(db) as client:
        first = client.start(f"{flows}:approval", key="signup-42")
        assert client.start(f"{flows}:approval", key="signup-42") == first
        client.signal(first, "approved", {"by": "ana"})
        assert client.cancel(first, reason="dup").status is RunStatus.CANCELLED
        assert client.redrive(first).status is RunStatus.QUEUED
        with pytest.raises(InvalidStateError):
            client.redrive(first)


def test_bad_input_is_refused_before_anything_is_written(db: str, flows: str) -> None:
    with Client(db) as client:
        with pytest.raises(InputError, match="has no input 'whom'"):
            client.start(f"{flows}:nap", {"whom": "x"})
        assert client.list() == []


def test_client_resolves_the_database_like_the_cli(
    db: str, flows: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWCTL_DB", db)
    with Client() as client:
        client.start(f"{flows}:nap")
        assert str(client.db_path) == db
    assert counts(db)[0] == 1
