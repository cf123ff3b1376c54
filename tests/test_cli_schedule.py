"""`flowctl schedule ...`, `flowctl agenda` and `flowctl run --key` through the real Typer app
(CliRunner), on a FakeClock: outputs, --json shapes, exit codes, nothing written on bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import open_store
from tests import dbs
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")
FLOWS = """
from flowctl import workflow


@workflow
def slow(ctx):
    ctx.sleep("2h")
    return "done"


@workflow
def waits(ctx):
    return ctx.wait_signal("go", timeout="3h")
"""
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder as the working directory (no flowctl.toml above it)."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    return folder


@pytest.fixture
def invoke(db: str, clock: FakeClock, home: Path) -> Any:
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli.app, ["--db", str(db), *args])
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    return run


def counts(db: str) -> tuple[int, ...]:
    return dbs.counts(db, ("schedules", "schedule_history", "runs"))


# ---------------------------------------------------------------- add / ls / show / ...


def test_add_ls_show_pause_resume_rm(invoke: Any, clock: FakeClock) -> None:
    out = invoke(
        "schedule", "add", "nightly-report", "--cron", "0 9 * * MON-FRI", "--tz", "Europe/Paris",
        str(ROOT / "examples" / "report.yaml"), "-i", "team=ops",
    ).output  # fmt: skip
    assert out.splitlines() == [
        "added schedule nightly-report: cron 0 9 * * MON-FRI in Europe/Paris",
        "next fire 2026-03-30 09:00 CEST (in 2d19h)",
    ]
    out = invoke("schedule", "add", "heartbeat", "--every", "15m", "--tz", "UTC", PING).output
    assert out.splitlines() == [
        "added schedule heartbeat: every 15m from 2026-03-27T12:00:00+00:00 in UTC",
        "next fire 2026-03-27 12:15 UTC (in 15m00s)",
    ]
    lines = invoke("schedule", "ls").output.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "RULE", "NEXT", "LAST", "TARGET"]
    assert lines[1].startswith("heartbeat ") and "(in 15m00s)" in lines[1]
    assert lines[2].startswith("nightly-report") and "2026-03-30 09:00 CEST" in lines[2]
    show = invoke("schedule", "show", "nightly-report").output
    assert "policies  missed=skip (max 100) overlap=skip gap=shift fold=first jitter=none" in show
    assert 'input     {"team": "ops"}' in show
    assert "2026-03-30 09:00 CEST" in show and "2026-04-03 09:00 CEST" in show  # 5 weekdays
    assert "2026-03-28" not in show  # not Saturday
    assert invoke("schedule", "pause", "heartbeat").output == "paused heartbeat\n"
    assert "paused" in invoke("schedule", "ls").output.splitlines()[1]
    clock.advance(timedelta(minutes=20))
    out = invoke("schedule", "resume", "heartbeat").output
    assert out == "resumed heartbeat: next fire 2026-03-27 12:30 UTC (in 10m00s)\n"
    assert invoke("schedule", "rm", "heartbeat").output == "removed schedule heartbeat\n"
    assert [s["name"] for s in json.loads(invoke("schedule", "ls", "--json").output)] == [
        "nightly-report"
    ]


def test_json_shapes(invoke: Any, db: str, clock: FakeClock) -> None:
    added = json.loads(
        invoke(
            "schedule", "add", "beat", "--every", "15m", "--tz", "UTC", "--jitter", "1m",
            "--overlap", "queue", PING, "--json",
        ).output
    )  # fmt: skip
    assert added["name"] == "beat"
    assert added["every"] == 900.0 and added["cron"] is None and added["tz"] == "UTC"
    assert added["policies"] == {
        "missed": "skip",
        "max_missed": 100,
        "overlap": "queue",
        "gap": "shift",
        "fold": "first",
        "jitter": 60.0,
    }
    assert added["next_fire_at"] == "2026-03-27T12:15:00.000000Z"
    assert added["source"] == "cli" and added["paused"] is False and added["last"] is None
    # fire once, on time, through a daemon; then ls/show report the outcome
    clock.advance(timedelta(minutes=15))
    with open_store(db) as store:
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    clock.advance(timedelta(minutes=5))
    (listed,) = json.loads(invoke("schedule", "ls", "--json").output)
    assert listed["last"]["action"] == "fired"
    assert listed["last"]["fire_at"] == "2026-03-27T12:15:00.000000Z"
    assert listed["last_fire_at"] == "2026-03-27T12:15:00.000000Z"
    shown = json.loads(invoke("schedule", "show", "beat", "--json").output)
    assert [f["at"] for f in shown["upcoming"]][:2] == [
        "2026-03-27T12:30:00.000000Z",
        "2026-03-27T12:45:00.000000Z",
    ]
    assert [h["action"] for h in shown["history"]] == ["fired"]
    assert shown["history"][0]["run_status"] in ("queued", "completed")
    assert "LAST" in invoke("schedule", "ls").output
    assert "fired 5m00s ago" in invoke("schedule", "ls").output


def test_trigger(invoke: Any, db: str, clock: FakeClock) -> None:
    invoke("schedule", "add", "beat", "--every", "1h", PING)
    out = invoke("schedule", "trigger", "beat").output
    assert out.startswith("triggered beat: run ") and out.endswith("queued (a daemon starts it)\n")
    run_id = out.split()[3]
    same = invoke("schedule", "trigger", "beat").output  # the same instant: the same trigger
    assert same == f"beat: already triggered at this instant: run {run_id}\n"
    clock.advance(timedelta(seconds=1))
    again = json.loads(invoke("schedule", "trigger", "beat", "--json").output)
    assert again["action"] == "skipped-overlap" and again["run"] is None  # overlap=skip
    assert "is still queued" in again["detail"]
    assert counts(db)[2] == 1
    history = json.loads(invoke("schedule", "show", "beat", "--json").output)["history"]
    assert [h["action"] for h in history] == ["manual", "skipped-overlap"]


# ---------------------------------------------------------------- explain


def test_explain_flags_dst_gap_and_policy(invoke: Any) -> None:
    out = invoke(
        "schedule", "explain", "30 2 * * *", "--tz", "Europe/Paris", "--from", "2026-03-28",
        "-n", "3",
    ).output.splitlines()  # fmt: skip
    assert out[0] == "cron 30 2 * * * in Europe/Paris"
    assert out[1].split() == ["#", "LOCAL", "(Europe/Paris)", "DAY", "UTC", "DST"]
    assert out[2].split()[:5] == ["1", "2026-03-28", "02:30", "CET", "Sat"]
    assert out[3].split() == [
        "2", "2026-03-29", "03:00", "CEST", "Sun", "2026-03-29T01:00:00Z",
        "gap:", "shifted", "from", "02:30", "to", "03:00", "[gap=shift]",
    ]  # fmt: skip
    assert out[4].split()[:5] == ["3", "2026-03-30", "02:30", "CEST", "Mon"]
    skip = invoke(
        "schedule", "explain", "30 2 * * *", "--tz", "Europe/Paris", "--from", "2026-03-29",
        "-n", "1", "--gap", "skip",
    ).output  # fmt: skip
    assert "gap: skipped 02:30 [gap=skip: does not fire]" in skip


def test_explain_json_shape_for_a_fold(invoke: Any) -> None:
    data = json.loads(
        invoke(
            "schedule", "explain", "30 1 * * *", "--tz", "America/New_York", "--from",
            "2026-11-01T00:00:00-04:00", "--count", "2", "--fold", "both", "--json",
        ).output
    )  # fmt: skip
    assert set(data) == {"expression", "tz", "gap", "fold", "rule", "after", "fires"}
    assert data["expression"] == "30 1 * * *" and data["fold"] == "both"
    assert data["after"] == "2026-11-01T04:00:00.000000Z"
    assert data["fires"] == [
        {
            "at": "2026-11-01T05:30:00.000000Z",
            "local": "2026-11-01T01:30:00.000000-04:00",
            "weekday": "Sunday",
            "fires": True,
            "note": "fold: first of two 01:30",
            "policy": "fold=both",
        },
        {
            "at": "2026-11-01T06:30:00.000000Z",
            "local": "2026-11-01T01:30:00.000000-05:00",
            "weekday": "Sunday",
            "fires": True,
            "note": "fold: second of two 01:30",
            "policy": "fold=both",
        },
    ]


# ---------------------------------------------------------------- agenda


def test_agenda_lists_every_future_wake_in_time_order(
    invoke: Any, db: str, clock: FakeClock, tmp_path: Path
) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    with open_store(db) as store:
        sleeper = ops.start(store, f"{flows}:slow", {}, clock=clock).run  # wakes at +2h
        waiter = ops.start(store, f"{flows}:waits", {}, clock=clock).run  # times out at +3h
        Daemon(store, clock, DaemonConfig(concurrency=2)).tick()
        assert store.get_run(sleeper.run_id).status is RunStatus.SLEEPING
        later = ops.start(
            store,
            f"{flows}:slow",
            {},
            clock=clock,
            run_at=START + timedelta(minutes=30),
            deadline=START + timedelta(hours=5),
        ).run
    invoke("schedule", "add", "beat", "--every", "45m", "--tz", "UTC", PING)
    items = json.loads(invoke("agenda", "--until", "4h", "--json").output)
    assert [i["at"] for i in items] == sorted(i["at"] for i in items)
    assert [(i["kind"], i["run_id"] or i["schedule"]) for i in items] == [
        ("start", later.run_id),  # +30m
        ("fire", "beat"),  # +45m
        ("fire", "beat"),  # +1h30
        ("wake", sleeper.run_id),  # +2h
        ("fire", "beat"),  # +2h15
        ("fire", "beat"),  # +3h (ties sort by kind)
        ("timeout", waiter.run_id),  # +3h
        ("fire", "beat"),  # +3h45
    ]
    assert set(items[0]) == {"at", "kind", "run_id", "workflow", "schedule", "detail"}
    longer = json.loads(invoke("agenda", "--until", "6h", "--json").output)
    assert ("deadline", later.run_id) in [(i["kind"], i["run_id"]) for i in longer]
    assert len(json.loads(invoke("agenda", "--until", "6h", "-n", "3", "--json").stdout)) == 3
    text = invoke("agenda", "--until", "4h").output.splitlines()
    assert text[0].split() == ["WHEN", "KIND", "RUN", "/", "SCHEDULE", "WHAT"]
    assert "start" in text[1] and later.run_id in text[1]
    assert "fire" in text[2] and "schedule beat" in text[2]


# ---------------------------------------------------------------- bad input


BAD = [
    (["schedule", "add", "x", "--cron", "61 * * * *", PING], "minute field '61' is not valid"),
    (["schedule", "add", "x", "--cron", "0 9 * *", PING], "expected 5 fields"),
    (["schedule", "add", "x", "--cron", "@sometimes", PING], "unknown cron alias"),
    (
        ["schedule", "add", "x", "--cron", "0 9 * * *", "--tz", "Mars/Olympus", PING],
        "unknown time zone",
    ),
    (
        ["schedule", "add", "x", "--cron", "0 9 * * *", "--every", "1h", PING],
        "exactly one of cron or every, got both",
    ),
    (["schedule", "add", "x", PING], "exactly one of cron or every, got neither"),
    (["schedule", "add", "x", "--every", "soon", PING], "invalid duration 'soon'"),
    (["schedule", "add", "x", "--every", "1h", "--missed", "never", PING], "invalid missed policy"),
    (
        ["schedule", "add", "x", "--every", "1h", "--overlap", "maybe", PING],
        "invalid overlap policy",
    ),
    (["schedule", "add", "x", "--every", "1h", "--gap", "jump", PING], "invalid gap policy"),
    (["schedule", "add", "x", "--every", "1h", "--fold", "middle", PING], "invalid fold policy"),
    (["schedule", "add", "x", "--every", "1h", "--jitter", "-5m", PING], "invalid"),
    (["schedule", "add", "x", "--every", "1h", "missing.yaml"], "does not exist"),
    (["schedule", "add", "x", "--every", "1h", PING, "-i", "nope=1"], "nope"),
    (
        ["schedule", "add", "x", "--every", "1h", PING, "--input", "[1]"],
        "--input must be a JSON object",
    ),
    (["schedule", "add", "bad name!", "--every", "1h", PING], "invalid schedule name"),
    (["schedule", "add", "taken", "--every", "1h", PING], "already exists: use --replace"),
    (["schedule", "explain", "0 25 * * *"], "hour field '25' is not valid"),
    (["schedule", "explain", "0 9 * * *", "--tz", "Nowhere/Land"], "unknown time zone"),
    (["schedule", "explain", "0 9 * * *", "--count", "0"], "--count must be between 1 and 1000"),
    (["agenda", "--until", "forever"], "invalid duration 'forever'"),
    (["agenda", "--limit", "0"], "--limit must be at least 1"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a[:4]) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    invoke: Any, db: str, args: list[str], message: str
) -> None:
    invoke("schedule", "add", "taken", "--every", "1h", PING)
    before = counts(db)
    result = invoke(*args, code=2)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowctl: "), result.stderr
    assert message in lines[0]
    assert counts(db) == before


def test_unknown_schedule_names_it(invoke: Any, db: str) -> None:
    open_store(db).close()  # these commands create no database: give them one
    for verb in ("show", "pause", "resume", "rm", "trigger"):
        result = invoke("schedule", verb, "ghost", code=1)
        assert result.stderr == ("flowctl: no schedule named 'ghost': see `flowctl schedule ls`\n")


# ---------------------------------------------------------------- run --key


def test_run_with_the_same_key_returns_the_first_run(invoke: Any, db: str) -> None:
    first = json.loads(invoke("run", PING, "--key", "signup-42", "--detach", "--json").output)
    out = invoke("run", PING, "--key", "signup-42", "--detach").output
    assert out == f"run {first['id']} already exists for key 'signup-42' (queued)\n"
    again = json.loads(invoke("run", PING, "--key", "signup-42", "--detach", "--json").output)
    assert again["id"] == first["id"]
    assert counts(db)[2] == 1


# ---------------------------------------------------------------- declared schedules


TOML = """\
workflows = "workflows"

[schedules.nightly]
target = "workflows/ping.yaml"
cron = "0 9 * * MON-FRI"
tz = "Europe/Paris"
missed = "latest"
"""


def _project(
    home: Path, toml: str = TOML, yaml_schedule: str = "schedule:\n  every: 15m\n"
) -> None:
    (home / "flowctl.toml").write_text(toml)
    (home / "workflows").mkdir(exist_ok=True)
    (home / "workflows" / "ping.yaml").write_text(
        f"name: ping\n{yaml_schedule}steps:\n  - id: pong\n    run: [echo, pong]\n"
    )


def test_schedule_sync_from_yaml_and_toml(invoke: Any, home: Path, db: str) -> None:
    _project(home)
    invoke("schedule", "add", "by-hand", "--every", "1h", PING)
    assert invoke("schedule", "sync").output == "added     ping, nightly\n"
    listed = {s["name"]: s for s in json.loads(invoke("schedule", "ls", "--json").output)}
    assert set(listed) == {"by-hand", "nightly", "ping"}
    assert listed["nightly"]["source"] == "toml"
    assert listed["nightly"]["origin"] == str((home / "flowctl.toml").resolve())
    assert listed["nightly"]["policies"]["missed"] == "latest"
    assert listed["nightly"]["target"] == str((home / "workflows" / "ping.yaml").resolve())
    assert listed["ping"]["source"] == "yaml" and listed["ping"]["every"] == 900.0
    again = json.loads(invoke("schedule", "sync", "--json").output)
    assert again == {"added": [], "updated": [], "removed": [], "unchanged": ["ping", "nightly"]}
    _project(home, toml='workflows = "workflows"\n', yaml_schedule="")
    gone = json.loads(invoke("schedule", "sync", "--json").output)
    assert sorted(gone["removed"]) == ["nightly", "ping"]
    assert [s["name"] for s in json.loads(invoke("schedule", "ls", "--json").output)] == ["by-hand"]


def test_bad_declarations_change_nothing(invoke: Any, home: Path, db: str) -> None:
    _project(
        home,
        toml=TOML + '\n[schedules.broken]\ntarget = "workflows/ping.yaml"\ncron = "0 9 * *"\n',
        yaml_schedule="schedule:\n  every: 15m\n  overlap: sometimes\n",
    )
    before = counts(db)
    result = invoke("schedule", "sync", code=2)
    lines = result.stderr.splitlines()
    assert any(
        "ping.yaml:4:12: schedule.overlap: invalid overlap policy 'sometimes'" in line
        for line in lines
    )
    assert any("schedules.broken.cron: invalid cron expression '0 9 * *'" in line for line in lines)
    assert lines[-1] == "flowctl: schedule sync: nothing changed"
    assert counts(db) == before


def test_a_non_table_schedules_key_is_a_config_error(invoke: Any, home: Path) -> None:
    (home / "flowctl.toml").write_text("schedules = 3\n")
    result = invoke("schedule", "ls", code=2)
    assert "key 'schedules' must be dict" in result.stderr


@pytest.fixture
def restore_signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_the_daemon_syncs_declared_schedules_when_it_starts(
    invoke: Any, home: Path, restore_signals: None
) -> None:
    _project(home)
    invoke("daemon", "--until-idle", "--workers", "1", "--log-level", "error")
    names = [s["name"] for s in json.loads(invoke("schedule", "ls", "--json").output)]
    assert names == ["nightly", "ping"]


def test_rm_of_a_declared_schedule_names_it_in_the_advice(invoke: Any, home: Path, db: str) -> None:
    _project(home)
    invoke("schedule", "sync")
    before = counts(db)
    err = invoke("schedule", "rm", "ping", code=2).stderr
    origin = (home / "workflows" / "ping.yaml").resolve()
    assert err == (
        f"flowctl: schedule 'ping' is declared in {origin}: remove it there and run"
        " `flowctl schedule sync` (or `flowctl schedule pause ping`)\n"
    )
    assert counts(db) == before


def test_the_daemon_logs_synced_schedules_in_words(home: Path, db: str) -> None:
    """Issue 39: the log line was a Python dict (`{'added': ['ping', 'nightly']}`). A real
    daemon process, as its log reads."""
    _project(home)
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"}
    argv = ["--db", db, "daemon", "--until-idle", "--workers", "1", "--log-level", "info"]
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", *argv],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    synced = [line for line in done.stderr.splitlines() if "schedules synced" in line]
    assert len(synced) == 1, done.stderr
    assert synced[0].endswith("schedules synced: added ping, nightly"), synced
