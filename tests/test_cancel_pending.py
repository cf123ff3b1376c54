"""A cancel asked of a running run is pending until its handler stops (DESIGN: "records the
request and says so"). Until then `ls`, `show`, `why --json` and the TUI's Running view say
who asked and that it is pending; once cancelled, `ls` and `show` say who cancelled it
(issue 17, items 3 and 5)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_tui import Seeded, detail_text, flows, pilot_test, seeded, settle  # noqa: F401
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.model import RunStatus, local_text
from flowctl.store import Store, open_store
from flowctl.tui import FlowctlApp, RunTable
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def opened(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    monkeypatch.setenv("LOGNAME", "ana")  # who `flowctl cancel` says asked (getpass)
    s = open_store(db, create=True)
    yield s
    s.close()


@pytest.fixture
def invoke(db: str, opened: Store, clock: FakeClock) -> Any:
    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def _running(invoke: Any, store: Store, clock: FakeClock) -> str:
    """A run some worker holds now (claimed, its handler never told to stop here)."""
    rid = str(json.loads(invoke("run", PING, "--detach", "--json").stdout)["id"])
    claims, _ = store.claim_due(
        "worker-1", clock.now(), clock.now() + timedelta(seconds=15), 1, run_id=rid
    )
    assert claims
    return rid


def test_ls_show_and_why_say_who_asked_and_that_it_is_pending(
    invoke: Any, opened: Store, clock: FakeClock
) -> None:
    rid = _running(invoke, opened, clock)
    said = invoke("cancel", rid, "--reason", "wrong input\nsecond line").stdout
    assert "cancel requested" in said
    assert opened.get_run(rid).status is RunStatus.RUNNING  # only requested
    row = next(line for line in invoke("ls").stdout.splitlines() if line.startswith(rid))
    assert "running" in row and row.endswith("cancel pending, asked by ana: wrong input")
    shown = invoke("show", rid).stdout.splitlines()
    assert (
        f"cancel    pending, asked by ana: wrong input (at {local_text(START)}); it ends"
        " cancelled when its handler stops"
    ) in shown
    facts = json.loads(invoke("why", rid, "--json").stdout)
    assert facts["reason"] == "cancel_requested"
    assert facts["cancel_requested_by"] == "ana"
    assert facts["cancel_requested_at"] == "2026-03-27T12:00:00.000000Z"


def test_once_cancelled_ls_and_show_say_who_cancelled(invoke: Any, opened: Store) -> None:
    rid = str(json.loads(invoke("run", PING, "--detach", "--json").stdout)["id"])
    invoke("cancel", rid, "--reason", "customer left")
    row = next(line for line in invoke("ls").stdout.splitlines() if line.startswith(rid))
    assert "cancelled" in row and row.endswith("Cancelled by ana: customer left")
    shown = invoke("show", rid).stdout.splitlines()
    assert "error     Cancelled: customer left" in shown and "          by: ana" in shown


def test_a_run_without_a_cancel_says_nothing_of_one(
    invoke: Any, opened: Store, clock: FakeClock
) -> None:
    rid = _running(invoke, opened, clock)
    assert ops.cancel_requests(opened, [opened.get_run(rid)]) == {}
    row = next(line for line in invoke("ls").stdout.splitlines() if line.startswith(rid))
    assert row.rstrip().endswith("-")  # NEXT/ENDED "-", and no note after it
    assert not any(line.startswith("cancel ") for line in invoke("show", rid).stdout.splitlines())


@pilot_test
async def test_the_tui_running_view_and_detail_say_who_asked(seeded: Seeded) -> None:  # noqa: F811
    running = seeded.ids["running"][0]
    ops.cancel(seeded.store, running, clock=seeded.clock, reason="dup", by="bea")
    assert seeded.store.get_run(running).status is RunStatus.RUNNING
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(160, 36)) as pilot:
        await pilot.press("1")
        await settle(pilot)
        owner = app.query_one("#table", RunTable).get_cell(running, "owner").plain
        text = detail_text(app)
    assert owner == "cancel pending, asked by bea: dup"
    assert f"(cancel requested by bea at {local_text(seeded.clock.now())}, pending" in text
