"""`--json` on every command that changes or lists something (issue 17, item 3): a walk of
the Typer command tree, with the few exclusions named and explained, and the new shapes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli.lazy import build_all
from flowctl.clock import FakeClock
from tests.conftest import ROOT

PING = str(ROOT / "workflows" / "ping.yaml")

# Commands without --json, each for a reason a script would agree with.
NO_JSON = {
    "serve": "a long-running HTTP server: its API is JSON; the command prints only its log",
    "tui": "an interactive screen, nothing to print",
    "replicate": "a long-running child process (Litestream): it prints only its log",
}


def _leaf_commands() -> Iterator[tuple[str, Any]]:
    """('schedule add', click command) for every command that is not a group."""

    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            yield " ".join(path), cmd
            return
        for name, sub in sorted(subs.items()):
            yield from walk(sub, [*path, name])

    yield from walk(build_all(get_command(cli.app)), [])  # built: stand-ins have no options


LEAVES = dict(_leaf_commands())


def test_the_walk_sees_the_commands() -> None:
    assert {"run", "ls", "wait", "init", "copy", "schedule add", "agenda"} <= set(LEAVES)
    assert set(NO_JSON) <= set(LEAVES)  # an exclusion names a command that exists


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_every_command_offers_json_unless_excluded(path: str) -> None:
    opts = {o for p in LEAVES[path].params for o in p.opts}
    if path in NO_JSON:
        assert "--json" not in opts, f"{path} has --json now: drop it from NO_JSON"
    else:
        assert "--json" in opts, f"flowctl {path} has no --json"


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, list(args))
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def test_init_json_says_what_it_wrote(invoke: Any, tmp_path: Path) -> None:
    # SQLite only (no --db): init creates the project's default database, a SQLite file
    data = json.loads(invoke("init", "--example", "--json").stdout)
    folder = tmp_path / "project"
    assert data["config"] == str(folder / "flowctl.toml") and data["database_created"] is True
    assert Path(data["database"]).exists()
    assert data["samples"] and all(Path(p).is_file() for p in data["samples"])
    assert data["next"].startswith("flowctl run ")


def test_copy_json_counts_the_rows_per_table(invoke: Any, tmp_path: Path, db: str) -> None:
    dest = tmp_path / "b.db"  # from the database under test into a new SQLite file
    invoke("--db", db, "run", PING, "--detach")
    data = json.loads(invoke("copy", db, str(dest), "--json").stdout)
    assert data["copied"]["runs"] == 1 and data["to"] == str(dest)
    assert json.loads(invoke("--db", str(dest), "ls", "--json").stdout)[0]["workflow"] == "ping"


def test_daemon_json_is_for_its_one_shot_actions(invoke: Any, db: str) -> None:
    invoke("--db", db, "init")
    assert json.loads(invoke("--db", db, "daemon", "stop", "--json").stdout) == []
    serving = invoke("--db", db, "daemon", "--json", code=2)
    assert serving.stderr.startswith("flowctl: --json goes with `daemon stop`")
    assert serving.stderr.count("\n") == 1 and "Traceback" not in serving.output
