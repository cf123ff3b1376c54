"""The detail of a running run shows the step running now, for how long, and its last
lines of output (issue 17, item 5). The worker's heartbeat records the step's label and
when it began (`runs.current_step`, `runs.step_started_at`, both backends); the TUI reads
them through ops.show_run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta

import durable_flows as flows
import pytest
from test_tui import detail_text, listed, settle

from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import NewRun, Store
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

        async def scenario() -> str:
            app = FlowctlApp(store=store, clock=fake_clock)
            async with app.run_test(size=(120, 36)) as pilot:
                await settle(pilot)
                assert app.view == "running" and listed(app) == [rid]
                return detail_text(app)

        text = asyncio.run(scenario())
        has_output = bool(store.output_tail(rid))
    finally:
        release.set()
        worker.join(30)
    started = (fake_clock.now() - timedelta(seconds=90)).strftime("%Y-%m-%d %H:%M:%S")
    assert f"Running now step #1 'b' for 1m30s (since {started})" in text
    if has_output:  # SQLite stores step output; PostgreSQL does not yet (issue 15)
        assert "output of step #1 'b' (last lines): charging card 4242" in text
    else:
        assert "output of step" not in text
    assert store.get_run(rid).status is RunStatus.COMPLETED


def test_a_running_run_between_steps_says_so(store: Store, fake_clock: FakeClock) -> None:
    from flowctl import ops
    from flowctl.tui.render import render_detail

    now = fake_clock.now()
    store.create_run(NewRun("r_1", "w", "w.py:w", "python", {}), now)
    store.claim_due("elsewhere/1/1/0000", now, now + LEASE, 1)
    detail = ops.show_run(store, "r_1", clock=fake_clock)
    text = " ".join(render_detail(detail, now).plain.split())
    assert "Running now not inside a step at its last heartbeat" in text
