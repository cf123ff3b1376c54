"""Drain keeps to --grace: past it the daemon interrupts what still runs, hands it back and
exits within the grace plus one second, on a FakeClock through the serving loop."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import open_same, wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """
import flowctl_drain_hooks as hooks
from flowctl import workflow


def deaf():
    hooks.ENTERED.set()
    hooks.RELEASE.wait(10)  # ignores every interrupt: only the test ends it
    return "late"


@workflow
def deaf_step(ctx):
    return ctx.step("deaf", deaf)
"""


@pytest.fixture
def hooks() -> Iterator[types.SimpleNamespace]:
    mod = types.ModuleType("flowctl_drain_hooks")
    ns = types.SimpleNamespace(ENTERED=threading.Event(), RELEASE=threading.Event())
    mod.__dict__.update(vars(ns))
    sys.modules["flowctl_drain_hooks"] = mod
    yield ns
    ns.RELEASE.set()
    sys.modules.pop("flowctl_drain_hooks", None)


def test_drain_exits_within_the_grace_plus_one_second_and_hands_the_run_back(
    tmp_path: Path,
    store: Store,
    fake_clock: FakeClock,
    hooks: types.SimpleNamespace,
) -> None:
    flows = tmp_path / "drain_flows.py"
    flows.write_text(FLOWS)
    run_id = ops.start(store, f"{flows}:deaf_step", {}, clock=fake_clock).run.run_id
    own = open_same(store)
    daemon = Daemon(own, fake_clock, DaemonConfig(concurrency=1, grace=5, heartbeat=1))
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(daemon.run_forever()), daemon=True)
    thread.start()
    try:
        assert hooks.ENTERED.wait(5)
        daemon.stop()  # as SIGTERM does: drain
        fake_clock.advance(6.0)  # the grace (5 s) plus one second; then fake time stands still
        wait_until(lambda: not thread.is_alive(), timeout=5)
    finally:
        hooks.RELEASE.set()
        thread.join(5)
        own.close()
    assert codes == [0]
    run = store.get_run(run_id)
    assert run.status is RunStatus.RUNNING  # handed back, not failed or cancelled
    assert run.error is None
    (released,) = [e for e in store.timeline(run_id) if e.type == "released"]
    assert released.data["reason"] == "grace period over"
    assert run.run_at is not None and run.run_at <= fake_clock.now()  # due for another daemon
