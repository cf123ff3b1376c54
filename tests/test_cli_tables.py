"""One table renderer (flowctl/cli/table.py), one time format per context and a notice
whenever a list is cut (issue 17, item 3): through the real app with CliRunner on a FakeClock."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli import table
from flowctl.clock import FakeClock
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")
FLOWCTL = Path(sys.executable).with_name("flowctl")  # this environment's entry point
LONG = "a_workflow_whose_name_goes_on_and_on_and_on"
FLOWS = f"""
from flowctl import workflow


@workflow
def {LONG}(ctx):
    return 1


@workflow
def fails(ctx):
    raise ValueError("the report server answered 503 Service Unavailable, try later")
"""
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


@pytest.fixture
def paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local zone is Europe/Paris for the test (CET on START)."""
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock, db: str) -> Any:
    """The app on the database under test (a SQLite file or a PostgreSQL URL)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "flows.py").write_text(FLOWS)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


# ---------------------------------------------------------------- the renderer, pure


def test_fit_shrinks_the_widest_cuttable_column_first_and_keeps_floors() -> None:
    assert table.fit([16, 40, 8], [16, 8, 8], None) == [16, 40, 8]  # no width: nothing cut
    assert table.fit([16, 40, 8], [16, 8, 8], 100) == [16, 40, 8]  # fits already
    assert table.fit([16, 40, 8], [16, 8, 8], 50) == [16, 22, 8]  # 50 - 2 gaps of 2 = 46
    assert table.fit([16, 40, 30], [16, 8, 8], 50) == [16, 15, 15]  # evened out
    assert table.fit([16, 40, 8], [16, 8, 8], 10) == [16, 8, 8]  # at the floors: no lower


def test_render_cuts_with_an_ellipsis_and_never_cuts_kept_columns() -> None:
    rows = [["m8rtkeefq3x7bz2w", "x" * 50, "queued"]]
    text = table.render(["RUN", "WORKFLOW", "STATUS"], rows, width=40)
    _header, row = text.splitlines()
    assert row.startswith("m8rtkeefq3x7bz2w  ") and "…" in row and len(row) <= 40
    assert row.split()[1] == "x" * 13 + "…"
    assert table.render(["RUN", "WORKFLOW", "STATUS"], rows, width=None).splitlines()[1] == (
        "m8rtkeefq3x7bz2w  " + "x" * 50 + "  queued"
    )


def test_render_prints_cells_as_text_not_markup_and_measures_wide_characters() -> None:
    text = table.render(["A", "B"], [["[bold]x[/bold]", "b"], ["日本語", "c"]], width=None)
    lines = text.splitlines()
    assert lines[1] == "[bold]x[/bold]  b"
    assert lines[2] == "日本語" + " " * 10 + "c"  # 6 cells wide, padded to 14


# ---------------------------------------------------------------- through the app


def test_ls_piped_prints_every_cell_whole(invoke: Any) -> None:
    invoke("run", f"flows.py:{LONG}", "--detach")
    out = invoke("ls").stdout
    assert LONG in out and "…" not in out


def test_ls_in_a_terminal_fits_its_width(invoke: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    started = json.loads(invoke("run", f"flows.py:{LONG}", "--detach", "--json").stdout)
    monkeypatch.setattr(table, "terminal_width", lambda: 90)
    lines = invoke("ls").stdout.splitlines()
    assert all(len(line) <= 90 for line in lines), lines
    assert lines[1].startswith(started["id"] + "  ")  # the run id is never cut
    assert LONG not in lines[1] and LONG[:8] in lines[1] and "…" in lines[1]


def test_tables_show_local_time_with_the_zone(invoke: Any, paris: None) -> None:
    invoke("run", PING, "--detach")
    assert "2026-03-27 13:00:00 CET" in invoke("ls").stdout
    invoke("run", PING, "--in", "2h")
    assert "2026-03-27 15:00:00 CET" in invoke("agenda").stdout  # 14:00 UTC


def test_json_prints_iso_utc_with_a_z(invoke: Any, paris: None) -> None:
    started = json.loads(invoke("run", PING, "--in", "2h", "--json").stdout)
    assert started["run_at"] == "2026-03-27T14:00:00.000000Z"
    shown = json.loads(invoke("show", started["id"], "--json").stdout)
    times = [shown["run"]["created_at"], *(e["at"] for e in shown["timeline"])]
    times += [e["run_at"] for e in shown["timeline"] if "run_at" in e]  # stored event data too
    assert times and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", t) for t in times)
    (item,) = json.loads(invoke("agenda", "--json").stdout)
    assert item["at"] == "2026-03-27T14:00:00.000000Z"


def test_schedule_show_says_when_its_history_is_cut(invoke: Any, clock: FakeClock) -> None:
    invoke("schedule", "add", "beat", "--every", "1d", "--tz", "UTC", PING)
    for _ in range(3):
        invoke("schedule", "trigger", "beat")
        clock.advance(timedelta(minutes=1))
    cut = invoke("schedule", "show", "beat", "--history", "2", "--json")
    assert len(json.loads(cut.stdout)["history"]) == 2
    assert cut.stderr == (
        "flowctl: showing 2 of more than 2 history entries; use --history N for more\n"
    )
    whole = invoke("schedule", "show", "beat", "--history", "3")
    assert whole.stderr == "" and whole.stdout.count(" manual ") == 3


def test_ls_at_80_columns_cuts_names_never_the_created_time(
    invoke: Any, monkeypatch: pytest.MonkeyPatch, paris: None
) -> None:
    invoke("run", f"flows.py:{LONG}", "--detach")
    monkeypatch.setattr(table, "terminal_width", lambda: 80)
    header, row = invoke("ls").stdout.splitlines()[:2]
    assert header.split()[-1] == "NOTE" and len(row) <= 80
    assert "2026-03-27 13:00:00 CET" in row and "…" in row  # the workflow gave way


def test_shown_leaves_out_the_least_important_columns_that_do_not_fit() -> None:
    floors = [16, 8, 9, 7, 23, 10, 8]
    order = [0, 2, 1, 5, 6, 4, 3]
    assert table.shown(floors, None, order) == [0, 1, 2, 3, 4, 5, 6]  # piped: all of them
    assert table.shown(floors, 200, order) == [0, 1, 2, 3, 4, 5, 6]
    assert table.shown(floors, 80, order) == [
        0,
        1,
        2,
        3,
        5,
        6,
    ]  # CREATED does not fit, ATTEMPT does
    assert table.shown(floors, 40, order) == [0, 1, 2]
    assert table.shown(floors, 10, order) == [0]  # the first is always shown


def _in_a_terminal(columns: int, *args: str) -> list[str]:
    """`flowctl ARGS` on a real pseudo-terminal COLUMNS wide: its lines as the user sees them."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [str(FLOWCTL), *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb", "NO_COLOR": "1"},
    )
    os.close(child)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        try:
            chunk = os.read(main, 65536) if ready else b""
        except OSError:  # the child closed its end
            chunk = b""
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0, out
    os.close(main)
    return out.decode().replace("\r", "").splitlines()


@pytest.mark.parametrize("columns", [80, 60])
def test_ls_and_schedule_ls_fit_the_terminal_and_keep_status_whole(
    invoke: Any, db: str, clock: FakeClock, columns: int
) -> None:
    """Issue 39: the 82-cell `ls` header wrapped at 80 columns, and STATUS was the column
    cut while CREATED stayed whole."""
    invoke("run", f"flows.py:{LONG}")
    invoke("run", PING, "--detach")
    invoke("run", "flows.py:fails", "--max-attempts", "1", code=1)
    invoke("schedule", "add", "nightly-report", "--cron", "0 9 * * MON-FRI", PING)
    runs = _in_a_terminal(columns, "--db", db, "ls")
    assert runs and all(len(line) <= columns for line in runs), runs
    header = runs[0].split()
    assert header[:3] == ["RUN", "WORKFLOW", "STATUS"]
    statuses = {line.split()[2] for line in runs[1:]}
    assert statuses == {"completed", "dead", "queued"}  # whole, never cut
    if "CREATED" in header:  # a less important column shows only when STATUS is whole
        assert "NEXT/ENDED" in header and "NOTE" in header
    schedules = _in_a_terminal(columns, "--db", db, "schedule", "ls")
    assert all(len(line) <= columns for line in schedules), schedules
    assert schedules[0].split()[:3] == ["NAME", "STATE", "NEXT"] or schedules[0].split()[:4] == [
        "NAME", "STATE", "RULE", "NEXT"
    ]  # fmt: skip
    assert schedules[1].split()[:2] == ["nightly-report", "active"]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", schedules[1])  # NEXT whole
