"""Help in Typer's panel look without Rich (issue 17, item 3): boxed sections.

`flowctl --help` and every command's help keep Click's usage line and description (its
Examples block stays outside the boxes, unwrapped), then draw the parameters and commands
in panels like Typer's rich help: "Arguments", "Options" (or the `rich_help_panel` a
parameter names), and the commands grouped by their `rich_help_panel` ("Runs", ...).
The rows are Click's own help records (`get_help_record`), so placeholders, defaults and
"[required]" read exactly as before; only the layout and colour are ours. Help text wraps
at spaces only, never inside a token (a cron field `MON-FRI` stays whole).

Colour (long flags cyan, short flags green, placeholders yellow, defaults dim, like
Typer's) only when help goes to a terminal and NO_COLOR is unset (https://no-color.org),
or when Click is told `color=True`; otherwise there is no escape code at all. Why not Rich
itself: see flowctl/cli/helpfmt.py.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

PAD = 1  # spaces between a border and the text
GAP = 2  # spaces between a row's two columns
MAX_FIRST = 32  # a first column wider than this puts its help on the next line
MIN_HELP = 20  # ... and so does one that would leave the help fewer cells than this

_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"
_CYAN, _GREEN, _YELLOW, _RED = "\x1b[36m", "\x1b[32m", "\x1b[33m", "\x1b[31m"
_TOKEN = re.compile(r"\S+")
_NBSP = "\x00"  # a space wrap() must not break at (never in help text itself)
_EXTRA = re.compile(r"\[(?:default|required|env var|at most|at least|-?\d[\d,]* to )[^\]]*\]")


def wants_colour(ctx: Any) -> bool:
    """Colour only for a person at a terminal: Click's explicit `color` wins, then
    NO_COLOR (any value) and TERM=dumb say no, then stdout must be a terminal."""
    explicit = getattr(ctx, "color", None)
    if explicit is not None:
        return bool(explicit)
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


def _paint(text: str, *styles: str, colour: bool) -> str:
    return "".join(styles) + text + _RESET if colour and text else text


def _paint_opts(opts: str, colour: bool) -> str:
    """'-i, --arg KEY=VALUE' with long flags cyan, short flags green, placeholders yellow."""
    if not colour:
        return opts

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        word, comma = (token[:-1], ",") if token.endswith(",") else (token, "")
        if word.startswith("--"):
            style = _CYAN
        elif word.startswith("-") and len(word) > 1:
            style = _GREEN
        elif word == "/":
            return token
        else:
            style = _YELLOW
        return _paint(word, _BOLD, style, colour=True) + comma

    return _TOKEN.sub(one, opts)


def _paint_help(line: str, colour: bool) -> str:
    """Defaults and env vars dim, [required] red: the rest of a help line as it is."""
    if not colour:
        return line

    def one(match: re.Match[str]) -> str:
        text = match.group(0)
        style = _RED if text.startswith("[required") else _DIM
        return _paint(text, style, colour=True)

    return _EXTRA.sub(one, line)


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells, broken at spaces only: a token longer than
    the width stands alone on its line rather than being cut. A "[default: ...]" that fits
    on a line is kept on one."""

    def keep(match: re.Match[str]) -> str:
        extra = match.group(0)
        return extra.replace(" ", _NBSP) if len(extra) <= width else extra

    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        lines += textwrap.wrap(
            _EXTRA.sub(keep, paragraph),
            max(width, 1),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [""]
    return [line.replace(_NBSP, " ") for line in lines]


def panel(
    title: str,
    rows: Sequence[tuple[str, str]],
    width: int,
    *,
    colour: bool,
    first: str = "opts",
) -> list[str]:
    """A box `width` cells wide titled `title`, one row per (first column, help); `first`
    says how the first column is painted: "opts" (flags) or "name" (a command's)."""
    inner = width - 2 - 2 * PAD
    widest = max((len(a) for a, _ in rows), default=0)
    first_width = max(min(widest, MAX_FIRST, inner - GAP - MIN_HELP), 0)
    indent = first_width + GAP
    help_width = inner - indent

    def border(text: str) -> str:
        return _paint(text, _DIM, colour=colour)

    def row(text: str, cells: int) -> str:  # `text` shows `cells` cells: pad it to the box
        return (
            f"{border('│')}{' ' * PAD}{text}{' ' * max(inner - cells, 0)}{' ' * PAD}{border('│')}"
        )

    dashes = "─" * max(width - 5 - len(title), 0)
    out = [border("╭─ ") + _paint(title, _BOLD, colour=colour) + border(f" {dashes}╮")]
    for first_text, help_text in rows:
        lines = wrap(help_text, help_width)
        if first == "opts":
            left = _paint_opts(first_text, colour)
        else:
            left = _paint(first_text, _BOLD, _CYAN, colour=colour)
        if len(first_text) > first_width:  # too wide: its help starts on the next line
            out.append(row(left, len(first_text)))
        else:
            line = lines.pop(0)
            gap = " " * (indent - len(first_text))
            out.append(row(left + gap + _paint_help(line, colour), indent + len(line)))
        for line in lines:
            out.append(row(" " * indent + _paint_help(line, colour), indent + len(line)))
    out.append(border("╰" + "─" * (width - 2) + "╯"))
    return out


def _grouped(
    items: Iterable[tuple[str | None, tuple[str, str]]], default: str
) -> dict[str, list[tuple[str, str]]]:
    """Rows by panel title, panels in the order they first appear."""
    panels: dict[str, list[tuple[str, str]]] = {}
    for title, row in items:
        panels.setdefault(title or default, []).append(row)
    return panels


_RANGE = re.compile(r"(?:(-?\d+)(<=?))?x(?:(<=?)(-?\d+))?")


def _number(n: int) -> str:
    """1,000,000 but 65535: separators where the digits are too many to count at a glance."""
    return f"{n:,}" if abs(n) >= 1_000_000 else str(n)


def range_words(help_text: str) -> str:
    """Click's range suffix in words, as the rest of the help speaks: `[x<=1000000]` ->
    `[at most 1,000,000]`, `[1<=x<=256]` -> `[1 to 256]`, `[x>=1]`-style open ends too."""

    def words(match: re.Match[str]) -> str:
        low, low_op, high_op, high = match.groups()
        if low is None and high is None:
            return match.group(0)
        lo = None if low is None else _number(int(low) + (low_op == "<"))
        hi = None if high is None else _number(int(high) - (high_op == "<"))
        if lo is not None and hi is not None:
            return f"{lo} to {hi}"
        return f"at least {lo}" if lo is not None else f"at most {hi}"

    def bracket(match: re.Match[str]) -> str:
        parts = [
            _RANGE.sub(words, p) if _RANGE.fullmatch(p) else p for p in match.group(1).split("; ")
        ]
        return "[" + "; ".join(parts) + "]"

    return re.sub(r"\[([^\[\]]*x[^\[\]]*)\]$", bracket, help_text)


def write_params(command: Any, ctx: Any, formatter: Any) -> None:
    """The Arguments panel, then the Options panels (by each parameter's rich_help_panel)."""
    colour = wants_colour(ctx)
    arguments: list[tuple[str | None, tuple[str, str]]] = []
    options: list[tuple[str | None, tuple[str, str]]] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        title = getattr(param, "rich_help_panel", None)
        record = (record[0], range_words(record[1]))
        (arguments if param.param_type_name == "argument" else options).append((title, record))
    panels = _grouped(arguments, "Arguments")
    for title, rows in _grouped(options, "Options").items():
        panels.setdefault(title, []).extend(rows)  # an option may join an argument's panel
    for title, rows in panels.items():
        _write_panel(formatter, title, rows, colour, "opts")


def write_commands(group: Any, ctx: Any, formatter: Any) -> None:
    """The commands in panels by their rich_help_panel, each with its whole first sentence
    (wrapped, not cut). Reads the stand-ins' help: builds nothing (cli/lazy.py)."""
    colour = wants_colour(ctx)
    items = [
        (getattr(c, "rich_help_panel", None), (name, c.get_short_help_str(10_000)))
        for name, c in group.commands.items()
        if not c.hidden
    ]
    for title, rows in _grouped(items, "Commands").items():
        _write_panel(formatter, title, rows, colour, "name")


def _write_panel(
    formatter: Any, title: str, rows: list[tuple[str, str]], colour: bool, first: str
) -> None:
    """Panels stack with no blank line between them, as Typer's do; one before the first."""
    if not (formatter.buffer and "╯" in formatter.buffer[-1]):
        formatter.write_paragraph()
    for line in panel(title, rows, formatter.width, colour=colour, first=first):
        formatter.write(line + "\n")


def write_usage(command: Any, ctx: Any, formatter: Any) -> None:
    """Click's usage line, with "Usage:" painted (Click measures it without the codes)."""
    prefix = _paint("Usage:", _BOLD, _YELLOW, colour=wants_colour(ctx)) + " "
    formatter.write_usage(ctx.command_path, " ".join(command.collect_usage_pieces(ctx)), prefix)
