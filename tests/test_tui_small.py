"""80x24 readable (issue 17, item 5): at 80x24 and at 120x36 every view's header, tab bar
and key hints fit the width and keep what matters (the database, every view's name,
`? help` and `q quit`), and the help overlay shows every line unwrapped, unscrolled."""

from __future__ import annotations

import re
from typing import Any

import pytest
from test_tui import SHOWN_PATH, Seeded, flows, pilot_test, seeded, settle, snapshot_store  # noqa: F401  (fixtures)
from textual.containers import VerticalScroll
from textual.pilot import Pilot
from textual.widgets import Static

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.store import Store
from flowctl.tui import FlowctlApp, HelpScreen
from flowctl.tui.header import HeaderLine
from flowctl.tui.screens import HELP
from flowctl.tui.views import VIEWS
from flowctl.tui.widgets import KeyHints, ViewBar

pytestmark = pytest.mark.tui

SIZES = [(80, 24), (120, 36)]


def _plain(widget: Any) -> str:
    return str(widget.render())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pilot_test
async def test_every_view_keeps_its_lines_within_the_width(
    seeded: Seeded,  # noqa: F811
    size: tuple[int, int],
) -> None:
    ops.pause(seeded.store, seeded.ids["sleeping"][0], clock=seeded.clock)  # every tab up
    app = FlowctlApp(
        store=seeded.store,
        clock=seeded.clock,
        shown_path="/home/ana/work/project/.flowctl/flowctl.db",
    )
    width = size[0]
    async with app.run_test(size=size) as pilot:
        for view in VIEWS:
            await pilot.press(view.number)
            await settle(pilot)
            header, bar, hints = (_plain(app.query_one(w)) for w in (HeaderLine, ViewBar, KeyHints))
            for line in (header, bar, hints):
                assert len(line.rstrip()) <= width, (view.key, line)
            assert "flowctl.db" in header and "no daemon" in header
            assert all(v.short in bar for v in VIEWS), (view.key, bar)
            assert "? help" in hints and "q quit" in hints, (view.key, hints)


def test_no_help_line_is_wider_than_the_overlay() -> None:
    widest = max(len(re.sub(r"\[/?b\]", "", line)) for line in HELP.splitlines())
    assert widest <= 64


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pilot_test
async def test_the_help_overlay_fits_unwrapped_and_unscrolled(
    seeded: Seeded,  # noqa: F811
    size: tuple[int, int],
) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        keys = app.screen.query(Static).first()
        assert keys.size.height == len(HELP.splitlines())  # one screen line per help line
        scroll = app.screen.query_one(VerticalScroll)
        assert scroll.max_scroll_y <= 2  # at most the database path's wrap is out of sight


async def _help(pilot: Pilot[None]) -> None:
    await settle(pilot)
    await pilot.press("question_mark")
    await settle(pilot)


def test_snapshot_help_at_80x24(
    snap_compare: Any,
    snapshot_store: Store,  # noqa: F811
    fake_clock: FakeClock,
) -> None:
    """The key help over the Running view at 80x24: no line wraps, nothing scrolls."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_help)


def test_snapshot_waiting_view_at_80x24(
    snap_compare: Any,
    snapshot_store: Store,  # noqa: F811
    fake_clock: FakeClock,
) -> None:
    """The Waiting view at 80x24: short tabs, the view's own keys, the run's detail."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)

    async def waiting(pilot: Pilot[None]) -> None:
        await pilot.press("3")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting)
