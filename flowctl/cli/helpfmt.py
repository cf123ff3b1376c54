"""Help that names things (issue 17, item 3): placeholders, whole examples, defaults.

Typer prints a parameter without a metavar as its Python type (`--db <str>`, `{name}`).
`polish(group)` walks the command tree Typer builds and, where a parameter has no metavar
of its own, gives it one that names the thing: from `PLACEHOLDERS` by option name
(PATH, DURATION, ...), else N for a whole number and TEXT for a string; an argument is
its name in capitals (`RUN`, `[RUN]` when optional). A command's "Example: ..." becomes a
block of its own that Click does not rewrap, so no example is cut mid-token. An explicit
metavar always wins, so a command another module adds is covered without any change here.

Rich help (Typer's rich_markup_mode) stays off: measured on 2026-12-01 with commands built
lazily (cli/lazy.py), it took `flowctl --help` from 173 to 390 ms of CPU on the loaded
test machine (plain help before the lazy commands: 253), because it imports Rich and
builds every command to render its panels; the budget is 120 ms on a quiet one. It also
shows flags as `<bool>`. Reproduce: set rich_markup_mode="rich" in cli/__init__.py and run
benchmarks/startup.py.
"""

from __future__ import annotations

import re
from typing import Any

# long option -> placeholder; an option not listed gets N (int) or TEXT (str)
PLACEHOLDERS: dict[str, str] = {
    "--db": "PATH",
    "--lease": "DURATION",
    "--heartbeat": "DURATION",
    "--grace": "DURATION",
    "--jitter": "DURATION",
    "--every": "DURATION",
    "--until": "DURATION",
    "--since": "TIME|DURATION",
    "--from": "TIME",
    "--cron": "CRON",
    "--tz": "ZONE",
    "--workflow": "WORKFLOW",
    "--status": "STATUS",
    "--search": "TEXT",
    "--reason": "TEXT",
    "--data": "JSON",
    "--log-level": "LEVEL",
    "--missed": "skip|latest|all",
    "--overlap": "skip|allow|queue",
    "--gap": "shift|skip",
    "--fold": "first|last|both",
}


def placeholder(param: Any) -> str | None:
    """The metavar `param` should show, or None to leave it as it is (flags, explicit)."""
    if param.metavar is not None or getattr(param, "is_flag", False):
        return None
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is bool:
        return None
    if param.param_type_name == "argument":
        name = str(param.name).upper()
        return name if param.required else f"[{name}]"
    longs = [o for o in param.opts if o.startswith("--")]
    for opt in longs:
        if opt in PLACEHOLDERS:
            return PLACEHOLDERS[opt]
    return "N" if annotation is int else "TEXT"


_EXAMPLE = re.compile(r"\s+Examples?:\s+")


def _example_block(text: str) -> str:
    """'Say what.  Example: flowctl x' -> the example on its own unwrapped lines ("\\b"
    tells Click not to rewrap the paragraph). Already-polished help is left alone."""
    if "\b\nExamples:" in text:
        return text
    head, *examples = _EXAMPLE.split(text)
    if not examples:
        return text
    lines = "\n".join(f"  {' '.join(e.split())}" for e in examples)
    return f"{head.rstrip()}\n\n\b\nExamples:\n{lines}"


def _usage_name(param: Any) -> Any:
    """Typer 0.29 writes a required argument as `{name}` in the usage line; Click and
    every man page write `NAME`, and `[NAME]` when it may be left out."""

    def usage() -> str:
        name = str(param.metavar or param.name)
        if not param.required and not name.startswith("["):
            name = f"[{name}]"
        many = param.nargs != 1 and "..." not in name  # FILE... says so already
        return name + ("..." if many else "")

    return usage


def polish(command: Any) -> None:
    """Give every parameter under `command` a naming placeholder and unwrap its examples."""
    for param in command.params:
        mv = placeholder(param)
        if mv is not None:
            param.metavar = mv
        if param.param_type_name == "argument" and hasattr(param, "_usage_display_name"):
            param._usage_display_name = _usage_name(param)
            param.display_type_rich = lambda ctx: None  # the row shows `RUN`, not `RUN <str>`
    if command.help:
        command.help = _example_block(command.help)
    for sub in getattr(command, "commands", {}).values():
        polish(sub)
