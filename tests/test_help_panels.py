"""Help in Typer's panel look, drawn by flowctl/cli/panels.py (issue 17, item 3): boxed
Arguments / Options / command panels, text wrapped at spaces only, colour on a terminal
and not one escape code when piped or under NO_COLOR."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli.lazy import build_all
from flowctl.cli.panels import panel, range_words, wants_colour, wrap

FLOWCTL = Path(sys.executable).with_name("flowctl")  # this environment's entry point
BOX = "╭╮╰╯│─"


def _commands() -> Iterator[tuple[list[str], Any]]:
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    yield from walk(build_all(get_command(cli.app)), [])


COMMANDS = list(_commands())
IDS = [" ".join(p) or "flowctl" for p, _ in COMMANDS]


def _help(path: list[str]) -> str:
    """The help as a pipe gets it, 80 cells wide (CliRunner sets Click's FORCED_WIDTH)."""
    result = CliRunner().invoke(cli.app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def _panels(out: str) -> dict[str, list[str]]:
    """Panel title -> its rows' text (borders taken off), in the order drawn."""
    found: dict[str, list[str]] = {}
    rows: list[str] | None = None
    for line in out.splitlines():
        if line.startswith("╭─ "):
            rows = found.setdefault(line[3:].rstrip("─╮ "), [])
        elif line.startswith("│") and rows is not None:
            rows.append(line[2:-2].rstrip())  # a continuation line keeps its indent
        elif line.startswith("╰"):
            rows = None
    return found


def test_root_help_groups_the_commands_in_panels() -> None:
    out = _help([])
    panels = _panels(out)
    titles = ["Options", *dict.fromkeys(panel for *_, panel in cli.COMMANDS)]
    assert list(panels) == titles
    assert "Commands:" not in out and "Options:" not in out  # no plain Click sections left
    listed = [row.split()[0] for t in titles[1:] for row in panels[t] if row[:1] != " "]
    assert listed == [name for name, *_ in cli.COMMANDS]
    assert any(row.startswith("--db PATH|URL ") for row in panels["Options"])


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_help_draws_whole_boxes_at_80_columns(path: list[str], command: Any) -> None:
    out = _help(path)
    boxed = [line for line in out.splitlines() if line and line[0] in BOX]
    assert boxed and all(len(line) == 80 for line in boxed), "a box line is not 80 cells"
    panels = _panels(out)
    assert "Options" in panels and any("-h, --help" in row for row in panels["Options"])
    if any(p.param_type_name == "argument" for p in command.params):
        assert next(iter(panels)) == "Arguments"
    assert "<bool" not in out and not re.search(r"--[\w-]+ (BOOLEAN|bool)\b", out)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_no_help_text_is_cut_inside_a_token_at_80_columns(path: list[str], command: Any) -> None:
    """Every word of every parameter's help and of every example appears whole."""
    out = _help(path)
    words = set(re.sub(f"[{BOX}]", " ", out).split())
    ctx = command.make_context(path[-1] if path else "flowctl", [], resilient_parsing=True)
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        for word in range_words(record[1]).split() if record else []:
            assert word in words, f"{word!r} of {param.name}'s help was cut"
    lines = [line.strip() for line in out.splitlines()]
    examples = (command.help or "").split("Examples:\n", 1)[1:]
    for example in examples[0].split("\n\n", 1)[0].splitlines() if examples else []:
        assert example.strip() in lines, f"example rewrapped: {example.strip()!r}"


def test_a_cron_example_in_an_option_help_stays_whole() -> None:
    """The defect issue 17 names: `--cron "0 9 * * MON-\\n FRI"`, in a narrow terminal."""
    for columns in ("52", "60", "66"):
        out = subprocess.run(
            [str(FLOWCTL), "schedule", "add", "--help"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={**os.environ, "COLUMNS": columns},
        ).stdout
        assert 'MON-FRI".' in out.split(), out
        assert (
            max(len(line) for line in out.splitlines() if line.startswith("│")) == int(columns) - 2
        )


def test_wrap_breaks_at_spaces_only_and_keeps_a_default_together() -> None:
    assert wrap("a MON-FRI b", 6) == ["a", "MON-FRI", "b"]
    assert wrap("Runs at once.  [default: 8, or x]", 20) == ["Runs at once.", "[default: 8, or x]"]
    box = panel("Options", [("--x N", "one two three four five six")], 34, colour=False)
    assert box == [
        "╭─ Options " + "─" * 22 + "╮",
        "│ --x N  one two three four five │",
        "│        six                     │",
        "╰" + "─" * 32 + "╯",
    ]
    narrow = panel("Options", [("--x N", "one two")], 26, colour=False)  # help < 20 cells
    assert narrow[1:3] == ["│ --x N                  │", "│   one two              │"]


# ------------------------------------------------------------------ colour, or none


def _in_terminal(args: list[str], **env: str) -> str:
    """`flowctl ARGS` run in a pseudo-terminal 80 columns wide: what a person sees."""
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "TERM")}
    main, child = pty.openpty()
    os.set_blocking(main, False)
    proc = subprocess.Popen(
        [str(FLOWCTL), *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**clean, "COLUMNS": "80", "TERM": "xterm", **env},
    )
    os.close(child)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(main)
    assert proc.returncode == 0, out
    return out.decode()


def test_a_terminal_gets_colour() -> None:
    out = _in_terminal(["ls", "--help"])
    assert "\x1b[1m\x1b[36m--limit\x1b[0m" in out  # long flag bold cyan
    assert "\x1b[1m\x1b[32m-n\x1b[0m" in out  # short flag bold green
    assert "\x1b[1m\x1b[33mN\x1b[0m" in out  # placeholder bold yellow
    assert "\x1b[2m[default: 50" in out  # default dim


@pytest.mark.parametrize("args", [["--help"], ["ls", "--help"], ["schedule", "add", "-h"]])
def test_no_colour_under_no_color_or_when_piped(args: list[str]) -> None:
    assert "\x1b" not in _in_terminal(args, NO_COLOR="1")
    assert "\x1b" not in _in_terminal(args, TERM="dumb")
    piped = subprocess.run(
        [str(FLOWCTL), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "╭─ Options" in piped and "\x1b" not in piped  # the panels, plain


def test_clicks_colour_setting_wins() -> None:
    class Ctx:
        color: bool | None = True

    assert wants_colour(Ctx())
    Ctx.color = False
    assert not wants_colour(Ctx())


def test_no_help_shows_clicks_range_jargon() -> None:
    """Issue 39: `[x<=1000000]` in help; ranges are said in words, as defaults are."""
    for path, _command in COMMANDS:
        out = _help(path)
        assert not re.search(r"\bx\s*[<>]=?|[<>]=?\s*x\b", out), (path, out)
    assert "[default: 50; at most 1,000,000]" in _help(["ls"])
    daemon = _help(["daemon"])
    assert "[at most 1024]" in daemon and "[1 to 256]" in daemon
    assert "[default: 8765; 0 to 65535]" in _help(["serve"])


def test_range_words_says_each_kind_of_range() -> None:
    assert range_words("How many.  [x<=1000000]") == "How many.  [at most 1,000,000]"
    assert (
        range_words("Port.  [default: 8765; 0<=x<=65535]") == "Port.  [default: 8765; 0 to 65535]"
    )
    assert range_words("Above.  [0<x]") == "Above.  [at least 1]"
    assert range_words("Below.  [x<10]") == "Below.  [at most 9]"
    assert range_words("Box [x] and [default: x]") == "Box [x] and [default: x]"  # not a range
    assert range_words("From.  [x<=1000000; required]") == "From.  [at most 1,000,000; required]"
