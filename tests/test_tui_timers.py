"""The TUI's timers belong to the widgets they re-render, so nothing ticks into a widget
that is gone: exiting while ticks are due many times a second never raises NoMatches.

Ticks are made 1 ms apart so that every exit overlaps many of them (at the real 1 s a
tick during teardown was rare enough to fail 3 runs in 30).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import Static

from flowctl.clock import FakeClock
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.store import NewRun, Store
from flowctl.tui import FlowctlApp, RunTable
from flowctl.tui import app as tui
from flowctl.tui import header as tui_header
from flowctl.tui import widgets as tui_widgets
from flowctl.tui.widgets import DetailText

pytestmark = pytest.mark.tui

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def _sleeper(store: Store, clock: FakeClock, run_id: str, hours: int) -> None:
    store.create_run(NewRun(run_id, "nap", "nap.py:nap", "python", {}), clock.now())
    claims, _ = store.claim_due(
        "w", clock.now(), clock.now() + timedelta(seconds=15), 1, run_id=run_id
    )
    wake = clock.now() + timedelta(hours=hours)
    entry = JournalEntry(run_id, 0, CallKind.SLEEP, "sleep", EntryState.PENDING, None, wake_at=wake)
    store.suspend_run(
        claims[0].lease, RunStatus.SLEEPING, wake, clock.now(), 0.0, entry, ("slept", {})
    )


@pytest.fixture
def fast_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tui_widgets, "TICK_SECONDS", 0.001)
    monkeypatch.setattr(tui_header, "TICK_SECONDS", 0.001)  # the header line ticks itself
    monkeypatch.setattr(tui, "POLL_SECONDS", 0.001)


def test_exiting_while_ticks_are_due_never_touches_a_removed_widget(
    store: Store, fast_ticks: None
) -> None:
    clock = FakeClock(T0)
    _sleeper(store, clock, "r_nap_1", 2)

    async def open_and_exit() -> None:
        app = FlowctlApp(store=store, clock=clock, view="sleeping")
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(3):
                clock.advance(timedelta(minutes=1))
                await pilot.pause(0.01)  # ticks fire meanwhile, from the widgets' own timers
        # run_test re-raises anything the app raised, teardown included

    for _ in range(15):
        asyncio.run(open_and_exit())


def test_the_ticking_widgets_own_the_tick_timers(store: Store, fast_ticks: None) -> None:
    """The countdown, the clock and the detail's relative times re-render with no app timer."""
    clock = FakeClock(T0)
    _sleeper(store, clock, "r_nap_1", 2)

    async def scenario() -> None:
        app = FlowctlApp(store=store, clock=clock, view="sleeping")
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.query_one(RunTable)
            for _ in range(400):
                await pilot.pause(0.005)
                if table.row_count and table.get_cell("r_nap_1", "wakes_in").plain == "2h00m":
                    break
            clock.advance(timedelta(minutes=30))
            header = app.query_one("#header", Static)
            for _ in range(400):
                await pilot.pause(0.005)
                if table.get_cell("r_nap_1", "wakes_in").plain == "1h30m":
                    break
            assert table.get_cell("r_nap_1", "wakes_in").plain == "1h30m"
            assert "01:30:00 UTC" in str(header.render())
            assert isinstance(app.query_one("#detail-text"), DetailText)

    asyncio.run(scenario())


def test_columns_have_their_width_when_rows_are_shown_not_when_the_table_is_next_idle() -> None:
    """DataTable widens auto-width columns only once its queue is idle; the run list sets
    every column's width itself (flowctl.tui.fit, RunTable.lay_out), so a screen taken
    before that idle (a loaded machine) is already right."""
    long_id = "r_nap_with_a_long_id_1"

    class OneTable(App[None]):
        def compose(self) -> ComposeResult:
            yield RunTable(on_tick=lambda table: None, on_resize=lambda table: None)

    async def scenario() -> None:
        app = OneTable()
        async with app.run_test(size=(100, 10)):
            table = app.query_one(RunTable)
            # One synchronous step, no await: the table's idle handler cannot run here.
            assert table.lay_out([("run_id", "RUN ID", len(long_id))])
            table.add_row(Text(long_id), key="r1")
            column = table.columns["run_id"]
            assert not column.auto_width and column.get_render_width(table) == len(long_id) + 2
            assert not table.lay_out([("run_id", "RUN ID", len(long_id))])  # same: kept
            assert table.row_count == 1

    asyncio.run(scenario())
