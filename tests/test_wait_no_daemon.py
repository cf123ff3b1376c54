"""`flowctl wait RUN` with no daemon serving the database (issue 17, item 3): it says so
once on stderr (sleepers will not wake; start one with `flowctl daemon`) and keeps waiting,
since a daemon may start later. Whether a daemon is live is decided as `flowctl status`
decides it (ops.daemon_running). The waits run on a FakeClock: nothing sleeps for real."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.cli.start import NO_DAEMON
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ids import HOST, make_owner
from flowctl.store import Store, open_store
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def store(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The test's database (both backends), created and open beside the CLI's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    s = open_store(db, create=True)
    yield s
    s.close()


@pytest.fixture
def invoke(db: str, store: Store, clock: FakeClock) -> Any:
    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def _waits(clock: FakeClock, monkeypatch: pytest.MonkeyPatch, then: Callable[[int], None]) -> None:
    """The wait loop's waits: time passes to the deadline asked for; `then(n)` after the
    n-th wait (a daemon starting, a tick)."""
    count = [0]

    def wait_until(event: threading.Event, deadline: float) -> bool:
        count[0] += 1
        clock.advance(timedelta(seconds=max(0.0, deadline - clock.monotonic())))
        then(count[0])
        return False

    monkeypatch.setattr(clock, "wait_until", wait_until)


def _queued(invoke: Any) -> str:
    return str(json.loads(invoke("run", PING, "--detach", "--json").stdout)["id"])


def test_no_daemon_is_said_once_and_the_wait_goes_on(
    invoke: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _queued(invoke)
    _waits(clock, monkeypatch, lambda n: None)
    out = invoke("wait", rid, "--timeout", "20s", code=124)  # 100 polls, 4 daemon looks
    assert out.stderr.splitlines() == [
        NO_DAEMON,
        f"flowctl: still running after 20s: {rid} (queued)",
    ]
    assert "flowctl daemon" in NO_DAEMON and "sleepers will not wake" in NO_DAEMON
    assert out.stdout == ""


def test_after_saying_so_it_still_sees_the_run_end(
    invoke: Any, store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _queued(invoke)
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
    _waits(clock, monkeypatch, lambda n: daemon.tick() if n == 30 else None)  # one comes, later
    out = invoke("wait", rid)
    assert out.stderr.splitlines() == [NO_DAEMON]
    assert out.stdout.startswith(f"completed {rid}: ")


def test_with_a_live_daemon_nothing_is_said(
    invoke: Any, store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _queued(invoke)
    store.register_daemon(
        make_owner(), HOST, os.getpid(), None, clock.now(), {}
    )  # this process: live
    assert ops.daemon_running(store, clock=clock)
    _waits(clock, monkeypatch, lambda n: None)
    out = invoke("wait", rid, "--timeout", "20s", code=124)
    assert out.stderr == f"flowctl: still running after 20s: {rid} (queued)\n"


def test_a_daemon_row_whose_process_is_gone_is_no_daemon(
    invoke: Any, store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _queued(invoke)
    gone = f"{HOST}/999999999/1/dead"  # this host, a pid that cannot exist: SIGKILLed
    store.register_daemon(gone, HOST, 999_999_999, "1", clock.now(), {})
    assert not ops.daemon_running(store, clock=clock)
    _waits(clock, monkeypatch, lambda n: None)
    out = invoke("wait", rid, "--json", "--timeout", "1s", code=124)
    assert out.stderr.splitlines()[0] == NO_DAEMON
    assert json.loads(out.stdout)["id"] == rid  # stdout stays the one JSON document
