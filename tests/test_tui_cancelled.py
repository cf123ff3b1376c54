"""The TUI's Cancelled view (key 0) and the per-view key hints: who cancelled a run and
why, redrive from there, and an 80-column tab bar that keeps every view named when the
Paused and Cancelled tabs are both up (issue 17, item 5)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from test_tui import Seeded, flows, listed, pilot_test, seeded, settle  # noqa: F401  (fixtures: runs in every status)

from flowctl import ops
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.tui import FlowctlApp, RunTable
from flowctl.tui.widgets import KeyHints

pytestmark = pytest.mark.tui


def _bar(app: FlowctlApp) -> str:
    return str(app.query_one("#views").render())


def _hints(app: FlowctlApp) -> str:
    return str(app.query_one(KeyHints).render())


@pilot_test
async def test_cancelled_view_lists_who_cancelled_and_why_and_redrives(seeded: Seeded) -> None:  # noqa: F811
    seeded.clock.advance(timedelta(minutes=1))  # cancelled after the seeded one
    ops.cancel(
        seeded.store,
        seeded.ids["sleeping"][1],
        clock=seeded.clock,
        reason="not needed\nany more",
        by="ana",
    )
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        assert "0 Cancelled 2" in _bar(app)
        await pilot.press("0")
        await settle(pilot)
        assert app.view == "cancelled"
        late, doomed = seeded.ids["sleeping"][1], seeded.ids["cancelled"][0]
        assert sorted(listed(app)) == sorted([late, doomed])
        table = app.query_one("#table", RunTable)
        assert table.get_cell(late, "by").plain == "ana"
        assert table.get_cell(late, "reason").plain == "not needed"  # the first line
        assert table.get_cell(doomed, "reason").plain == "cancelled by operator"
        hints = _hints(app)
        assert "r redrive" in hints and "w wake" not in hints and "c cancel" not in hints
        await pilot.press("home", "r", "y")  # the newest first: `late`, redriven
        await settle(pilot)
        assert listed(app) == [doomed]
        assert "0 Cancelled 1" in _bar(app)
    assert seeded.store.get_run(late).status is RunStatus.QUEUED


@pilot_test
async def test_a_run_cancelled_while_running_shows_who_asked(seeded: Seeded) -> None:  # noqa: F811
    """Issue 39: a cancel that takes effect when the handler stops (here: its worker's lease
    lapses and the next daemon ends it) kept no BY."""
    running = seeded.ids["running"][0]
    ops.cancel(seeded.store, running, clock=seeded.clock, reason="wrong user", by="ana")
    assert seeded.store.get_run(running).status is RunStatus.RUNNING  # only requested
    seeded.clock.advance(timedelta(seconds=30))  # daemon-1's lease lapses
    Daemon(seeded.store, seeded.clock, DaemonConfig(concurrency=8, lease=15, heartbeat=1)).tick()
    assert seeded.store.get_run(running).status is RunStatus.CANCELLED
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        await pilot.press("0")
        await settle(pilot)
        table = app.query_one("#table", RunTable)
        assert table.get_cell(running, "by").plain == "ana"
        assert table.get_cell(running, "reason").plain == "wrong user"


@pilot_test
async def test_each_view_hints_the_keys_that_act_there(seeded: Seeded) -> None:  # noqa: F811
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    seen: dict[str, str] = {}
    async with app.run_test(size=(120, 36)) as pilot:
        for key, view in (("2", "sleeping"), ("5", "dead"), ("9", "paused"), ("7", "schedules")):
            await pilot.press(key)
            await settle(pilot)
            seen[view] = _hints(app)
    assert "w wake" in seen["sleeping"] and "p pause" in seen["sleeping"]
    assert "r redrive" in seen["dead"] and "w wake" not in seen["dead"]
    assert "p resume" in seen["paused"]
    assert "t trigger now" in seen["schedules"] and "y copy id" not in seen["schedules"]


@pilot_test
async def test_an_80_column_tab_bar_names_every_view_with_paused_and_cancelled(
    seeded: Seeded,  # noqa: F811
) -> None:
    ops.pause(seeded.store, seeded.ids["sleeping"][0], clock=seeded.clock)
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        bar = _bar(app)
    assert len(bar) <= 80
    for name in (
        "Run",
        "Sleep",
        "Wait",
        "Queue",
        "Dead",
        "Done",
        "Sched",
        "All",
        "Pause",
        "Cancel",
    ):
        assert name in bar, (name, bar)
    assert bar.startswith(" 1Run 1 2Sleep 3Wait")  # only the open view's count


def test_cancelled_is_a_view_of_its_own_status() -> None:
    from flowctl.tui.views import VIEWS_BY_KEY

    view: Any = VIEWS_BY_KEY["cancelled"]
    assert (view.number, view.statuses, view.optional) == ("0", (RunStatus.CANCELLED,), True)
