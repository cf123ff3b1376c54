"""`run --wait` streams a command step's output, `flowctl wait RUN...` and `ls --watch`
(issue 17, item 3). The waiting loops run on a FakeClock whose waits are where the test acts
(a daemon tick, the time passing), so nothing sleeps for real but the one subprocess case."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli import listing
from flowctl.cli.start import NO_DAEMON
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.store import open_store
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")
FAIL = """
name: fails
steps:
  - id: nope
    run: [sh, -c, "echo sorry >&2; exit 3"]
"""
NAP = """
from flowctl import workflow


@workflow
def nap(ctx):
    ctx.sleep("2h")
    return "rested"
"""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def db(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The conftest's database (a SQLite file or a PostgreSQL URL), with a project
    folder as the working directory."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "fails.yaml").write_text(FAIL)
    (folder / "flows.py").write_text(NAP)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    return db


@pytest.fixture
def invoke(db: str, clock: FakeClock) -> Any:
    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


# ---------------------------------------------------------------- run --wait streams


def test_run_wait_streams_a_command_steps_output_while_it_runs(tmp_path: Path, db: str) -> None:
    go = tmp_path / "go"
    flow = tmp_path / "talk.yaml"
    flow.write_text(
        "name: talk\nsteps:\n  - id: talk\n    timeout: 60s\n"
        f"    run: 'echo first; while [ ! -e {go} ]; do sleep 0.02; done; echo second'\n"
    )
    argv = [sys.executable, "-m", "flowctl", "--db", db]
    proc = subprocess.Popen(
        [*argv, "run", str(flow), "--wait"], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert proc.stdout is not None
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout=60)  # the command is still blocked on `go`: only streaming shows it
    try:
        assert first == ["first\n"]
    finally:
        go.touch()
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    lines = rest.splitlines()
    assert lines[0] == "second" and lines[1].startswith("  ✓ talk")
    assert lines[-1].startswith("completed ")
    run_id = lines[-1].split()[1].rstrip(":")
    chunks = json.loads(
        subprocess.run([*argv, "logs", run_id, "--json"], capture_output=True, text=True).stdout
    )
    assert "".join(c["text"] for c in chunks) == "first\nsecond\n"  # stored once, not twice


def test_run_wait_prints_command_output_but_not_into_json(invoke: Any) -> None:
    out = invoke("run", PING, "--wait").stdout.splitlines()
    assert out[0] == "pong" and out[1].startswith("  ✓ pong")
    quiet = invoke("run", PING, "--wait", "--json").stdout
    assert json.loads(quiet)["status"] == "completed"  # stdout is the one JSON document
    err = invoke("run", "fails.yaml", "--max-attempts", "1", code=1)
    assert err.stderr.startswith("sorry\n")  # a command's stderr goes to stderr


# ---------------------------------------------------------------- flowctl wait


def _queued(invoke: Any, target: str) -> str:
    started = json.loads(invoke("run", target, "--detach", "--json").stdout)
    return str(started["id"])


def test_wait_returns_when_a_daemon_finishes_the_runs(
    invoke: Any, db: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _queued(invoke, PING), _queued(invoke, PING)
    ticks: list[int] = []

    def daemon_runs_while_we_wait(event: threading.Event, deadline: float) -> bool:
        with open_store(db) as store:
            ticks.append(Daemon(store, clock, DaemonConfig(concurrency=1)).tick())
        clock.advance(timedelta(seconds=0.2))
        return False

    monkeypatch.setattr(clock, "wait_until", daemon_runs_while_we_wait)
    out = invoke("wait", a, b[:10]).stdout.splitlines()
    assert ticks and sum(ticks) == 2
    result = '{"steps": {"pong": "pong"}}'
    assert sorted(out) == sorted([f"completed {a}: {result}", f"completed {b}: {result}"])


def test_wait_json_is_the_run_or_a_list_and_exit_1_for_a_dead_one(invoke: Any) -> None:
    ok = json.loads(invoke("run", PING, "--wait", "--json").stdout)["id"]
    dead = invoke("run", "fails.yaml", "--max-attempts", "1", "--json", code=1)
    dead_id = json.loads(dead.stdout)["id"]
    one = json.loads(invoke("wait", ok, "--json").stdout)
    assert one["id"] == ok and one["status"] == "completed"
    both = invoke("wait", ok, dead_id, "--json", code=1)
    assert [r["status"] for r in json.loads(both.stdout)] == ["completed", "dead"]
    said = invoke("wait", dead_id, code=1)
    assert said.stderr.startswith(f"dead {dead_id}: ")


def test_wait_timeout_exits_124_and_names_what_still_runs(
    invoke: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _queued(invoke, "flows.py:nap")
    waits: list[float] = []

    def time_passes(event: threading.Event, deadline: float) -> bool:
        waits.append(deadline)
        clock.advance(timedelta(seconds=max(0.0, deadline - clock.monotonic())))
        return False

    monkeypatch.setattr(clock, "wait_until", time_passes)
    out = invoke("wait", rid, "--timeout", "1s", code=124)
    assert out.stderr.splitlines() == [  # no daemon ran: said once (test_wait_no_daemon.py)
        NO_DAEMON,
        f"flowctl: still running after 1s: {rid} (queued)",
    ]
    assert len(waits) == 5  # every 0.2s, the last one ending at the timeout


def test_wait_bad_input_is_one_line(invoke: Any) -> None:
    invoke("run", PING, "--detach")
    bad = invoke("wait", "nosuchrun0000000", code=1)
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("flowctl: ")
    late = invoke("wait", "x", "--timeout", "soon", code=2)
    assert late.stderr.startswith("flowctl: invalid duration 'soon'")
    assert "Traceback" not in bad.output + late.output


# ---------------------------------------------------------------- ls --watch


def _stop_after(clock: FakeClock, monkeypatch: pytest.MonkeyPatch, draws: int) -> list[float]:
    """The watch's wait: time passes; Ctrl-C after `draws` drawings."""
    waited: list[float] = []

    def wait(event: threading.Event, timeout: float | None) -> bool:
        waited.append(timeout or 0.0)
        if len(waited) == draws:
            raise KeyboardInterrupt
        clock.advance(timedelta(seconds=timeout or 0.0))
        return False

    monkeypatch.setattr(clock, "wait", wait)
    return waited


def test_ls_watch_piped_prints_the_list_once_per_interval(
    invoke: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _queued(invoke, PING)
    waited = _stop_after(clock, monkeypatch, 3)
    out = invoke("ls", "--watch", "--every", "5s").stdout
    assert waited == [5.0, 5.0, 5.0]
    assert out.count("── every 5s · ") == 3 and out.count(rid) == 3
    assert "\x1b" not in out  # no escape codes into a pipe


def test_ls_watch_in_a_terminal_redraws_the_screen(
    invoke: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queued(invoke, PING)
    _stop_after(clock, monkeypatch, 2)
    monkeypatch.setattr(listing, "_is_terminal", lambda: True)
    out = invoke("ls", "--watch").stdout
    assert out.count("\x1b[H\x1b[2J") == 2 and "Ctrl-C stops" in out


def test_ls_watch_refuses_what_it_cannot_do(invoke: Any) -> None:
    invoke("run", PING, "--detach")
    both = invoke("ls", "--watch", "--json", code=2)
    assert both.stderr.startswith("flowctl: give --watch or --json, not both")
    zero = invoke("ls", "--watch", "--every", "0s", code=2)
    assert "--every must be a positive duration" in zero.stderr


TRIO = """
name: trio
steps:
  - id: one
    run: [echo, uno]
  - id: nap
    sleep: 300ms
  - id: two
    run: [echo, dos]
"""


def test_run_wait_prints_the_same_lines_in_order_when_a_daemon_runs_part_of_it(
    tmp_path: Path, db: str
) -> None:
    # With a daemon live, it and the waiting process race for the run (at its start, at
    # its wake): whoever runs a step, `run --wait` prints it in call order, after the
    # output it recorded, and says the sleep, as it does with no daemon.
    (tmp_path / "trio.yaml").write_text(TRIO)
    argv = [sys.executable, "-m", "flowctl", "--db", db]
    daemon = subprocess.Popen(
        [*argv, "daemon"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path
    )
    try:
        for _ in range(4):
            out = subprocess.run(
                [*argv, "run", "trio.yaml", "--wait"],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            # Durations and times vary; the lines and their order do not.
            shape = [
                re.sub(r" \(.*| until .*| [0-9a-z]{16}:.*", "", line)
                for line in out.stdout.splitlines()
            ]
            assert shape == [
                "uno",
                "  ✓ one",
                "  … sleeping",
                "dos",
                "  ✓ two",
                "completed",
            ], out.stdout
    finally:
        daemon.terminate()
        assert daemon.wait(timeout=30) == 0


FLAKY = """
import os
from flowctl import workflow


def flaky(path):
    n = int(open(path).read()) if os.path.exists(path) else 0
    open(path, "w").write(str(n + 1))
    print(f"flaky try {n}")
    if n == 0:
        raise RuntimeError("the first try fails")
    return n


@workflow
def fl(ctx, path: str):
    return ctx.step("flaky", flaky, path)
"""


def test_run_wait_prints_a_retried_steps_output_once_per_attempt(tmp_path: Path, db: str) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY)
    path = f"path={tmp_path / 'count'}"
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, "run", "flaky.py:fl", "--wait", "-i", path],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    shape = [re.sub(r" \(.*| at .*| [0-9a-z]{16}:.*", "", line) for line in out.stdout.splitlines()]
    assert shape == [
        "flaky try 0",
        "  ✗ flaky",
        "  ↻ retrying",
        "flaky try 1",
        "  ✓ flaky",
        "completed",
    ], out.stdout


@pytest.fixture
def daemon_when_due(db: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each time `run --wait` waits, the fake time jumps to the run's due time and an
    in-process daemon ticks: the daemon, not the waiting process, runs what is due. The
    list collects how many runs each tick executed."""
    ticks: list[int] = []
    fake_wait = clock.wait_until

    def a_daemon_runs_it_when_due(event: threading.Event, deadline: float) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return fake_wait(event, deadline)  # the foreground's heartbeat: time is ours
        with open_store(db) as store:
            run = store.list_runs(limit=1)[0]
            if run.run_at is not None and run.run_at > clock.now():
                clock.advance(run.run_at - clock.now())
            with contextlib.redirect_stdout(io.StringIO()):  # not this process's output
                ticks.append(Daemon(store, clock, DaemonConfig(concurrency=1)).tick())
        return False

    monkeypatch.setattr(clock, "wait_until", a_daemon_runs_it_when_due)
    return ticks


NAP_THEN_FLAKY = """
from pathlib import Path
from flowctl import workflow


def flaky(path):
    n = int(Path(path).read_text()) if Path(path).exists() else 0
    Path(path).write_text(str(n + 1))
    print(f"flaky try {n}")
    if n == 0:
        raise RuntimeError("the first try fails")
    return n


@workflow
def later(ctx, path: str):
    ctx.sleep("1h")
    return ctx.step("flaky", flaky, path)
"""


def test_run_wait_says_an_attempt_a_daemon_failed_and_when_it_is_retried(
    invoke: Any, tmp_path: Path, daemon_when_due: list[int]
) -> None:
    # The daemon runs the woken run while `run --wait` waits: its failed attempt's
    # checkpoint is gone once the retry is queued, so only the timeline says what happened.
    (Path.cwd() / "later.py").write_text(NAP_THEN_FLAKY)
    out = invoke("run", "later.py:later", "--wait", "-i", f"path={tmp_path / 'n'}").stdout
    assert sum(daemon_when_due) == 2  # the daemon ran both attempts, not this process
    shape = [
        re.sub(r" \(.*| until .*| at .*| [0-9a-z]{16}:.*", "", line) for line in out.splitlines()
    ]
    assert shape == [
        "  … sleeping",
        "flaky try 0",
        "  ✗ flaky: RuntimeError: the first try fails",
        "  ↻ retrying",
        "flaky try 1",
        "  ✓ flaky",
        "completed",
    ], out


ALWAYS_FAILS = """
from flowctl import workflow


def boom():
    print("trying")
    raise ValueError("no luck")


@workflow
def bad(ctx):
    return ctx.step("boom", boom)
"""


def test_run_wait_says_each_failed_attempt_once_when_it_and_a_daemon_share_them(
    invoke: Any, daemon_when_due: list[int]
) -> None:
    # Attempt 1 runs here (its output printed live); the daemon runs attempt 2 at the
    # retry, which fails at the same step: it is said too, with only its own output.
    (Path.cwd() / "bad.py").write_text(ALWAYS_FAILS)
    out = invoke("run", "bad.py:bad", "--wait", "--max-attempts", "2", code=1)
    assert sum(daemon_when_due) == 1  # the second attempt, by the daemon
    shape = [re.sub(r" \(.*?\)| at .*", "", line) for line in out.stdout.splitlines()]
    assert shape == [
        "trying",
        "  ✗ boom: ValueError: no luck",
        "  ↻ retrying",
        "trying",
        "  ✗ boom: ValueError: no luck",
    ], out.stdout
    assert out.stderr.startswith("dead ") and out.stderr.endswith(": ValueError: no luck\n")


STEP_RETRIES = """
from pathlib import Path
from flowctl import RetryPolicy, step, workflow


@step(retry=RetryPolicy.make(max_attempts=3, backoff="1s"))
def send(path):
    n = int(Path(path).read_text()) if Path(path).exists() else 0
    Path(path).write_text(str(n + 1))
    print(f"try {n}")
    if n < 2:
        raise ConnectionError("refused")
    return n


@workflow
def mail(ctx, path: str):
    return ctx.step("send", send, path)
"""


def test_run_wait_says_each_failed_try_of_a_retried_step(
    invoke: Any, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    (Path.cwd() / "mail.py").write_text(STEP_RETRIES)
    fake_wait = clock.wait_until

    def the_backoff_passes(event: threading.Event, deadline: float) -> bool:
        if threading.current_thread() is threading.main_thread():
            clock.advance(timedelta(seconds=max(0.0, deadline - clock.monotonic())))
        return fake_wait(event, deadline)

    monkeypatch.setattr(clock, "wait_until", the_backoff_passes)
    out = invoke("run", "mail.py:mail", "--wait", "-i", f"path={tmp_path / 'n'}").stdout
    shape = [re.sub(r" \(.*?\)| at .*| [0-9a-z]{16}:", "", line) for line in out.splitlines()]
    assert shape == [
        "try 0",
        "  ✗ send: ConnectionError: refused",
        "  ↻ retrying",
        "try 1",
        "  ✗ send: ConnectionError: refused",
        "  ↻ retrying",
        "try 2",
        "  ✓ send",
        "completed 2",
    ], out
