"""Secret inputs of scheduled workflows: recorded with the schedule when it is added or
synced, shown as *** by `schedule add/show/ls` (text and --json), the agenda and the TUI's
Schedules view, while the runs the schedule fires get the real values."""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli
from flowctl.clock import FakeClock
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.tui.render import render_schedule
from flowctl.tui.views import list_schedule_dicts

SECRET = "s3cr3t-value-42"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()[:12]
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)

FLOWS = """\
import hashlib
from flowctl import workflow

@workflow(secret_inputs=["token"])
def deploy(ctx, user: str, token: str):
    return ctx.step("use", lambda: hashlib.sha256(token.encode()).hexdigest()[:12])
"""


def _yaml(secret: bool) -> str:
    flag = "true" if secret else "false"
    return (
        "name: deploy-yaml\n"
        "input:\n"
        "  user: str\n"
        f"  token: {{type: str, secret: {flag}}}\n"
        "schedule:\n"
        "  every: 1h\n"
        f"  input: {{user: ana, token: {SECRET}}}\n"
        "steps:\n"
        "  - id: check\n"
        f'    run: \'test "$FLOWCTL_INPUT_TOKEN" = "{SECRET}" && echo same\'\n'
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    (folder / "flows.py").write_text(FLOWS)
    return folder


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "cli.db"


@pytest.fixture
def invoke(db: Path, clock: FakeClock, home: Path) -> Any:
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli.app, ["--db", str(db), *args])
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    return run


@pytest.fixture
def restore_signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def _assert_masked(invoke: Any, name: str) -> None:
    """Every schedule front end shows the token as *** and never the value."""
    shown = invoke("schedule", "show", name).output
    assert '"token": "***"' in shown and SECRET not in shown
    detail = json.loads(invoke("schedule", "show", name, "--json").output)
    assert detail["input"] == {"user": "ana", "token": "***"}
    assert detail["secret_inputs"] == ["token"]
    (listed,) = json.loads(invoke("schedule", "ls", "--json").output)
    assert listed["input"] == {"user": "ana", "token": "***"}
    for args in (("schedule", "ls"), ("agenda", "--json"), ("agenda",)):
        assert SECRET not in invoke(*args).output


def test_a_cli_schedule_masks_its_secret_and_fires_with_the_real_value(
    invoke: Any, db: Path, clock: FakeClock, restore_signals: None
) -> None:
    added = invoke(
        "schedule", "add", "ship", "--every", "1h", "flows.py:deploy",
        "-i", "user=ana", "-i", f"token={SECRET}", "--json",
    ).output  # fmt: skip
    assert json.loads(added)["input"]["token"] == "***" and SECRET not in added
    _assert_masked(invoke, "ship")
    with Store(db) as store:
        (ship,) = list_schedule_dicts(store)  # what the TUI's Schedules view shows
        assert ship["input"]["token"] == "***"
        assert SECRET not in str(render_schedule(ship))
        assert store.get_schedule("ship").input["token"] == SECRET  # stored as given

    clock.advance(timedelta(hours=1, seconds=1))
    invoke("daemon", "--until-idle", "--workers", "1", "--log-level", "error")
    with Store(db) as store:
        (run,) = store.list_runs()
    assert run.schedule == "ship" and run.status is RunStatus.COMPLETED
    assert run.result == DIGEST  # the handler hashed the real token
    assert run.input["token"] == SECRET and run.shown_input["token"] == "***"
    _assert_masked(invoke, "ship")  # firing changed nothing shown


def test_a_yaml_schedule_records_its_secrets_at_sync_and_fires_with_the_real_value(
    invoke: Any, db: Path, home: Path, clock: FakeClock, restore_signals: None
) -> None:
    (home / "workflows").mkdir()
    (home / "flowctl.toml").write_text('workflows = "workflows"\n')
    path = home / "workflows" / "deploy.yaml"
    path.write_text(_yaml(secret=False))
    assert invoke("schedule", "sync").output == "added     deploy-yaml\n"
    (plain,) = json.loads(invoke("schedule", "ls", "--json").output)
    assert plain["input"]["token"] == SECRET and plain["secret_inputs"] == []

    path.write_text(_yaml(secret=True))  # only the secret flag changed: a sync records it
    assert json.loads(invoke("schedule", "sync", "--json").output)["updated"] == ["deploy-yaml"]
    _assert_masked(invoke, "deploy-yaml")

    clock.advance(timedelta(hours=1, seconds=1))
    invoke("daemon", "--until-idle", "--workers", "1", "--log-level", "error")
    with Store(db) as store:
        (run,) = store.list_runs()
    assert run.schedule == "deploy-yaml" and run.status is RunStatus.COMPLETED  # step saw it
    assert run.shown_input["token"] == "***"


def test_a_secret_of_the_wrong_type_is_not_quoted_in_the_error(invoke: Any, home: Path) -> None:
    """The error reaches the daemon's log and the schedule's history when a schedule fires."""
    (home / "pin.yaml").write_text(
        "name: pin\ninput:\n  pin: {type: int, secret: true}\n"
        "steps:\n  - id: s\n    run: [echo, ok]\n"
    )
    result = invoke("run", "pin.yaml", "-i", f"pin={SECRET}", code=2)
    assert "input 'pin' must be" in result.stderr and "got *** (str)" in result.stderr
    assert SECRET not in result.output + result.stderr
