"""The TUI's list fits its pane (issue 17, items 3 and 5): no cell is clipped by the pane's
edge; free text (names, input, errors) is cut with an ellipsis, times and counts are shown
whole, and a column with no room at all is hidden and named under the list. The rule is a
pure function (flowctl.tui.fit); pilot tests check the screen at 80x24 and 120x36 with
long workflow names, inputs and schedule names."""

from __future__ import annotations

import pytest
from test_tui import Seeded, flows, pilot_test, seeded, settle  # noqa: F401  (fixtures)

from flowctl import ops
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ops import schedules as schedule_ops
from flowctl.tui import FlowctlApp, RunTable
from flowctl.tui.fit import FLOOR, SLACK, fit, natural_widths

pytestmark = pytest.mark.tui

LONG = "customer-onboarding-with-a-very-long-workflow-name"


# ---------------------------------------------------------------- the rule, pure


def test_nothing_is_cut_when_it_fits_or_before_the_table_is_laid_out() -> None:
    assert fit([6, 8], [16, 30], 60).widths == (16, 30)
    assert fit([6, 8], [16, 300], None).widths == (16, 300)
    assert fit([6, 8], [16, 300], 0).widths == (16, 300)


def test_the_widest_cuttable_column_gives_way_down_to_its_floor() -> None:
    # 50 cells, 3 columns with 1 cell of padding each side: 44 for the cells
    assert fit([6, 8, 5], [16, 40, 30], 50).widths == (16, 14, 14)
    got = fit([6, 8, 5], [16, 40, 20], 50, whole=[2]).widths
    assert got == (16, 8, 20)  # the whole column keeps its 20; the name goes to its floor


def test_when_floors_do_not_fit_the_rightmost_column_is_hidden() -> None:
    result = fit([6, 8, 7, 5], [16, 30, 12, 30], 44, whole=[2])
    assert result.widths == (16, 10, 12, None) and result.hidden == (3,)
    # then the next: 3 columns need 16 + 8 + 12 + 6 = 42 > 40
    assert fit([6, 8, 7, 5], [16, 30, 12, 30], 40, whole=[2]).widths == (16, 20, None, None)
    assert fit([6, 8], [16, 30], 10).widths == (16, None)  # the kept column stays, whatever
    assert fit([4, 8], [40, 30], 30, keep=(), least={0: 24}).widths == (28, None)


def test_a_label_longer_than_the_floor_is_the_floor() -> None:
    assert fit([6, 13], [16, 40], 16 + 13 + 2 * 2).widths == (16, 13)
    assert fit([6, 13], [16, 40], 16 + 13 + 2 * 2 - 1).widths == (16, None)
    assert FLOOR == 8


def test_natural_widths_give_a_countdown_room_to_tick() -> None:
    rows = [[16, 5], [16, 7]]
    assert natural_widths([6, 8], [None, 12], rows) == [16, 7 + SLACK]
    assert natural_widths([6, 8], [None, 12], [[16, 11]]) == [16, 12]  # at most its limit
    assert natural_widths([6, 8], [None, 12], []) == [6, 8]  # an empty view: the labels


# ---------------------------------------------------------------- on the screen


def _lines(table: RunTable) -> list[str]:
    return [table.render_line(y).text for y in range(min(table.size.height, table.row_count + 1))]


def _fits(table: RunTable) -> None:
    used = sum(c.get_render_width(table) for c in table.ordered_columns)
    assert used <= table.size.width, (used, table.size.width)


def _cuts_end_with_an_ellipsis(table: RunTable) -> int:
    """Every cell longer than its column shows as its head and "…"; returns how many."""
    lines, cuts = _lines(table), 0
    for r in range(table.row_count):
        for c, column in enumerate(table.ordered_columns):
            text = table.get_cell_at((r, c)).plain
            if len(text) > column.width:
                cuts += 1
                assert text[: column.width - 1] + "…" in lines[r + 1], (text, lines[r + 1])
    return cuts


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
@pilot_test
async def test_long_inputs_are_cut_with_an_ellipsis_or_hidden_and_named(
    seeded: Seeded,  # noqa: F811
    size: tuple[int, int],
) -> None:
    rid = seeded.start("nap", input={"user": "x" * 80, "hours": 3})  # a long input
    Daemon(seeded.store, seeded.clock, DaemonConfig(concurrency=8)).tick()  # now sleeping
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=size) as pilot:
        await pilot.press("2")
        await settle(pilot)
        table = app.query_one("#table", RunTable)
        _fits(table)
        assert rid in "".join(_lines(table))  # ids are never cut
        shown = [str(c.key.value) for c in table.ordered_columns]
        assert "wake_at" in shown  # a time: whole (or hidden), never cut
        subtitle = str(app.query_one("#list").border_subtitle)
        if "input" in shown:  # 80 columns, stacked: the input is cut
            assert _cuts_end_with_an_ellipsis(table) >= 1
        else:  # 120 columns, side by side: no room for it, and the list says so
            assert size == (120, 36) and "INPUT hidden" in subtitle
            _cuts_end_with_an_ellipsis(table)


@pilot_test
async def test_a_narrow_pane_hides_what_does_not_fit_and_says_so(seeded: Seeded) -> None:  # noqa: F811
    running = seeded.ids["running"][0]
    ops.cancel(seeded.store, running, clock=seeded.clock, by="ana")
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:  # side by side: the list is 55% wide
        await pilot.press("1")
        await settle(pilot)
        table = app.query_one("#table", RunTable)
        _fits(table)
        _cuts_end_with_an_ellipsis(table)
        shown = {str(c.key.value) for c in table.ordered_columns}
        assert "owner" not in shown and "run_id" in shown  # the rightmost goes first
        assert "OWNER hidden" in str(app.query_one("#list").border_subtitle)
        await pilot.resize_terminal(200, 36)  # room for every column: all shown again
        await settle(pilot)
        _fits(table)
        assert "owner" in {str(c.key.value) for c in table.ordered_columns}
        assert "hidden" not in str(app.query_one("#list").border_subtitle)
        assert table.get_cell(running, "owner").plain == "cancel pending, asked by ana"


@pilot_test
async def test_a_long_schedule_name_is_cut_with_an_ellipsis_at_80_columns(
    seeded: Seeded,  # noqa: F811
) -> None:
    name = "nightly-warehouse-export-for-the-finance-team-of-the-north"
    schedule_ops.add_schedule(
        seeded.store,
        name,
        f"{seeded.flows}:quick",
        cron="0 9 * * MON-FRI",
        tz="Europe/Paris",
        clock=seeded.clock,
    )
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        table = app.query_one("#table", RunTable)
        _fits(table)
        row = _lines(table)[1]
        assert name[:20] in row and name not in row and "…" in row, row
        assert _cuts_end_with_an_ellipsis(table) >= 1
