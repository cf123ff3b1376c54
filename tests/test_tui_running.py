"""The detail of a running run shows the step running now, for how long, and its last
lines of output (issue 17, item 5). The worker's heartbeat records the step's label and
when it began (`runs.current_step`, `runs.step_started_at`, both backends); the TUI reads
them through ops.show_run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import durable_flows as flows
import pytest
from helpers import wait_until
from test_tui import detail_text, listed, until

from flowctl import ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import NewRun, Store
from flowctl.store.sqlite import SqliteStore
from flowctl.tui import FlowctlApp

pytestmark = pytest.mark.tui

LEASE = timedelta(seconds=15)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def test_the_heartbeat_records_the_step_and_when_it_began(
    store: Store, fake_clock: FakeClock
) -> None:
    now = fake_clock.now()
    store.create_run(NewRun("r_1", "w", "w.py:w", "python", {}), now)
    (claim,), _ = store.claim_due("elsewhere/1/1/0000", now, now + LEASE, 1)
    began = now - timedelta(seconds=42)
    store.heartbeat(
        claim.lease.owner,
        [(claim.lease, 1.0)],
        now + LEASE,
        now,
        steps={"r_1": ("#2 'charge'", began)},
    )
    run = store.get_run("r_1")
    assert (run.current_step, run.step_started_at) == ("#2 'charge'", began)
    store.heartbeat(claim.lease.owner, [(claim.lease, 2.0)], now + LEASE, now, steps={"r_1": None})
    run = store.get_run("r_1")
    assert (run.current_step, run.step_started_at) == (None, None)  # between steps


def test_running_detail_shows_the_step_running_now_and_its_output(
    store: Store, fake_clock: FakeClock
) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    rid = flows.start(store, fake_clock, "two_steps")
    inside, release = threading.Event(), threading.Event()

    def in_step_b() -> None:  # runs inside step "b", on the daemon's worker thread
        print("charging card 4242", flush=True)
        fake_clock.advance(timedelta(seconds=90))
        daemon.heartbeat_once()
        inside.set()
        release.wait(30)

    flows.HOOKS["b"] = in_step_b
    worker = threading.Thread(target=daemon.tick)
    worker.start()
    try:
        assert inside.wait(30)
        run = store.get_run(rid)
        assert run.status is RunStatus.RUNNING and run.current_step == "#1 'b'"
        # the step's output reaches the store on the collector's next flush (FLUSH_EVERY)
        wait_until(lambda: store.output_tail(rid))

        async def scenario() -> str:
            app = FlowctlApp(store=store, clock=fake_clock)
            async with app.run_test(size=(120, 36)) as pilot:
                await until(pilot, lambda: "Running now" in detail_text(app), "the detail")
                assert app.view == "running" and listed(app) == [rid]
                return detail_text(app)

        text = asyncio.run(scenario())
    finally:
        release.set()
        worker.join(30)
    started = (fake_clock.now() - timedelta(seconds=90)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"Running now step #1 'b' for 1m30s (since {started})" in text
    assert "output of step #1 'b' (last lines): charging card 4242" in text
    assert store.get_run(rid).status is RunStatus.COMPLETED


def test_a_running_run_between_steps_says_so(store: Store, fake_clock: FakeClock) -> None:
    from flowctl.tui.render import render_detail

    now = fake_clock.now()
    store.create_run(NewRun("r_1", "w", "w.py:w", "python", {}), now)
    store.claim_due("elsewhere/1/1/0000", now, now + LEASE, 1)
    detail = ops.show_run(store, "r_1", clock=fake_clock)
    text = " ".join(render_detail(detail, now).plain.split())
    assert "Running now not inside a step at its last heartbeat" in text


BLOCKED = """\
import pathlib, time

def hold(path):
    while not pathlib.Path(path).exists():
        time.sleep(0.02)
    return "done"

def blocked(ctx, path: str):
    return ctx.step("hold", hold, path)
"""


def test_a_worker_process_records_the_step_a_handler_is_inside_and_its_start(
    tmp_path: Path,
) -> None:
    """With --workers, the worker running the handler beats the step and when it began."""
    (tmp_path / "flows.py").write_text(BLOCKED)
    db, go = tmp_path / "f.db", tmp_path / "go"
    clock = SystemClock()
    with SqliteStore(db) as store:
        rid = ops.start(
            store, "flows.py:blocked", {"path": str(go)}, clock=clock, cwd=str(tmp_path)
        ).run.run_id
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--workers", "2"],
        cwd=str(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with SqliteStore(db) as store:
            wait_until(lambda: store.get_run(rid).step_started_at is not None, timeout=30)
            run = store.get_run(rid)
            go.touch()
            wait_until(lambda: store.get_run(rid).status.is_terminal, timeout=30)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert run.status is RunStatus.RUNNING and run.current_step == "#0 'hold'"
    assert run.started_at is not None and run.step_started_at is not None
    assert run.started_at <= run.step_started_at <= clock.now()
