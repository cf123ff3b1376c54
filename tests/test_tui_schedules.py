"""The Schedules view's detail pane is a readable card (rule, policies, next fires in the
schedule's zone with DST marks, last fires with their runs), and p / t pause, resume and
fire the selected schedule through ops.schedules, each outcome a notification
(issue 17, item 5)."""

from __future__ import annotations

from typing import Any

import pytest
from test_tui import Seeded, detail_text, flows, pilot_test, seeded, settle  # noqa: F401  (fixtures: runs in every status)

from flowctl.ops import schedules as schedule_ops
from flowctl.tui import FlowctlApp, RunTable
from flowctl.tui.widgets import KeyHints

pytestmark = pytest.mark.tui


def _add(s: Seeded) -> None:
    # 02:30 in Paris does not exist on 2026-03-29 (the fake clock's day): clocks go 02:00 -> 03:00
    schedule_ops.add_schedule(
        s.store,
        "nightly",
        f"{s.flows}:quick",
        {"user": "ops"},
        clock=s.clock,
        cron="30 2 * * *",
        tz="Europe/Paris",
        overlap="skip",
    )


def _notes(app: FlowctlApp) -> list[tuple[str, str]]:
    notes: list[tuple[str, str]] = []
    real_notify = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        notes.append((message, kwargs.get("severity", "information")))
        real_notify(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return notes


@pilot_test
async def test_schedule_card_shows_policy_next_fires_with_dst_marks_and_last_fires(
    seeded: Seeded,  # noqa: F811
) -> None:
    _add(seeded)
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        text = detail_text(app)
        hints = str(app.query_one(KeyHints).render())
    assert text.startswith("nightly active rule ")
    assert "overlap: skip" in text and "missed fires:" in text and "DST gap: shift" in text
    # 02:30 does not exist that day: the gap policy (shift) fires at 03:00, and says so
    assert (
        "Next fires Sun 2026-03-29 03:00 CEST in 1m00s ! DST: gap: shifted from 02:30 to 03:00"
        in text
    )
    assert "Mon 2026-03-30 02:30 CEST" in text
    assert "Last fires none yet" in text
    assert "created_a" not in text  # no raw dump of the JSON keys
    assert "p pause/resume" in hints and "t trigger now" in hints


@pilot_test
async def test_t_asks_then_fires_the_schedule_and_the_card_lists_the_run(
    seeded: Seeded,  # noqa: F811
) -> None:
    _add(seeded)
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    notes = _notes(app)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        await pilot.press("n")  # declined: nothing fires
        await settle(pilot)
        assert seeded.store.schedule_history("nightly", 10) == []
        await pilot.press("t")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        text = detail_text(app)
    (event,) = seeded.store.schedule_history("nightly", 10)
    assert event.action == "manual" and event.run_id is not None
    assert notes[-1] == (f"triggered nightly: run {event.run_id} queued", "information")
    assert f"Last fires Sun 2026-03-29 01:59 CET manual {event.run_id} queued" in text
    assert seeded.store.get_run(event.run_id).schedule == "nightly"


@pilot_test
async def test_p_pauses_and_resumes_the_selected_schedule(seeded: Seeded) -> None:  # noqa: F811
    _add(seeded)
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    notes = _notes(app)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert seeded.store.get_schedule("nightly").paused
        assert notes[-1][0] == "paused schedule nightly: it fires no run until resumed (p)"
        assert detail_text(app).startswith("nightly paused")
        assert "Next fires (paused: none fire until it is resumed)" in detail_text(app)
        await pilot.press("p")
        await settle(pilot)
        assert not seeded.store.get_schedule("nightly").paused
        assert notes[-1][0].startswith("resumed schedule nightly: next fire 2026-03-29 01:00 UTC")
        assert detail_text(app).startswith("nightly active")


@pilot_test
async def test_t_outside_the_schedules_view_says_where_it_works(seeded: Seeded) -> None:  # noqa: F811
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    notes = _notes(app)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
    assert notes == [("t fires a schedule now: open the Schedules view (7)", "warning")]


def _row(app: FlowctlApp) -> dict[str, str]:
    table = app.query_one("#table", RunTable)
    heads = [str(c.label) for c in table.columns.values()]
    return dict(zip(heads, (cell.plain for cell in table.get_row("s0")), strict=True))


@pilot_test
async def test_the_schedules_table_says_active_or_paused_never_a_raw_boolean(
    seeded: Seeded,  # noqa: F811
) -> None:
    """Issue 39: a PAUSED column printed `false`."""
    _add(seeded)
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        active = _row(app)
        await pilot.press("p")
        await settle(pilot)
        paused = _row(app)
    assert active["NAME"] == "nightly" and active["STATE"] == "active"
    assert paused["STATE"] == "paused"
    for row in (active, paused):
        assert not {"false", "true", "False", "True"} & set(row.values()), row
