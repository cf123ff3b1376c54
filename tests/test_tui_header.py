"""The TUI says which database it shows and whether anything will wake its sleepers
(issue 17, item 5): the full path, a live daemon (since when, runs held, wake lateness
p99) or "no daemon"
in the warning colour; `y` tells the truth where it cannot copy; `flowctl tui` without a
terminal is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.ids import HOST, make_owner
from flowctl.store import NewRun
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.tui.app import FlowctlApp, HeaderLine
from flowctl.tui.header import daemon_line, filter_text, late_text, short_path
from flowctl.tui.views import DaemonUp, WakeLateness, wake_lateness
from tests.test_tui import pilot_test, settle, until

pytestmark = pytest.mark.tui

NOW = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)


def _new(run_id: str) -> NewRun:
    return NewRun(run_id, "followup", "workflows/followup.py:followup", "python", {})


def _dead_owner() -> str:
    """An owner on this host whose process has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)  # fmt: skip
    return f"{HOST}/{proc.stdout.strip()}/1/abcd"


async def _header(app: FlowctlApp, pilot: Pilot[None]) -> str:
    await settle(pilot)
    return app.query_one(HeaderLine).render().plain


@pilot_test
async def test_header_names_the_full_path_and_warns_when_no_daemon_runs(
    store: Store, db_path: Path
) -> None:
    store.register_daemon(_dead_owner(), HOST, 1, "1", NOW, {})  # SIGKILLed: its row stays
    app = FlowctlApp(store=store, clock=FakeClock(NOW))
    async with app.run_test(size=(160, 24)) as pilot:
        text = await _header(app, pilot)
    assert str(db_path.resolve()) in text
    assert "no daemon — sleepers will not wake" in text


@pilot_test
async def test_header_shows_a_live_daemon_since_when_and_the_runs_it_holds(store: Store) -> None:
    clock = FakeClock(NOW)
    owner = make_owner()  # this test process: alive
    store.register_daemon(owner, HOST, 1, None, NOW - timedelta(hours=2), {})
    store.create_run(_new("r_1"), clock.now())
    claims, _ = store.claim_due(owner, clock.now(), clock.now() + timedelta(seconds=15), 1)
    assert [c.lease.run_id for c in claims] == ["r_1"]  # the daemon now holds r_1
    app = FlowctlApp(store=store, clock=clock, shown_path="/srv/app/flowctl.db")
    async with app.run_test(size=(160, 24)) as pilot:
        text = await _header(app, pilot)
    assert "/srv/app/flowctl.db" in text
    assert "daemon up since 2026-03-29 10:00:00 UTC (2h00m), holding 1 run" in text
    assert "no daemon" not in text


def test_daemon_line_styles_and_counts() -> None:
    up = DaemonUp("a", NOW - timedelta(minutes=5), 2)
    other = DaemonUp("b", NOW - timedelta(minutes=1), 1)
    assert daemon_line(None, NOW) == ("", "")  # not looked at yet: says nothing
    text, style = daemon_line([], NOW)
    assert "no daemon" in text and "$warning" in style
    text, style = daemon_line([other, up], NOW)
    assert text.startswith("  2 daemons up since 2026-03-29 11:55:00 UTC (5m00s)")
    assert text.endswith("holding 3 runs") and style == "$success"


def test_a_narrow_header_keeps_the_end_of_the_path() -> None:
    path = "/home/ana/project/.flowctl/flowctl.db"
    assert short_path(path, 80) == path
    assert short_path(path, 20) == "…" + path[-19:]
    assert short_path(path, 5) == "flowctl.db"  # never less than the file name


@pilot_test
async def test_copy_says_it_cannot_copy_where_the_terminal_cannot(store: Store) -> None:
    clock = FakeClock(NOW)
    store.create_run(_new("r_copy"), clock.now())
    app = FlowctlApp(store=store, clock=clock, view="all")
    notes: list[tuple[str, str]] = []
    real_notify = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        notes.append((message, kwargs.get("severity", "information")))
        real_notify(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
    assert notes == [("this terminal cannot copy; the run id is r_copy", "warning")]


def test_tui_without_a_terminal_is_one_line_and_exit_2(store: Store, db_path: Path) -> None:
    result = CliRunner().invoke(cli.app, ["--db", str(db_path), "tui"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        "flowctl: flowctl tui needs a terminal on stdin and stdout; without one use"
        " `flowctl ls`, `flowctl status` or `flowctl agenda`"
    ]
    assert "\x1b" not in result.output


def _woken(store: Store, clock: FakeClock, owner: str, lates_ms: list[int]) -> None:
    """Runs queued for later, each claimed `late` ms after it was due: `woke` events."""
    for i, late in enumerate(lates_ms):
        due = clock.now() + timedelta(seconds=1)
        store.create_run(
            NewRun(f"r_w{i:03d}", "nap", "nap.py:nap", "python", {}, run_at=due), clock.now()
        )
        at = due + timedelta(milliseconds=late)
        claims, _ = store.claim_due(owner, at, at + timedelta(seconds=15), 1, run_id=f"r_w{i:03d}")
        assert claims
        clock.advance(timedelta(seconds=2))


def test_wake_lateness_is_the_p99_of_the_last_hour_ranked_as_status_ranks(store: Store) -> None:
    clock = FakeClock(NOW)
    _woken(store, clock, "elsewhere/1/1/0000", [5] * 98 + [40, 900])
    lateness = wake_lateness(store, clock.now() - timedelta(hours=1))
    assert lateness == WakeLateness(100, 0.9)  # index int(0.99 * 100) of the sorted figures
    status = ops.status(store, clock=clock).lateness
    assert status["p99_ms"] == 900.0 and status["wakes"] == 100  # the same figure
    assert wake_lateness(store, clock.now() + timedelta(seconds=1)) == WakeLateness(0, None)


@pilot_test
async def test_header_shows_the_daemons_wake_lateness_p99(store: Store) -> None:
    clock = FakeClock(NOW)
    owner = make_owner()  # this test process: alive
    store.register_daemon(owner, HOST, 1, None, NOW, {})
    _woken(store, clock, owner, [12, 12, 37])
    app = FlowctlApp(store=store, clock=clock, shown_path="/srv/app/flowctl.db")
    async with app.run_test(size=(160, 24)) as pilot:
        text = await _header(app, pilot)
    assert (
        "daemon up since 2026-03-29 12:00:00 UTC (6.0s), holding 3 runs, wakes p99 37ms late"
        in text
    )


@pilot_test
async def test_an_80_column_header_keeps_the_daemon_facts_short(store: Store) -> None:
    clock = FakeClock(NOW)
    store.register_daemon(make_owner(), HOST, 1, None, NOW - timedelta(hours=2), {})
    app = FlowctlApp(store=store, clock=clock, shown_path="/home/ana/project/.flowctl/flowctl.db")
    async with app.run_test(size=(80, 24)) as pilot:
        text = await _header(app, pilot)
    assert len(text) <= 80
    assert "daemon 2h00m · 0 runs · p99 —" in text  # nothing woke in the last hour
    assert text.rstrip().endswith("12:00:00 UTC")  # the time, without the date
    assert "…" in text and "flowctl.db" in text  # the path's end


def test_daemon_line_picks_the_longest_wording_that_fits() -> None:
    up = [DaemonUp("a", NOW - timedelta(minutes=5), 1)]
    late = WakeLateness(10, 0.0042)
    full, _ = daemon_line(up, NOW, late)
    assert (
        full
        == "  daemon up since 2026-03-29 11:55:00 UTC (5m00s), holding 1 run, wakes p99 4.2ms late"
    )
    assert (
        daemon_line(up, NOW, late, len(full) - 1)[0]
        == "  daemon up 5m00s, 1 run held, wake p99 4.2ms"
    )
    assert daemon_line(up, NOW, late, 30)[0] == "  daemon 5m00s · 1 run · p99 4.2ms"  # never cut
    assert [late_text(s) for s in (0.0004, 0.037, 1.25, 125)] == ["0.4ms", "37ms", "1.2s", "2m05s"]


@pilot_test
async def test_a_120_column_header_shows_the_whole_search_term(store: Store) -> None:
    """Issue 39: the path and the daemon's longest wording filled the line and the search
    term was cut; now they give way to it."""
    clock = FakeClock(NOW)
    store.register_daemon(make_owner(), HOST, 1, None, NOW - timedelta(hours=2), {})
    path = "/home/ana/projects/billing-service/.flowctl/flowctl.db"
    app = FlowctlApp(store=store, clock=clock, shown_path=path)
    term = "customer-4711-renewal"
    async with app.run_test(size=(120, 24)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *term)
        await until(pilot, lambda: app.search == term, "the search debounce")
        await pilot.press("enter")
        text = await _header(app, pilot)
    assert len(text) <= 120
    assert f"search: {term} " in text
    assert "flowctl.db" in text and "daemon" in text
    assert text.rstrip().endswith("12:00:00 UTC")


def test_a_search_longer_than_the_line_is_cut_at_its_end() -> None:
    text = filter_text(None, "x" * 60, room=30).plain
    assert text == "  search: " + "x" * 19 + "…"
    assert len(text) == 30
    assert filter_text("nap", "eve", room=40).plain == "  workflow: nap  search: eve"
    assert filter_text(None, "eve", unset=True).plain == "  workflow: all"
    assert filter_text(None, None, unset=True).plain == "  workflow: all  search: —"
