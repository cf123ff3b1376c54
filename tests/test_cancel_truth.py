"""Cancellation tells the truth: a run cancelled inside a Python step stays `running`
("cancel requested") under a kept lease until its handler stops, then ends `cancelled`.

Driven through the serving loop (run_forever) on a FakeClock, with heartbeats on it.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import open_same, wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """
import flowctl_cancel_hooks as hooks
from flowctl import workflow


def stubborn():
    hooks.ENTERED.set()
    hooks.RELEASE.wait(10)  # a Python step that never looks at ctx.cancelled
    hooks.DONE.append("stubborn")
    return "finished anyway"


@workflow
def long_step(ctx):
    ctx.step("stubborn", stubborn)
    ctx.step("next", lambda: hooks.DONE.append("next"))
    return "completed"
"""


@pytest.fixture
def hooks() -> Iterator[types.SimpleNamespace]:
    mod = types.ModuleType("flowctl_cancel_hooks")
    ns = types.SimpleNamespace(ENTERED=threading.Event(), RELEASE=threading.Event(), DONE=[])
    mod.__dict__.update(vars(ns))
    sys.modules["flowctl_cancel_hooks"] = mod
    yield ns
    ns.RELEASE.set()
    sys.modules.pop("flowctl_cancel_hooks", None)


LEASE = timedelta(seconds=15)


def lease_until(store: Store, run_id: str) -> datetime:
    at = store.get_run(run_id).lease_until
    assert at is not None
    return at


def test_a_run_cancelled_mid_step_stays_running_under_its_lease_until_the_step_ends(
    tmp_path: Path, store: Store, fake_clock: FakeClock, hooks: types.SimpleNamespace
) -> None:
    flows = tmp_path / "cancel_flows.py"
    flows.write_text(FLOWS)
    run_id = ops.start(store, f"{flows}:long_step", {}, clock=fake_clock).run.run_id
    daemon_store = open_same(store)
    daemon = Daemon(daemon_store, fake_clock, DaemonConfig(concurrency=2, lease=15, heartbeat=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        assert hooks.ENTERED.wait(5)
        fence = store.get_run(run_id).fence
        cancelled = ops.cancel(store, run_id, clock=fake_clock, reason="not needed", by="ana")
        assert (cancelled.status, cancelled.cancel_requested) == (RunStatus.RUNNING, True)

        # 30 s of fake time, twice the lease, a heartbeat at a time: each one extends it.
        for _ in range(30):
            now = fake_clock.advance(1)
            wait_until(lambda n=now: lease_until(store, run_id) >= n + LEASE, timeout=5)
        run = store.get_run(run_id)
        assert (run.status, run.cancel_requested, run.fence) == (RunStatus.RUNNING, True, fence)
        assert run.lease_owner == daemon.owner
        assert run.lease_until is not None and run.lease_until > fake_clock.now()
        # `flowctl status` counts it as held by the daemon that still runs its step.
        report = ops.status(store, clock=fake_clock)
        assert [(d.owner, held) for d, _alive, held in report.daemons] == [(daemon.owner, 1)]
        # Another daemon cannot take it: the lease is kept.
        with open_same(store) as other_store:
            assert Daemon(other_store, fake_clock).tick() == 0
        assert hooks.DONE == []

        hooks.RELEASE.set()  # the step ends on its own
        wait_until(lambda: store.get_run(run_id).status is RunStatus.CANCELLED, timeout=5)
    finally:
        hooks.RELEASE.set()
        daemon.stop()
        thread.join(5)
        daemon_store.close()
    run = store.get_run(run_id)
    assert run.error is not None
    assert (run.error["kind"], run.error["message"]) == ("cancelled", "not needed")
    assert hooks.DONE == ["stubborn"]  # the step finished; the handler went no further
    types_ = [e.type for e in store.timeline(run_id)]
    assert types_[-2:] == ["cancel requested", "cancelled"]
    assert "lease lost" not in types_ and "reclaimed" not in types_
    assert run.finished_at is not None
    assert run.finished_at - cancelled.created_at >= timedelta(seconds=30)
