"""Smaller truths (issue 10, item 12): `--at` in the past, lists that say when they are cut,
`run file.py` without a function, `redrive --since DURATION`, a second daemon on one
database, and durations in ASCII digits only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowctl import cli
from flowctl.clock import FakeClock
from flowctl.durations import parse_duration
from flowctl.errors import DurationError
from flowctl.ids import HOST, make_owner, proc_start
from flowctl.store import open_store
from tests.conftest import ROOT
from tests.dbs import counts
from tests.inproc import Ran, run_main

START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
FLOWS = """
from flowctl import workflow


@workflow
def nap(ctx):
    ctx.sleep("1h")


@workflow
def boom(ctx):
    raise ValueError("no")
"""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "flows.py").write_text(FLOWS)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    return folder


def flowctl(monkeypatch: pytest.MonkeyPatch, db: str, *args: str) -> Ran:
    return run_main(monkeypatch, "--db", db, *args)


def run_rows(db: str) -> int:
    return counts(db, ("runs",))[0]


# ---------------------------------------------------------------- --at


@pytest.mark.parametrize("at", ["2026-03-27T11:59:59Z", "2020-01-01", "2026-03-27 12:59:00+02:00"])
def test_at_in_the_past_is_a_usage_error_and_writes_nothing(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, at: str
) -> None:
    out = flowctl(monkeypatch, db, "run", "flows.py:nap", "--at", at)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith(f"flowctl: --at {at!r} is in the past (")
    assert out.stderr.endswith("); give a later time, or --at now\n")
    assert run_rows(db) == 0


@pytest.mark.parametrize(
    ("at", "due"), [("now", START), ("2026-03-27T13:00:00Z", START + timedelta(hours=1))]
)
def test_at_now_or_later_queues_the_run(
    db: str,
    monkeypatch: pytest.MonkeyPatch,
    project: Path,
    clock: FakeClock,
    at: str,
    due: datetime,
) -> None:
    out = flowctl(monkeypatch, db, "run", "flows.py:nap", "--at", at, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["run_at"] == due.isoformat(timespec="microseconds").replace(
        "+00:00", "Z"
    )


# ---------------------------------------------------------------- cut lists


def test_ls_says_when_it_cuts_the_list(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, tmp_path: Path
) -> None:
    # The notice goes to stderr (issue 17): stdout stays the table or one JSON document.
    for _ in range(5):
        assert flowctl(monkeypatch, db, "run", "flows.py:nap", "--detach").returncode == 0
    out = flowctl(monkeypatch, db, "ls", "--limit", "2")
    assert len(out.stdout.splitlines()) == 3  # header, two runs
    assert out.stderr == "flowctl: showing 2 of 5 runs; use --limit/-n for more\n"
    whole = flowctl(monkeypatch, db, "ls", "--limit", "5")
    assert len(whole.stdout.splitlines()) == 6 and whole.stderr == ""
    out = flowctl(monkeypatch, db, "ls", "--limit", "3", "--json", "--status", "queued")
    assert len(json.loads(out.stdout)) == 3  # stdout stays one JSON document
    assert out.stderr == "flowctl: showing 3 of 5 runs; use --limit/-n for more\n"
    none = flowctl(monkeypatch, db, "ls", "--limit", "1", "--status", "dead")
    assert none.stdout == "no runs\n"


def test_ls_counts_with_the_same_filters_it_lists_with(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, tmp_path: Path
) -> None:
    for _ in range(3):
        flowctl(monkeypatch, db, "run", "flows.py:nap", "--detach")
    for _ in range(2):
        flowctl(monkeypatch, db, "run", "flows.py:boom", "--detach")
    out = flowctl(monkeypatch, db, "ls", "--limit", "1", "--workflow", "boom")
    assert out.stderr == "flowctl: showing 1 of 2 runs; use --limit/-n for more\n"


def test_agenda_says_when_it_cuts_the_list(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, tmp_path: Path
) -> None:
    for minutes in (5, 10, 15):
        flowctl(monkeypatch, db, "run", "flows.py:nap", "--in", f"{minutes}m")
    out = flowctl(monkeypatch, db, "agenda", "--limit", "2")
    assert len(out.stdout.splitlines()) == 3
    notice = "flowctl: showing 2 of more than 2 items within 30d; use --limit/-n for more\n"
    assert out.stderr == notice
    whole = flowctl(monkeypatch, db, "agenda", "--limit", "3")
    assert len(whole.stdout.splitlines()) == 4 and whole.stderr == ""
    out = flowctl(monkeypatch, db, "agenda", "--limit", "1", "--json")
    assert len(json.loads(out.stdout)) == 1
    assert out.stderr == notice.replace("2", "1")


# ---------------------------------------------------------------- run file.py


def test_run_file_py_without_a_function_says_the_form(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, tmp_path: Path
) -> None:
    out = flowctl(monkeypatch, db, "run", "flows.py")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "flowctl: 'flows.py' names a file, not a function: use flows.py:FUNCTION"
        " (flows.py has @workflow functions: nap, boom)\n"
    )
    (project / "one.py").write_text(
        "from flowctl import workflow\n\n@workflow\ndef only(ctx):\n    pass\n"
    )
    out = flowctl(monkeypatch, db, "run", "one.py")
    assert out.stderr == "flowctl: 'one.py' names a file, not a function: use one.py:only\n"
    out = flowctl(monkeypatch, db, "run", "missing.py")
    assert (
        out.stderr
        == "flowctl: 'missing.py' names a file, not a function: use missing.py:FUNCTION\n"
    )
    assert run_rows(db) == 0


# ---------------------------------------------------------------- redrive --since


@pytest.mark.parametrize("since", ["2h", "2h ago", "3 days", "90", "2026-03-27T10:00:00Z"])
def test_redrive_since_takes_a_duration_or_a_time(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, since: str
) -> None:
    flowctl(monkeypatch, db, "run", "flows.py:boom", "--max-attempts", "1")
    clock.advance(timedelta(seconds=30))
    out = flowctl(monkeypatch, db, "redrive", "--all", "--since", since, "--json")
    assert out.returncode == 0, out.stderr
    assert [r["status"] for r in json.loads(out.stdout)] == ["queued"]


def test_redrive_since_too_long_ago_matches_nothing_and_garbage_says_both_forms(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, tmp_path: Path
) -> None:
    flowctl(monkeypatch, db, "run", "flows.py:boom", "--max-attempts", "1")
    clock.advance(timedelta(hours=3))
    assert flowctl(monkeypatch, db, "redrive", "--all", "--since", "2h").stdout == (
        "0 run(s) redriven\n"
    )
    out = flowctl(monkeypatch, db, "redrive", "--all", "--since", "yesterday")
    assert out.returncode == 2
    assert out.stderr == (
        "flowctl: --since 'yesterday' is neither a duration ago (2h, 7d, '3 days ago') nor an"
        " ISO-8601 time (2026-12-01T09:00Z)\n"
    )


# ---------------------------------------------------------------- a second daemon


def test_a_second_daemon_says_once_that_it_shares_the_work(db: str) -> None:
    store = open_store(db)
    # this test process stands in for the first daemon: registered, and provably alive
    store.register_daemon(
        make_owner(), HOST, os.getpid(), proc_start(os.getpid()), datetime.now(UTC), {}
    )
    store.close()
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--until-idle"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    shares = [line for line in out.stderr.splitlines() if "shares the work" in line]
    assert len(shares) == 1
    assert shares[0].endswith(
        f"INFO daemon pid {os.getpid()} on {HOST} already serves this database;"
        " this one shares the work (each run is claimed by one of them)"
    )
    assert "ERROR" not in out.stderr and "WARNING" not in out.stderr


def test_a_lone_daemon_says_nothing_of_sharing(db: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, "daemon", "--until-idle"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "shares the work" not in out.stderr


# ---------------------------------------------------------------- ASCII digits


@pytest.mark.parametrize(
    "text", ["\uff15s", "\u0663", "1\u0663m", "\uff15", "\uff12h30m", "\u0967 day", "5 \uff53"]
)
def test_durations_take_ascii_digits_only(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_ascii_durations_still_parse() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration(" 90 ") == timedelta(seconds=90)
    assert parse_duration(".5s") == timedelta(milliseconds=500)


def test_a_unicode_digit_duration_is_a_usage_error_in_the_cli(
    db: str, monkeypatch: pytest.MonkeyPatch, project: Path, clock: FakeClock, tmp_path: Path
) -> None:
    out = flowctl(monkeypatch, db, "run", "flows.py:nap", "--in", "\uff15m")
    assert out.returncode == 2
    assert out.stderr.startswith("flowctl: invalid duration '\uff15m': use seconds (90)")
    assert run_rows(db) == 0
