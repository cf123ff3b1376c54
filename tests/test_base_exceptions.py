"""Any BaseException escaping a step or a handler ends that attempt as a failure, its type
recorded, retried or dead-lettered like any error; no run is left `running`. A lease that
lapses with nobody else writing is reclaimed by the daemon's own timer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import open_same, wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.runtime.engine import Engine, Outcome
from flowctl.store import Claim
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """
from flowctl import workflow

RAISE = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
}


def explode(name):
    raise RAISE[name]()


@workflow
def in_step(ctx, exc):
    ctx.step("first", lambda: 1)
    ctx.step("explode", explode, exc)
    return "unreachable"


@workflow
def in_handler(ctx, exc):
    ctx.step("first", lambda: 1)
    explode(exc)


@workflow
def quick(ctx):
    return ctx.step("only", lambda: "done")
"""

KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit"]


@pytest.fixture
def flows(tmp_path: Path) -> str:
    path = tmp_path / "base_flows.py"
    path.write_text(FLOWS)
    return str(path)


def types_of(store: Store, run_id: str) -> list[str]:
    return [e.type for e in store.timeline(run_id)]


@pytest.mark.parametrize("where", ["in_step", "in_handler"])
@pytest.mark.parametrize("exc", KINDS)
def test_a_base_exception_fails_the_attempt_and_is_retried_then_dead_lettered(
    store: Store, fake_clock: FakeClock, flows: str, where: str, exc: str
) -> None:
    run_id = ops.start(
        store, f"{flows}:{where}", {"exc": exc}, clock=fake_clock, max_attempts=2
    ).run.run_id
    daemon = Daemon(open_same(store), fake_clock, DaemonConfig(concurrency=1))
    assert daemon.tick() == 1
    run = store.get_run(run_id)
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 2)  # retried after its backoff
    assert run.error is not None
    assert (run.error["type"], run.error["kind"]) == (exc, "raised")
    assert "failed" in types_of(store, run_id) and "retry scheduled" in types_of(store, run_id)

    fake_clock.advance(timedelta(seconds=1))  # the default run backoff
    assert daemon.tick() == 1
    run = store.get_run(run_id)
    assert run.status is RunStatus.DEAD
    assert run.error is not None
    assert (run.error["type"], run.error["dead_reason"]) == (exc, "attempts exhausted (2/2)")
    assert run.lease_owner is None
    # The step before it is journaled once and stands; the one that raised left no row.
    assert [e.name for e in store.journal(run_id).values()] == ["first"]
    daemon.store.close()


def test_a_keyboard_interrupt_in_a_step_under_the_serving_loop_never_leaves_it_running(
    store: Store, fake_clock: FakeClock, flows: str
) -> None:
    run_id = ops.start(
        store, f"{flows}:in_step", {"exc": "KeyboardInterrupt"}, clock=fake_clock, max_attempts=1
    ).run.run_id
    daemon = Daemon(open_same(store), fake_clock, DaemonConfig(concurrency=2))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        fake_clock.advance(0.05)
        wait_until(lambda: store.get_run(run_id).status is RunStatus.DEAD, timeout=5)
    finally:
        daemon.stop()
        thread.join(5)
        daemon.store.close()
    assert not thread.is_alive()
    error = store.get_run(run_id).error
    assert error is not None and error["type"] == "KeyboardInterrupt"
    assert "dead-lettered" in types_of(store, run_id)


class BrokenOnce(Engine):
    """An engine whose first execution escapes with an error and writes nothing (a bug, a
    full disk): the run is left `running` under a lease nobody extends."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls = 0

    def execute(self, claim: Claim, *args: Any, **kwargs: Any) -> Outcome:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the engine broke")
        return super().execute(claim, *args, **kwargs)


@pytest.fixture
def broken_daemon(store: Store, fake_clock: FakeClock) -> Iterator[Daemon]:
    own = open_same(store)
    daemon = Daemon(
        own,
        fake_clock,
        DaemonConfig(concurrency=2, lease=15, heartbeat=1),
        engine=BrokenOnce(own, fake_clock),
    )
    yield daemon
    own.close()


def test_a_lapsed_lease_is_reclaimed_by_the_daemons_own_timer(
    store: Store, fake_clock: FakeClock, flows: str, broken_daemon: Daemon
) -> None:
    run_id = ops.start(store, f"{flows}:quick", {}, clock=fake_clock).run.run_id
    thread = threading.Thread(target=broken_daemon.run_forever, daemon=True)
    thread.start()
    try:
        fake_clock.advance(0.05)  # the daemon claims it; the engine breaks
        wait_until(lambda: broken_daemon.engine.calls == 1, timeout=5)  # type: ignore[attr-defined]
        # ... and its worker has let go of it: until then the heartbeat still extends the
        # lease, and a beat just after the jump below would push it 15 s past the clock.
        wait_until(lambda: not broken_daemon.holds(run_id), timeout=5)
        run = store.get_run(run_id)
        assert run.status is RunStatus.RUNNING and run.lease_until is not None
        # Nobody else writes from here on: only the daemon's wheel can bring it back.
        fake_clock.set(run.lease_until)
        wait_until(lambda: store.get_run(run_id).status is RunStatus.COMPLETED, timeout=5)
    finally:
        broken_daemon.stop()
        thread.join(5)
    assert "reclaimed" in types_of(store, run_id)
    assert store.get_run(run_id).result == "done"
