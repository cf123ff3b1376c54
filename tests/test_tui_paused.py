"""The TUI's Paused view: its own tab (key 9) and count, what a paused run was, when resume
would make it due, and its deadline countdown; driven by Textual's pilot on a FakeClock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import durable_flows as flows
import pytest
from durable_flows import start
from textual.worker import WorkerCancelled

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import Store
from flowctl.tui import FlowctlApp, RunTable

pytestmark = pytest.mark.tui


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


async def _settle(app: FlowctlApp, pilot: object) -> None:
    for _ in range(3):
        for worker in list(app.workers):
            try:
                await worker.wait()
            except WorkerCancelled:
                pass
        await pilot.pause()  # type: ignore[attr-defined]


def test_paused_view_lists_paused_runs_with_their_count(
    store: Store, fake_clock: FakeClock
) -> None:
    deadline = fake_clock.now() + timedelta(hours=3)
    sleeper = start(store, fake_clock, "sleeper", deadline=deadline)
    other = start(store, fake_clock, "sleeper")
    Daemon(store, fake_clock, DaemonConfig(concurrency=2)).tick()
    ops.pause(store, sleeper, clock=fake_clock)
    assert store.get_run(other).status is RunStatus.SLEEPING

    async def scenario() -> None:
        app = FlowctlApp(store=store, clock=fake_clock)
        async with app.run_test(size=(140, 30)) as pilot:
            await _settle(app, pilot)
            assert "9 Paused 1" in str(app.query_one("#views").render())
            await pilot.press("9")
            await _settle(app, pilot)
            assert app.view == "paused"
            table = app.query_one("#table", RunTable)
            assert [str(r.key.value) for r in table.ordered_rows] == [sleeper]
            assert table.get_cell(sleeper, "was").plain == "sleeping"
            assert table.get_cell(sleeper, "due_on_resume").plain == "1h00m"
            assert table.get_cell(sleeper, "deadline_in").plain == "3h00m"

    asyncio.run(scenario())
    # and with the view opened on a database where only paused runs exist
    ops.pause(store, other, clock=fake_clock)
    fake_clock.advance(timedelta(hours=2))
    assert FlowctlApp(store=store, clock=fake_clock, view="auto").view == "paused"
    # with nothing paused the tab is not shown (its key still opens the view)
    for rid in (sleeper, other):
        ops.resume(store, rid, clock=fake_clock)

    async def nothing_paused() -> None:
        app = FlowctlApp(store=store, clock=fake_clock)
        async with app.run_test(size=(140, 30)) as pilot:
            await _settle(app, pilot)
            assert "Paused" not in str(app.query_one("#views").render())
            await pilot.press("9")
            await _settle(app, pilot)
            assert app.view == "paused"
            assert "9 Paused 0" in str(app.query_one("#views").render())

    asyncio.run(nothing_paused())


def test_p_pauses_the_selected_run_and_resumes_it(store: Store, fake_clock: FakeClock) -> None:
    rid = start(store, fake_clock, "sleeper")
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()

    async def scenario() -> None:
        app = FlowctlApp(store=store, clock=fake_clock)
        async with app.run_test(size=(140, 30)) as pilot:
            await pilot.press("2")
            await _settle(app, pilot)
            await pilot.press("p", "y")  # pause, confirmed
            await _settle(app, pilot)
            assert store.get_run(rid).status is RunStatus.PAUSED
            await pilot.press("9")
            await _settle(app, pilot)
            await pilot.press("p", "y")  # resume, confirmed
            await _settle(app, pilot)
            assert store.get_run(rid).status is RunStatus.SLEEPING
            await pilot.press("p", "n")  # asked, declined: nothing changes
            await _settle(app, pilot)

    asyncio.run(scenario())
    assert store.get_run(rid).status is RunStatus.SLEEPING
    assert [e.type for e in store.timeline(rid)][-2:] == ["paused", "resumed"]
