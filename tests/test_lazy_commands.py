"""Start-up builds only the command it runs (flowctl/cli/lazy.py, issue 17 item 4): the
root's --help lists every command from stand-ins, `flowctl ls` builds `ls` alone, and what
is built is the command Typer would have built."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli.lazy import LazyCommand, build_all

PROBE = """
import json, typer.main
import flowctl.cli
from flowctl.cli.lazy import LazyCommand
group = typer.main.get_command(flowctl.cli.app)
try:
    group.main({argv!r}, prog_name="flowctl", standalone_mode=False)
except BaseException:
    pass
def built(g):
    # a group (schedule) is made with Typer's tree; its own commands are the stand-ins
    return sorted(
        n for n, c in g.commands.items() if not isinstance(c, LazyCommand) and not hasattr(c, "commands")
    )
schedule = group.commands["schedule"]  # a stand-in too until `schedule ...` is used
print(json.dumps([built(group), built(schedule) if hasattr(schedule, "commands") else None]))
"""


def _built_after(argv: list[str]) -> list[list[str] | None]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    built: list[list[str] | None] = json.loads(out.strip().splitlines()[-1])
    return built


@pytest.mark.parametrize(
    ("argv", "root", "schedule"),
    [
        (["--help"], [], None),
        (["ls", "--help"], ["ls"], None),
        (["schedule", "--help"], [], []),
        (["schedule", "ls", "--help"], [], ["ls"]),
    ],
)
def test_only_the_command_used_is_built(
    argv: list[str], root: list[str], schedule: list[str] | None
) -> None:
    assert _built_after(argv) == [root, schedule]


def test_the_command_list_is_the_same_from_stand_ins() -> None:
    listed = CliRunner().invoke(cli.app, ["--help"], env={"COLUMNS": "100"}).output
    # each command is a panel row `│ name  help` (cli/panels.py); option rows start with -
    rows = [line[2:] for line in listed.splitlines() if line.startswith("│ ")]
    names = [row.split()[0] for row in rows if not row.startswith((" ", "-"))]
    group = build_all(get_command(cli.app))
    assert names == list(group.commands)
    for name, command in group.commands.items():
        assert not isinstance(command, LazyCommand)
        assert command.params or name in ("tui", "schedule", "keys", "limits"), (
            name
        )  # its real options


def test_each_listed_line_is_the_first_sentence_of_its_commands_help() -> None:
    """cli/__init__.py's COMMANDS says what `flowctl --help` lists without importing the
    command modules; the line must be what the command itself says."""
    group = build_all(get_command(cli.app))
    assert [name for name, _, _, _ in cli.COMMANDS] == list(group.commands)
    for name, target, line, panel in cli.COMMANDS:
        own = group.commands[name].get_short_help_str(10_000)
        assert line == own, f"COMMANDS line of {name!r} ({target}) should be {own!r}"
        assert group.commands[name].rich_help_panel == panel  # the built one is listed there too
