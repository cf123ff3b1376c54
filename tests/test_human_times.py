"""One time format per context (issue 17, item 3): every line a person reads (`why`, the
status line and timeline of `show`, the TUI's detail) prints local time with the zone, as
the tables do (model.local_text), never an ISO instant with microseconds; --json prints
ISO-8601 UTC with a Z (model.iso)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_tui import Seeded, detail_text, flows, pilot_test, seeded, settle  # noqa: F401
from typer.testing import CliRunner

from flowctl import cli
from flowctl.clock import FakeClock
from flowctl.model import human_value, local_text
from flowctl.tui import FlowctlApp

START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)  # 13:00 CET in Paris
ISO_US = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}")  # what no human line may hold
NAP = """
from flowctl import workflow


@workflow
def nap(ctx):
    ctx.step("hello", lambda: 1)
    ctx.sleep("2h")
    return "rested"
"""


@pytest.fixture
def paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def invoke(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`flowctl --db DB ...` in-process on a FakeClock at START, in a folder with flows.py."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "flows.py").write_text(NAP)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    monkeypatch.setattr(cli, "SystemClock", lambda: FakeClock(START))

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def test_local_text_and_human_value(paris: None) -> None:
    assert local_text(START) == "2026-03-27 13:00:00 CET"
    assert local_text(START.replace(microsecond=250_000), ms=True) == "2026-03-27 13:00:00.250 CET"
    assert human_value("2026-03-27T12:00:00.123456+00:00") == "2026-03-27 13:00:00 CET"
    assert human_value("2026-03-27T12:00:00.123456Z") == "2026-03-27 13:00:00 CET"
    assert human_value("3d00h") == "3d00h" and human_value(3) == 3
    assert human_value("2026-03-27") == "2026-03-27"  # a date is not an instant


def test_why_and_show_print_local_time_with_the_zone(invoke: Any, paris: None) -> None:
    started = json.loads(invoke("run", "flows.py:nap", "--json").stdout)
    rid = started["id"]
    wake = "2026-03-27 15:00:00 CET (in 2h00m)"  # 14:00 UTC
    why = invoke("why", rid).stdout
    assert f"sleeping until {wake}" in why
    shown = invoke("show", rid).stdout
    status = next(line for line in shown.splitlines() if line.startswith("status"))
    assert f"sleeping until {wake}" in status
    assert "wake_at=2026-03-27 15:00:00 CET" in shown  # the timeline's event data too
    for text in (why, shown):
        assert not ISO_US.search(text), text
        assert "UTC" not in text, text  # one spelling per line: no second, UTC one
    facts = json.loads(invoke("why", rid, "--json").stdout)
    assert facts["wake_at"] == "2026-03-27T14:00:00.000000Z"


def test_a_deadline_in_the_past_is_refused_in_local_time(invoke: Any, paris: None) -> None:
    refused = invoke("run", "flows.py:nap", "--deadline", "2026-03-27T11:00:00Z", code=2)
    assert "--deadline 2026-03-27 12:00:00 CET is already in the past" in refused.stderr


@pilot_test
async def test_the_tui_why_line_is_local_time_with_the_zone(seeded: Seeded, paris: None) -> None:  # noqa: F811
    soon = seeded.ids["sleeping"][0]
    wake = seeded.store.get_run(soon).run_at
    assert wake is not None
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await settle(pilot)
        text = detail_text(app)
    assert f"why sleeping until {local_text(wake)} (in 2h00m)" in text
    assert local_text(wake).endswith(" CEST") and not ISO_US.search(text), text
    assert "wake_at=" + local_text(wake) in text  # its timeline


def test_logs_print_local_time_with_the_zone_and_json_iso_z(invoke: Any, paris: None) -> None:
    ping = str(Path(__file__).resolve().parent.parent / "workflows" / "ping.yaml")
    rid = json.loads(invoke("run", ping, "--wait", "--json").stdout)["id"]
    assert invoke("logs", rid).stdout.splitlines() == ["2026-03-27 13:00:00.000 CET  pong  pong"]
    (chunk,) = json.loads(invoke("logs", rid, "--json").stdout)
    assert chunk["at"] == "2026-03-27T12:00:00.000000Z"


def test_schedule_show_lists_next_fires_in_one_spelling(invoke: Any, paris: None) -> None:
    ping = str(Path(__file__).resolve().parent.parent / "workflows" / "ping.yaml")
    invoke("schedule", "add", "beat", "--cron", "0 9 * * *", "--tz", "Europe/Paris", ping)
    shown = invoke("schedule", "show", "beat").stdout
    fires = shown.split("next fires")[1].split("history")[0].strip().splitlines()
    assert fires[0].split() == ["2026-03-28", "09:00", "CET", "in", "20h00m"]  # 08:00 UTC
    assert not ISO_US.search(shown) and "Z " not in shown, shown
