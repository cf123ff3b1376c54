"""The CLI's help as Typer users expect it (issue 17, item 3): `-h`, shell completion,
placeholders that name the thing, defaults shown, examples kept whole, one meaning per
short flag, `--json` on schedule pause/resume/rm, and `id` on run objects."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli.lazy import build_all
from flowctl.clock import FakeClock
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")


def _commands() -> Iterator[tuple[list[str], Any]]:
    """(path, click command) for every command and group, the root first."""
    root = build_all(get_command(cli.app))  # commands are built when used (cli/lazy.py)

    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    yield from walk(root, [])


PATHS = [path for path, _ in _commands()]


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli.app, [*args, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "flowctl" for p in PATHS])
def test_every_help_names_its_placeholders_and_takes_h(path: list[str]) -> None:
    out = _help(*path)
    short = CliRunner().invoke(cli.app, [*path, "-h"], env={"COLUMNS": "80"})
    assert short.exit_code == 0 and short.output == out
    assert "-h, --help" in out
    # no Python type leaks into a placeholder: <str>, <int range>, <list[str]>, {name}
    assert not re.search(r"<(str|int|float|list|bool|path)\b", out), out
    assert not re.search(r"\{[a-z_]+\}", out.split("\n\n")[0]), out
    # an example is never cut mid-token: each sits whole on one line, a `flowctl ` command
    if "Examples:" in out:
        block = out.split("Examples:\n", 1)[1].split("\n\n", 1)[0]
        lines = [line.strip() for line in block.splitlines()]
        assert lines and all("flowctl " in line for line in lines), block


def test_placeholders_name_the_thing() -> None:
    assert "--db PATH|URL" in _help()
    assert "The database: a SQLite file or a postgresql:// URL" in " ".join(_help().split())
    run = _help("run")
    assert "-i, --arg KEY=VALUE" in run and "--in DURATION" in run
    assert "Usage: root run [OPTIONS] TARGET" in run or " run [OPTIONS] TARGET" in run
    show = _help("show")
    assert " show [OPTIONS] RUN" in show and "\n│ RUN  " in show  # its row in Arguments
    daemon = _help("daemon")
    assert "--lease DURATION" in daemon and "-c, --concurrency N" in daemon
    add = _help("schedule", "add")
    assert "--cron CRON" in add and "--missed skip|latest|all" in add and "--tz ZONE" in add


def test_defaults_are_shown_including_the_daemons_config_defaults() -> None:
    from flowctl.config import DEFAULTS

    daemon = " ".join(_help("daemon").split())
    for key in ("concurrency", "lease", "heartbeat", "grace"):
        assert f"[default: {DEFAULTS[key]}, or `{key}` in flowctl.toml]" in daemon
    assert "[default: 50" in _help("ls")


def test_examples_use_real_looking_ids() -> None:
    out = _help("show")
    example = out.split("Examples:\n", 1)[1].split()[2]
    assert re.fullmatch(r"[0-9a-z]{8,16}", example), example


def test_shell_completion_is_offered_and_prints_a_script(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _help()
    assert "--install-completion" in out and "--show-completion" in out
    # Typer names the shell it finds among this process's parents: a test runner may have
    # none above it, so it is told (a user's shell is always there; tests/
    # test_shell_completion.py runs the real thing under bash).
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    result = CliRunner().invoke(cli.app, ["--show-completion"], prog_name="flowctl")
    assert result.exit_code == 0
    assert "complete -o default -F _flowctl_completion flowctl" in result.output


def _shorts() -> dict[str, set[str]]:
    """short flag -> the long option (its first) each command gives it."""
    found: dict[str, set[str]] = {}
    for _, cmd in _commands():
        for param in cmd.params:
            longs = [o for o in param.opts if o.startswith("--")]
            for opt in param.opts + param.secondary_opts:
                if re.fullmatch(r"-[a-zA-Z]", opt) and longs:
                    found.setdefault(opt, set()).add(longs[0])
    return found


def test_one_meaning_per_short_flag() -> None:
    shorts = _shorts()
    assert shorts["-n"] == {"--limit"}
    assert {k: v for k, v in shorts.items() if len(v) > 1} == {}


# ---------------------------------------------------------------- against a database


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    db = tmp_path / "help.db"
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli.app, ["--db", str(db), *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def test_old_long_options_keep_working(invoke: Any) -> None:
    invoke("schedule", "add", "beat", "--every", "15m", "--tz", "UTC", PING)
    by_count = invoke("schedule", "show", "beat", "--count", "2", "--json").output
    by_limit = invoke("schedule", "show", "beat", "--limit", "2", "--json").output
    by_n = invoke("schedule", "show", "beat", "-n", "2", "--json").output
    assert json.loads(by_count) == json.loads(by_limit) == json.loads(by_n)
    explained = invoke("schedule", "explain", "0 9 * * *", "--tz", "UTC", "--count", "3", "--json")
    assert len(json.loads(explained.output)["fires"]) == 3


def test_schedule_pause_resume_rm_print_json(invoke: Any) -> None:
    invoke("schedule", "add", "beat", "--every", "15m", "--tz", "UTC", PING)
    paused = json.loads(invoke("schedule", "pause", "beat", "--json").output)
    assert paused["name"] == "beat" and paused["paused"] is True
    resumed = json.loads(invoke("schedule", "resume", "beat", "--json").output)
    assert resumed["name"] == "beat" and resumed["paused"] is False
    assert json.loads(invoke("schedule", "rm", "beat", "--json").output) == {
        "name": "beat",
        "removed": True,
    }
    assert json.loads(invoke("schedule", "ls", "--json").output) == []


def test_run_objects_carry_id_and_document_run_id_as_its_alias(invoke: Any) -> None:
    started = json.loads(invoke("run", PING, "--detach", "--json").output)
    listed = json.loads(invoke("ls", "--json").output)
    assert [r["id"] for r in listed] == [started["id"]]
    assert listed[0]["run_id"] == listed[0]["id"]  # the alias, same value
    assert "`run_id`: an alias" in " ".join(_help("ls").split())


def test_typer_is_the_only_cli_library() -> None:
    assert isinstance(cli.app, typer.Typer)
