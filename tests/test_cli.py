"""The CLI: exit codes, one-line errors, --json shapes, and nothing written on bad input.

Every case runs in-process through `flowctl.cli.main`, the console script's own entry point
(so click's usage errors get the same one-line treatment as in a shell), inside typer's
CliRunner isolation, on a fake clock. The few things only a real process shows (start-up,
signals, exit codes as a shell sees them) are in tests/test_cli_process.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flowctl import cli
from flowctl.clock import FakeClock
from flowctl.store import open_store
from tests.conftest import ROOT
from tests.dbs import counts, is_url
from tests.dbs import rows as read

HELLO = str(ROOT / "examples" / "hello.py") + ":hello"
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


class CliClock(FakeClock):
    """Fake time that the CLI's own thread moves on when it waits.

    `flowctl run --wait` waits through a durable sleep on its clock; here that wait jumps the
    clock forward instead of taking real time, so a 2-second sleep passes at once. Other
    threads (the heartbeat) wait as on any FakeClock: they wake when the time comes.
    """

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self._owner = threading.get_ident()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if threading.get_ident() == self._owner and timeout is not None and not event.is_set():
            self.advance(timeout)
            return event.is_set()
        return super().wait(event, timeout)

    def wait_until(self, event: threading.Event, deadline: float) -> bool:
        if threading.get_ident() == self._owner and not event.is_set():
            self.advance(max(0.0, deadline - self.monotonic()))
            return event.is_set()
        return super().wait_until(event, deadline)


@dataclass
class Ran:
    """What a shell would see of one `flowctl` invocation."""

    returncode: int
    stdout: str
    stderr: str


Flowctl = Callable[..., Ran]


@pytest.fixture
def flowctl(monkeypatch: pytest.MonkeyPatch) -> Flowctl:
    """`flowctl(db, *args)` runs `flowctl --db DB ARGS...`; `flowctl(None, ...)` omits --db.

    The working directory is the repository root (tests that need another one chdir).
    """
    clock = CliClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: clock)
    monkeypatch.chdir(ROOT)
    runner = CliRunner()

    def run(db: str | Path | None, *args: str) -> Ran:
        argv = ["flowctl", *(["--db", str(db)] if db is not None else []), *args]
        monkeypatch.setattr(sys, "argv", argv)
        with runner.isolation() as (out, err, _mixed):
            try:
                cli.main()
                code = 0  # pragma: no cover - main() always exits
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            return Ran(code, out.getvalue().decode(), err.getvalue().decode())

    return run


@pytest.fixture
def flow_file(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(
        "from flowctl import workflow\n"
        "\n"
        "@workflow\n"
        "def add(ctx, a: int, b: int = 1):\n"
        "    return ctx.step('add', lambda: a + b)\n"
        "\n"
        "@workflow\n"
        "def boom(ctx):\n"
        "    ctx.step('explode', lambda: 1 / 0)\n"
        "\n"
        "@workflow\n"
        "def sleepy(ctx):\n"
        "    ctx.step('before', lambda: 'x')\n"
        "    ctx.sleep('24h')\n"
        "    return 'woke'\n"
        "\n"
        "def bad_result(ctx):\n"
        "    return ctx.step('obj', lambda: object())\n"
        "\n"
        "def naive(ctx):\n"
        "    import datetime\n"
        "    ctx.sleep_until(datetime.datetime(2030, 1, 1))\n"
    )
    return path


def test_run_hello_completes_and_prints_each_step(db: str, flowctl: Flowctl) -> None:
    out = flowctl(db, "run", HELLO, "-i", "name=ana", "--wait")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].strip().startswith("✓ greet")
    assert lines[1].strip().startswith("… sleeping until ")
    assert lines[2].strip().startswith("✓ shout")
    assert '"greeting": "hello, ana"' in lines[3]
    if not is_url(db):  # a file holds inputs and results: only its owner may read it
        assert oct(Path(db).stat().st_mode & 0o777) == "0o600"


def test_run_json_shape_and_typed_inputs(db: str, flow_file: Path, flowctl: Flowctl) -> None:
    out = flowctl(db, "run", f"{flow_file}:add", "-i", "a:=40", "-i", "b:=2", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"id", "created", "workflow", "status", "result", "error", "run_at"}
    assert data["created"] is True
    assert data["status"] == "completed"
    assert data["result"] == 42
    assert data["workflow"] == "add"


def test_run_that_sleeps_exits_zero_and_says_until_when(
    db: str, flow_file: Path, flowctl: Flowctl
) -> None:
    out = flowctl(db, "run", f"{flow_file}:sleepy")
    assert out.returncode == 0, out.stderr
    assert "sleeping until" in out.stdout
    assert "(in 23h59m)" in out.stdout or "(in 1d00h)" in out.stdout
    listed = json.loads(flowctl(db, "ls", "--status", "sleeping", "--json").stdout)
    assert [r["status"] for r in listed] == ["sleeping"]
    run_id = listed[0]["id"]
    shown = json.loads(flowctl(db, "show", run_id[:6], "--json").stdout)
    assert [c["kind"] for c in shown["checkpoints"]] == ["step", "sleep"]
    sleep = shown["checkpoints"][1]
    assert sleep["wake_at"].endswith("Z") and "." in sleep["wake_at"]
    assert shown["run"]["id"] == run_id
    assert {"at", "type"} <= set(shown["timeline"][0])


def test_failing_run_exits_one_with_error(db: str, flow_file: Path, flowctl: Flowctl) -> None:
    out = flowctl(db, "run", f"{flow_file}:boom", "--max-attempts", "1")
    assert out.returncode == 1
    assert "ZeroDivisionError" in out.stderr
    run = json.loads(flowctl(db, "ls", "--json").stdout)[0]
    assert run["status"] == "dead"
    assert run["error"]["type"] == "ZeroDivisionError"
    assert "Traceback" in run["error"]["traceback"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "nope.py:fn"], "does not exist"),
        (["run", "nosuchworkflow"], "unknown workflow 'nosuchworkflow'"),
        (["run", "os:system"], "os:system is a built-in, not a workflow"),
        (["run", ":hello"], "before ':' must come a file or a module"),
        (["run", "json:JSONDecoder"], "json:JSONDecoder is a class, not a function"),
        (["run", "{root}/README.md"], "is not a workflow file: give file.py:function"),
        (["run", "{root}/tests"], "is a folder, not a workflow"),
        (["run", "./no/such/thing"], "'./no/such/thing' does not exist"),
        (["run", "{flow}:add", "-i", "a:={bad"], "must be JSON"),
        (["run", "{flow}:add", "--input", "[1,2]"], "--input must be a JSON object"),
        (["run", "{flow}:add", "--input", "{nope"], "--input is not valid JSON"),
        (["run", "{flow}:add", "-i", "c=3", "-i", "a:=1"], "has no input 'c'"),
        (["run", "{flow}:add"], "needs input 'a'"),
        (["run", "{flow}:add", "-i", "a:=1", "--in", "soon"], "invalid duration 'soon'"),
        (["run", "{flow}:add", "-i", "a:=1", "--timeout", "fast"], "invalid duration 'fast'"),
        (["run", "{flow}:add", "-i", "a:=1", "--deadline", "whenever"], "--deadline 'whenever'"),
        (
            ["run", "{flow}:add", "-i", "a:=1", "--at", "tomorrowish"],
            "--at 'tomorrowish' is not a time",
        ),
        (["run", "{flow}:add", "-i", "novalue"], "use key=value"),
        (["run", "{flow}:add", "-i", "a:=1", "-i", "a=2"], "input 'a' is given twice with -i"),
        (
            ["run", "{flow}:add", "--input", '{"a": 1}', "-i", "a:=2"],
            "input 'a' is given in --input and with -i",
        ),
        (["ls", "--status", "sleepy"], "unknown status 'sleepy'"),
        (["ls", "--limit", "0"], "--limit must be at least 1"),
        (["ls", "--workflow", ""], "--workflow is empty: give a workflow name"),
        (
            ["--db", "mysql://x", "run", "{flow}:add", "-i", "a:=1"],
            "mysql:// URLs are not accepted",
        ),
        (["daemon", "--heartbeat", "0"], "heartbeat must be a positive duration"),
        (["daemon", "--lease", "0s"], "lease must be a positive duration"),
        (["serve", "--log-level", "bogus"], "--log-level 'bogus' is not a level: use one of"),
        (["serve", "--host", " "], "--host is empty"),
        (["show", " "], "a run id is required"),
        (["signal", "--key", "", "replied"], "--key must not be empty"),
        (["ls", "--every", "5s"], "--every goes with --watch"),
        (["show", "zzz", "--all", "--steps", "3"], "give --all, or --steps/--skip to page"),
        (["logs", "zzz", "--step", ""], "--step is empty"),
        (["schedule", "explain", "0 9 * * *", "--tz", ""], "--tz is empty"),
        (["schedule", "show", "nightly", "-n", "0"], "must be at least 1, got 0"),
        (["daemon", "stop", "--until-idle"], "--until-idle goes with a serving daemon"),
        (["signal", "", "go"], "a run id is required"),
        (["ls", "--status", ""], "--status is empty: use one of queued"),
        (["ls", "--status", " , "], "--status is empty"),
        (["ls", "--search", " "], "--search is empty: give text to look for"),
        (["redrive", "--all", "--workflow", ""], "--workflow is empty"),
        (["pause", "--workflow", ""], "--workflow is empty"),
        (["daemon", "--lease", "1s", "--heartbeat", "2s"], "heartbeat (2s) must be shorter"),
        (["run"], "Missing argument 'TARGET'"),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    db: str, flow_file: Path, flowctl: Flowctl, args: list[str], needle: str
) -> None:
    open_store(db).close()  # create the schema so row counts are comparable (`ls` creates nothing)
    before = counts(db)
    given = [a.replace("{flow}", str(flow_file)).replace("{root}", str(ROOT)) for a in args]
    out = flowctl(db, *given)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("flowctl: ")
    assert needle in err
    assert counts(db) == before


@pytest.mark.parametrize("args", [["show", "zzzz"], ["signal", "zzzz", "go"], ["cancel", "zz"]])
def test_unknown_run_is_one_line_exit_1(db: str, flowctl: Flowctl, args: list[str]) -> None:
    open_store(db).close()
    before = counts(db)
    out = flowctl(db, *args)
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == f"flowctl: no run matches {args[1]!r}: give a run id or a unique prefix"
    )
    assert counts(db) == before


def test_non_json_step_result_fails_the_run_clearly(
    db: str, flow_file: Path, flowctl: Flowctl
) -> None:
    out = flowctl(db, "run", f"{flow_file}:bad_result", "--max-attempts", "1")
    assert out.returncode == 1
    assert "not JSON-serialisable" in out.stderr
    rows = read(db, "SELECT state, value FROM journal")
    assert len(rows) == 1 and rows[0][0] == "error"  # recorded as the step's error, never pickled
    assert json.loads(rows[0][1])["type"] == "SerializationError"


def test_naive_datetime_is_rejected(db: str, flow_file: Path, flowctl: Flowctl) -> None:
    out = flowctl(db, "run", f"{flow_file}:naive", "--max-attempts", "1")
    assert out.returncode == 1
    assert "timezone-aware" in out.stderr


def test_flowctl_db_env_is_used(
    tmp_path: Path, db: str, flow_file: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWCTL_DB", db)
    monkeypatch.chdir(tmp_path)
    out = flowctl(None, "run", f"{flow_file}:add", "-i", "a:=1")
    assert out.returncode == 0, out.stderr
    assert counts(db)[0] == 1


def test_idempotency_key_returns_first_run(db: str, flow_file: Path, flowctl: Flowctl) -> None:
    first = json.loads(
        flowctl(
            db, "run", f"{flow_file}:add", "-i", "a:=1", "--key", "k1", "--detach", "--json"
        ).stdout
    )
    second = json.loads(
        flowctl(
            db, "run", f"{flow_file}:add", "-i", "a:=1", "--key", "k1", "--detach", "--json"
        ).stdout
    )
    assert first["id"] == second["id"]
    assert (first["created"], second["created"]) == (True, False)
    assert counts(db)[0] == 1


def test_detach_in_and_at_queue_without_running(db: str, flow_file: Path, flowctl: Flowctl) -> None:
    out = flowctl(db, "run", f"{flow_file}:add", "-i", "a:=1", "--in", "10m", "--json")
    data = json.loads(out.stdout)
    assert data["status"] == "queued"
    out = flowctl(
        db, "run", f"{flow_file}:add", "-i", "a:=1", "--at", "2099-01-01T09:00:00Z", "--json"
    )
    assert json.loads(out.stdout)["run_at"] == "2099-01-01T09:00:00.000000Z"
    assert counts(db)[1] == 0


def test_init_writes_config_and_keeps_an_existing_one(
    tmp_path: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = flowctl(None, "init")
    assert out.returncode == 0, out.stderr
    data = tomllib.loads((tmp_path / "flowctl.toml").read_text())
    assert data["durability"] == "full"
    assert data["db"] == ".flowctl/flowctl.db"
    (tmp_path / "flowctl.toml").write_text('db = "mine.db"\n')  # the user's own settings
    again = flowctl(None, "init")  # the README's "if not done yet": idempotent, exit 0
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"kept existing {tmp_path / 'flowctl.toml'} (--force rewrites it with the defaults)",
        f"created database {tmp_path / 'mine.db'}",
    ]
    assert (tmp_path / "flowctl.toml").read_text() == 'db = "mine.db"\n'
    third = flowctl(None, "init")
    assert (
        third.returncode == 0 and f"using existing database {tmp_path / 'mine.db'}" in third.stdout
    )
    assert flowctl(None, "init", "--force").returncode == 0  # rewrites the defaults
    # the default database now lives next to flowctl.toml
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    flowctl(None, "ls")
    assert (tmp_path / ".flowctl" / "flowctl.db").exists()


def test_bad_config_key_is_named(
    tmp_path: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "flowctl.toml").write_text("concurency = 4\n")
    monkeypatch.chdir(tmp_path)
    out = flowctl(None, "ls")
    assert out.returncode == 2
    assert "unknown key 'concurency'" in out.stderr
    assert "did you mean 'concurrency'" in out.stderr
    assert "flowctl.toml" in out.stderr


def test_a_config_timezone_that_is_no_zone_is_said_at_load(
    tmp_path: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to pass until the first `schedule add` that fell back to it.
    (tmp_path / "flowctl.toml").write_text('timezone = "Mars/Olympus"\n')
    monkeypatch.chdir(tmp_path)
    out = flowctl(None, "ls")
    assert out.returncode == 2
    assert "timezone 'Mars/Olympus' is not a time zone: use an IANA name" in out.stderr
    (tmp_path / "flowctl.toml").write_text('timezone = "Europe/Paris"\n')
    assert "time zone" not in flowctl(None, "ls").stderr  # (no database here: said instead)


def test_a_config_workers_count_out_of_range_is_said_at_load(
    tmp_path: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for bad in ("0", "257", "-1"):
        (tmp_path / "flowctl.toml").write_text(f"workers = {bad}\n")
        out = flowctl(None, "ls")
        assert out.returncode == 2
        assert f"workers must be from 1 to 256, got {bad}" in out.stderr
        assert "Traceback" not in out.stderr
    (tmp_path / "flowctl.toml").write_text('workers = "two"\n')
    assert flowctl(None, "ls").returncode == 2


def test_a_daemon_takes_its_workers_count_from_the_config(tmp_path: Path) -> None:
    (tmp_path / "flowctl.toml").write_text("workers = 3\n")  # no machine's default (1, 2, 4)
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        code = subprocess.run(
            [sys.executable, "-m", "flowctl", "daemon", "--until-idle"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=60,
        ).returncode
    text = log.read_text()
    assert code == 0, text
    assert "workers 3" in text and "supervises 3 worker processes" in text, text
    assert "in 3 worker process(es)" in text


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (4, 4), (64, 4)])
def test_the_default_workers_is_one_per_core_at_most_four(
    monkeypatch: pytest.MonkeyPatch, cores: int, workers: int
) -> None:
    from flowctl import config

    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert config.default_workers() == workers


def test_init_leaves_workers_to_the_machine_it_runs_on(
    tmp_path: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert flowctl(None, "init").returncode == 0
    text = (tmp_path / "flowctl.toml").read_text()
    written = tomllib.loads(text)
    assert "workers" not in written and written["concurrency"] == 64
    assert "# workers = N sets the daemon's worker processes" in text


@pytest.mark.parametrize(
    ("toml", "sqlite", "postgres"), [("", 3, 1), ("workers = 2\n", 2, 2), ("workers = 3\n", 3, 3)]
)
def test_on_postgresql_the_default_is_one_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, sqlite: int, postgres: int
) -> None:
    """Each process holds a pool of connections, so a fleet grows by hosts, not by cores:
    only a file's `workers =` (or --workers) gives a PostgreSQL daemon more than one."""
    from flowctl import config

    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: set(range(3)))
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    if toml:
        (tmp_path / "flowctl.toml").write_text(toml)
    loaded = config.load_config(start=tmp_path)
    for db, expected in ((tmp_path / "f.db", sqlite), ("postgresql://u@h/d", postgres)):
        assert config.daemon_workers(loaded, db) == expected, db


def test_worker_processes_need_the_system_clock(tmp_path: Path) -> None:
    from flowctl.daemon import Daemon, DaemonConfig
    from flowctl.errors import UsageError

    with open_store(tmp_path / "f.db") as store:
        clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
        with pytest.raises(UsageError, match="workers 2 needs the system clock"):
            Daemon(store, clock, DaemonConfig(workers=2))
        Daemon(store, clock, DaemonConfig(workers=1))  # one process: any clock


def test_workflows_lists_and_runs_by_name(
    tmp_path: Path, flow_file: Path, flowctl: Flowctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "flowctl.toml").write_text('workflows = "."\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    listed = flowctl(None, "workflows", "--json")
    names = {w["name"]: w["kind"] for w in json.loads(listed.stdout)}
    assert names["add"] == "python"
    out = flowctl(None, "run", "add", "-i", "a:=5", "--json")
    assert json.loads(out.stdout)["result"] == 6


def test_cancel_signal_redrive_round_trip(db: str, flow_file: Path, flowctl: Flowctl) -> None:
    run_id = json.loads(flowctl(db, "run", f"{flow_file}:sleepy", "--json").stdout)["id"]
    out = flowctl(db, "cancel", run_id, "--reason", "duplicate")
    assert out.returncode == 0
    assert out.stdout.startswith("cancelled")
    again = flowctl(db, "cancel", run_id)
    assert again.returncode == 1 and "already cancelled" in again.stderr
    sig = flowctl(db, "signal", run_id, "go")
    assert sig.returncode == 1 and "cancelled" in sig.stderr
    red = flowctl(db, "redrive", run_id, "--json")
    assert red.returncode == 0
    assert json.loads(red.stdout)[0]["status"] == "queued"
    timeline = [
        e["type"] for e in json.loads(flowctl(db, "show", run_id, "--json").stdout)["timeline"]
    ]
    assert timeline[-2:] == ["cancelled", "redriven"]


def test_every_command_has_help(flowctl: Flowctl) -> None:
    from typer.main import get_command

    group = get_command(cli.app)
    assert group.commands
    for name, cmd in group.commands.items():
        assert cmd.help, f"`flowctl {name}` has no help text"
        out = flowctl(None, name, "--help")
        assert out.returncode == 0, (name, out.stderr)
        assert "Usage:" in out.stdout


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("VALUE", "is a value of type int, not a function"),
        ("Klass", "is a class, not a function"),
        ("no_params", "takes no positional parameter for ctx"),
        ("keyword_only", "takes no positional parameter for ctx"),
        # A plain helper would get the context as its first argument and "complete".
        ("greet", "is not a workflow: decorate it with @workflow"),
    ],
)
def test_a_target_that_cannot_take_ctx_is_refused_before_a_run_exists(
    tmp_path: Path, name: str, needle: str
) -> None:
    from flowctl.errors import TargetError
    from flowctl.runtime.targets import load_target

    path = tmp_path / "handlers.py"
    path.write_text(
        "VALUE = 3\n"
        "class Klass:\n    pass\n"
        "def no_params():\n    pass\n"
        "def keyword_only(*, a=1):\n    pass\n"
        "def good(ctx, a=1):\n    return a\n"
        "def greet(name):\n    return name\n"
        "from flowctl import workflow\n"
        "@workflow\ndef decorated(c, a=1):\n    return a\n"
    )
    with pytest.raises(TargetError) as exc:
        load_target(f"{path}:{name}")
    assert needle in str(exc.value)
    assert f"def {name}(ctx, **input)" in str(exc.value)
    assert load_target(f"{path}:good").name == "good"
    assert load_target(f"{path}:decorated").name == "decorated"  # any name, once decorated


def test_run_of_a_yaml_file_with_a_bad_schedule_block_is_refused(
    db: str, tmp_path: Path, flowctl: Flowctl
) -> None:
    path = tmp_path / "nightly.yaml"
    path.write_text(
        'name: nightly\nschedule:\n  cron: "61 * * * *"\nsteps:\n  - id: a\n    run: echo hi\n'
    )
    open_store(db).close()
    before = counts(db)
    out = flowctl(db, "run", str(path), "--detach")
    assert out.returncode == 2, (out.stdout, out.stderr)
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(
        f"flowctl: {path}:3:9: schedule.cron: invalid cron expression '61 * * * *'"
    )
    assert counts(db) == before
    path.write_text(path.read_text().replace("61 *", "5 *"))
    assert flowctl(db, "run", str(path), "--detach").returncode == 0


def test_show_and_run_print_text_as_itself_and_terminal_controls_as_escapes(
    db: str, tmp_path: Path, flowctl: Flowctl
) -> None:
    path = tmp_path / "echo.py"
    path.write_text(
        "from flowctl import workflow\n\n@workflow\ndef echo(ctx, name=''):\n    return name\n"
    )
    name = "ünï 😀 \u202eevil \x9b2J"  # a bidi override and a C1 CSI: acted on, not shown
    ran = flowctl(db, "run", f"{path}:echo", "--input", json.dumps({"name": name}))
    assert ran.returncode == 0, ran.stderr
    done = ran.stdout.splitlines()[-1]
    assert done.endswith(': "ünï 😀 \\u202eevil \\x9b2J"'), done
    run_id = done.split()[1].rstrip(":")
    shown = flowctl(db, "show", run_id).stdout
    assert 'input     {"name": "ünï 😀 \\u202eevil \\x9b2J"}' in shown
    assert "\u202e" not in shown and "\x9b" not in shown


def test_a_run_refused_for_its_target_or_input_creates_no_database(
    tmp_path: Path, flowctl: Flowctl
) -> None:
    db = tmp_path / "new.db"
    for args in (
        ["run", "examples/none.py:f", "--detach"],
        ["run", "examples/hello.py:hello", "-i", "nme=x", "--wait"],
    ):
        out = flowctl(db, *args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert not list(tmp_path.glob("new.db*")), args
    assert flowctl(db, "run", "examples/hello.py:hello", "--detach").returncode == 0
    assert db.exists()


def test_two_files_naming_one_workflow_are_said_and_the_first_runs(tmp_path: Path) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    for name in ("a.yaml", "b.yaml"):
        (folder / name).write_text(f"name: ping\nsteps:\n  - run: [echo, {name}]\n")
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "workflows"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [line.split()[:3] for line in out.stdout.splitlines()[1:]] == [
        ["ping", "yaml", "workflows/a.yaml"]
    ]
    assert f"{folder / 'b.yaml'} also defines workflow 'ping', which {folder / 'a.yaml'}" in (
        out.stderr
    )


def test_show_ls_and_why_print_a_runs_own_text_inert(
    db: str, tmp_path: Path, flowctl: Flowctl
) -> None:
    # A cancel reason (any HTTP client may set one), an error or a step name is the run's
    # own text: a screen clear or a bidi override in it is printed as its escape.
    path = tmp_path / "flows.py"
    path.write_text(
        "from flowctl import workflow\n\n@workflow\ndef f(ctx):\n"
        "    ctx.step('p\\x1b[2Jq', lambda: 1)\n    ctx.sleep('1h')\n"
    )
    ran = flowctl(db, "run", f"{path}:f", "--detach", "--json")
    run_id = json.loads(ran.stdout)["id"]
    assert flowctl(db, "cancel", run_id, "--reason", "r\x1b[2J\u202e").returncode == 0
    for args in (["show", run_id], ["ls"], ["why", run_id]):
        out = flowctl(db, *args).stdout
        assert "\x1b" not in out and "\u202e" not in out, (args, out)
    assert "r\\x1b[2J\\u202e" in flowctl(db, "show", run_id).stdout


def test_a_workflow_file_that_does_not_parse_is_said_not_silently_dropped(tmp_path: Path) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "edw.py").write_text(
        "from flowctl import workflow\n\n@workflow\ndef edw(ctx):\n    return 1\ndef broken(:\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "workflows"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"},
        timeout=60,
    )
    assert f"warning: skipping {folder / 'edw.py'}: it does not parse (" in out.stderr
    assert "at line 6)" in out.stderr
