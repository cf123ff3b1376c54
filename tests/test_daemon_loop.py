"""The serving loop on a FakeClock: run_forever() is tick() repeated, and its timer wheel
takes the run_at the store applied.

Each parked run below has a deadline earlier than the time it asked to wake. The store
parks it at the deadline; the wheel must hold that same time (the daemon's own writes do
not move data_version, so nothing else would correct it). With fake time stopped at the
deadline, the run must end dead without its handler being woken.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import open_same, wait_until

from flowctl import ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.executor import Executor, Greenlets, Threads
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.daemon.processes import Processes
from flowctl.model import RunStatus, to_us
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.testing import WorkflowEnvironment

FLOWS = """
from flowctl import RetryPolicy, step, workflow


@workflow
def nap(ctx):
    ctx.sleep(30)
    ctx.step("after", lambda: "woken")
    return "woken"


@workflow
def approval(ctx, timeout=None):
    got = ctx.wait_signal("approved", timeout=timeout)
    ctx.step("after", lambda: got)
    return got


@step(retry=RetryPolicy.make(max_attempts=5, backoff="10s"))
def flaky():
    raise RuntimeError("try again later")


@workflow
def step_backoff(ctx):
    ctx.step("flaky", flaky)
    ctx.step("after", lambda: "woken")


@workflow
def run_backoff(ctx):
    ctx.step("boom", lambda: 1)
    raise RuntimeError("the attempt fails")


@workflow
def quick(ctx):
    return ctx.step("after", lambda: "ran")
"""


@pytest.fixture
def flows(tmp_path: Path) -> str:
    path = tmp_path / "loop_flows.py"
    path.write_text(FLOWS)
    return str(path)


class Serving:
    """run_forever in a thread, on the FakeClock; stopped hard at teardown."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert daemon.serving.wait(5)

    def _run(self) -> None:
        self.code = self.daemon.run_forever()

    def close(self) -> None:
        self.daemon.stop(drain=False)
        self.thread.join(5)


@pytest.fixture
def serving(store: Store, fake_clock: FakeClock) -> Iterator[Serving]:
    # The daemon has its own connection, as in production; the test writes through another.
    daemon_store = open_same(store)
    s = Serving(Daemon(daemon_store, fake_clock, DaemonConfig(concurrency=2, heartbeat=1)))
    yield s
    s.close()
    daemon_store.close()


def status(store: Store, run_id: str) -> RunStatus:
    return store.get_run(run_id).status


def started_by_cli(
    store: Store, clock: FakeClock, target: str, deadline_in: float, **kw: Any
) -> str:
    deadline = clock.now() + timedelta(seconds=deadline_in)
    return ops.start(
        store, target, kw.pop("input", {}), clock=clock, deadline=deadline, **kw
    ).run.run_id


CASES = {
    "sleeping": ("nap", {}, RunStatus.SLEEPING),
    "waiting with a timeout": ("approval", {"input": {"timeout": 30}}, RunStatus.WAITING),
    "waiting without a timeout": ("approval", {}, RunStatus.WAITING),
    "backing off after a step error": ("step_backoff", {}, RunStatus.QUEUED),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_parked_run_ends_dead_at_its_deadline_not_at_its_wake_time(
    case: str, store: Store, fake_clock: FakeClock, flows: str, serving: Serving
) -> None:
    name, options, parked = CASES[case]
    run_id = started_by_cli(store, fake_clock, f"{flows}:{name}", 2.0, **options)
    fake_clock.advance(POLL_INTERVAL)  # the daemon notices the new run and parks it
    # Parked: its pending sleep, signal wait or step retry is journaled.
    wait_until(lambda: status(store, run_id) is parked and store.journal(run_id), timeout=5)
    deadline = store.get_run(run_id).deadline
    assert deadline is not None
    assert store.get_run(run_id).run_at == deadline  # the store parked it at its deadline

    fake_clock.set(deadline)  # fake time stops at the deadline: one wheel tick, no more
    wait_until(lambda: status(store, run_id) is RunStatus.DEAD, timeout=5)

    run = store.get_run(run_id)
    assert run.error is not None and run.error["kind"] == "deadline"
    assert run.finished_at == deadline
    assert "after" not in {e.name for e in store.journal(run_id).values()}
    claims = [e for e in store.timeline(run_id) if e.type in ("claimed", "woke")]
    assert len(claims) == 1  # the first claim only: the handler was never woken again


def test_a_run_backing_off_after_a_run_error_ends_dead_at_its_deadline(
    store: Store, fake_clock: FakeClock, flows: str, serving: Serving
) -> None:
    # The default run backoff is 1 s; the deadline comes first.
    run_id = started_by_cli(store, fake_clock, f"{flows}:run_backoff", 0.5)
    fake_clock.advance(POLL_INTERVAL)
    wait_until(lambda: store.get_run(run_id).attempt == 2, timeout=5)
    run = store.get_run(run_id)
    assert (run.status, run.run_at) == (RunStatus.QUEUED, run.deadline)
    assert run.deadline is not None
    fake_clock.set(run.deadline)
    wait_until(lambda: status(store, run_id) is RunStatus.DEAD, timeout=5)
    run = store.get_run(run_id)
    assert run.error is not None and run.error["kind"] == "deadline"
    assert [e.type for e in store.timeline(run_id)].count("claimed") == 1


def test_a_run_queued_by_in_ends_dead_at_its_deadline_without_starting(
    store: Store, fake_clock: FakeClock, flows: str, serving: Serving
) -> None:
    run_id = started_by_cli(
        store,
        fake_clock,
        f"{flows}:quick",
        2.0,
        run_at=fake_clock.now() + timedelta(seconds=30),  # flowctl run --in 30s
    )
    run = store.get_run(run_id)
    assert run.deadline is not None and run.run_at == run.deadline
    fake_clock.set(run.deadline)
    wait_until(lambda: status(store, run_id) is RunStatus.DEAD, timeout=5)
    assert store.get_run(run_id).error["kind"] == "deadline"  # type: ignore[index]
    assert store.journal(run_id) == {}
    assert "claimed" not in [e.type for e in store.timeline(run_id)]


def test_the_testing_environment_drives_the_same_loop(db: str, flows: str) -> None:
    env = WorkflowEnvironment(db=db)
    deadline = env.clock.now() + timedelta(seconds=2)
    run_id = env.start(f"{flows}:nap", deadline=deadline)
    assert env.get(run_id).status is RunStatus.SLEEPING
    env.advance("2s")  # the wheel holds the store's run_at (the deadline), not the 30 s wake
    run = env.get(run_id)
    assert run.status is RunStatus.DEAD
    assert run.error is not None and run.error["kind"] == "deadline"
    env.close()


def test_run_forever_and_tick_share_one_loop_body(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str
) -> None:
    """tick() is the loop body: it claims only what its wheel says is due, exactly as
    run_forever does, so a wrong wheel shows in tests that drive tick()."""
    daemon = Daemon(Store(db_path), fake_clock, DaemonConfig(concurrency=1))
    run_id = started_by_cli(store, fake_clock, f"{flows}:nap", 2.0)
    assert daemon.tick() == 1
    assert status(store, run_id) is RunStatus.SLEEPING
    run = store.get_run(run_id)
    assert run.deadline is not None
    assert daemon.wheel.next_at() == to_us(run.deadline)  # the store's value
    fake_clock.set(run.deadline)
    assert daemon.tick() == 0  # ended at the claim, not executed
    assert status(store, run_id) is RunStatus.DEAD
    daemon.store.close()


@pytest.mark.parametrize("batch", [True, False], ids=["batch-runner", "threads"])
def test_a_stopped_daemon_leaves_no_thread_behind(
    db_path: Path, fake_clock: FakeClock, batch: bool
) -> None:
    """On a FakeClock nobody advances time after the daemon stops: its heartbeat thread must
    end with run_forever, not wait forever for a heartbeat interval that never passes; the
    batch runner's thread (or the worker threads) end too."""
    before = set(threading.enumerate())
    daemon_store = Store(db_path)
    config = DaemonConfig(concurrency=2, heartbeat=1, batch=batch)
    s = Serving(Daemon(daemon_store, fake_clock, config))
    ours = [t for t in threading.enumerate() if t not in before and t is not s.thread]
    runner = "flowctl-runner" if batch else "flowctl-worker-0"
    assert {t.name for t in ours} >= {"flowctl-heartbeat", runner}
    s.close()
    daemon_store.close()
    for t in ours:
        t.join(5)
    assert [t.name for t in ours if t.is_alive()] == []


def test_the_executor_is_one_interface_chosen_once_from_the_settings(tmp_path: Path) -> None:
    """How claims execute is one interface whose kind the settings pick once: greenlets
    (the batch runner) where the store can round its writes, threads when asked for or for
    one handler at a time, worker processes for `workers`; a one-run worker never starts
    processes. tick() outside run_forever executes in the caller's thread whatever the
    kind (every test that drives tick() relies on it)."""
    clock = SystemClock()  # worker processes keep system time: an injected clock is refused
    with Store(tmp_path / "x.db") as store:

        def chosen(config: DaemonConfig, run_id: str | None = None) -> Executor:
            return Daemon(store, clock, config, only_run_id=run_id).executor

        assert isinstance(chosen(DaemonConfig()), Greenlets)
        assert isinstance(chosen(DaemonConfig(batch=False)), Threads)
        assert isinstance(chosen(DaemonConfig(concurrency=1)), Threads)
        assert isinstance(chosen(DaemonConfig(workers=2)), Processes)
        assert isinstance(chosen(DaemonConfig(workers=2), run_id="r1"), Threads)
        for config in (DaemonConfig(), DaemonConfig(batch=False), DaemonConfig(concurrency=1)):
            daemon = Daemon(store, clock, config)
            assert daemon.batched() is isinstance(daemon.executor, Greenlets)
