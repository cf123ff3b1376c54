"""Help that names things (issue 17, item 3): placeholders, whole examples, defaults.

Typer prints a parameter without a metavar as its Python type (`--db <str>`, `{name}`).
`polish(group)` walks the command tree Typer builds and, where a parameter has no metavar
of its own, gives it one that names the thing: from `PLACEHOLDERS` by option name
(PATH, DURATION, ...), else N for a whole number and TEXT for a string; an argument is
its name in capitals (`RUN`, `[RUN]` when optional). A command's "Example: ..." becomes a
block of its own that Click does not rewrap, so no example is cut mid-token. An explicit
metavar always wins, so a command another module adds is covered without any change here.

The look of Typer's rich help (options and commands in boxed panels, commands grouped,
flags in colour on a terminal) is drawn by flowctl/cli/panels.py, not by Rich. Measured
on 2026-12-01 on the 2-core machine, load average ~8, least CPU of 9 runs through
.venv/bin/flowctl with bytecode cached (the child's user + system time from wait4, as
benchmarks/startup.py measures; its wall times on this loaded machine mostly wait for a core):

    command                       panels.py   rich_markup_mode="rich"   floor: import typer
    flowctl --help                    97 ms       367 ms                    80-87 ms
    flowctl ls --help                133 ms       277 ms
    flowctl schedule add --help      111 ms       240 ms

Typer's rich mode imports Rich and, for the root's command panels, builds every command
(each is asked for its help), which undoes cli/lazy.py. Importing Rich only when help is
printed would still pay its import: `import typer.rich_utils` adds 72 ms to `import typer`
(159 vs 87 ms), so `flowctl --help` would be ~170 ms, over the 120 ms budget. `ls --help`
costs more than the root's because it builds `ls` (its module, its options). So Rich stays off
(rich_markup_mode=None) and the panels are ours: a few ms of string work on Click's own
help records. Reproduce: set rich_markup_mode="rich" in cli/__init__.py and
cli/schedule.py and run benchmarks/startup.py.
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperCommand

# long option -> placeholder; an option not listed gets N (int) or TEXT (str)
PLACEHOLDERS: dict[str, str] = {
    "--db": "PATH|URL",
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
    tells Click not to rewrap the paragraph). An example ends with its paragraph: the
    paragraphs after it follow the block as they were. Already-polished help is left alone."""
    if "\b\nExamples:" in text:
        return text
    head, *examples = _EXAMPLE.split(text)
    if not examples:
        return text
    last, _, tail = examples[-1].partition("\n\n")
    examples[-1] = last
    lines = "\n".join(f"  {' '.join(e.split())}" for e in examples)
    after = f"\n\n{tail.strip()}" if tail.strip() else ""
    return f"{head.rstrip()}\n\n\b\nExamples:\n{lines}{after}"


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


# placeholder -> what TAB offers for it (flowctl/cli/complete.py)
COMPLETERS = {
    "RUN": "run_ids",
    "[RUN]": "run_ids",
    "RUN...": "run_ids",
    "[RUN] NAME": "run_ids",
    "TARGET": "workflow_names",
    "[TARGET...]": "workflow_names",
    "WORKFLOW": "workflow_names",
    "STATUS": "statuses",
}


def _completer(name: str) -> Any:
    """A shell_complete callback that loads flowctl/cli/complete.py only when TAB asks."""

    def complete(ctx: Any, param: Any, incomplete: str) -> Any:
        from flowctl.cli.complete import run_ids, statuses, workflow_names

        chosen = {"run_ids": run_ids, "statuses": statuses, "workflow_names": workflow_names}
        return chosen[name](ctx, param, incomplete)

    return complete


def polish(command: Any) -> None:
    """Give every parameter under `command` a naming placeholder, a shell completion for
    the runs, workflows and statuses it takes, and unwrap its examples."""
    for param in command.params:
        mv = placeholder(param)
        if mv is not None:
            param.metavar = mv
        if param.metavar in COMPLETERS and param._custom_shell_complete is None:
            param._custom_shell_complete = _completer(COMPLETERS[param.metavar])
        if param.param_type_name == "argument" and hasattr(param, "_usage_display_name"):
            param._usage_display_name = _usage_name(param)
            param.display_type_rich = lambda ctx: None  # the row shows `RUN`, not `RUN <str>`
    if command.help:
        command.help = _example_block(command.help)
    for sub in getattr(command, "commands", {}).values():
        polish(sub)


class FlowctlCommand(TyperCommand):
    """flowctl's commands (cli/lazy.py builds each with this class): help in panels."""

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        from flowctl.cli.panels import write_usage  # loaded only when help is printed

        write_usage(self, ctx, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        from flowctl.cli.panels import write_params

        write_params(self, ctx, formatter)
