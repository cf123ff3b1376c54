"""Commands built when they are used (issue 17, item 4): start-up pays for one command.

Typer turns every command function into a click command (signature, Annotated options,
converters) each time the app runs, tens of ms of CPU for flowctl's ~35 commands, and
`flowctl --help` or `flowctl ls` needs one of them at most. `install()` makes Typer give
each flowctl command as a `LazyCommand`: its name and help, nothing else. `_Group` (common.py)
builds the real one from the same `CommandInfo` the moment it is looked up to run, complete
or show its own help; the group's command list reads the stubs' help and builds nothing.
What is built is exactly what Typer builds (its own function does it), so options, help and
errors are unchanged; only when differs. Other Typer apps in the process are left alone.
"""

from __future__ import annotations

import inspect
from typing import Any

from typer.core import TyperCommand

_OURS = "flowctl.cli."  # commands whose callbacks live here are built lazily
_TYPER_FROM_INFO: list[Any] = []  # Typer's own get_command_from_info, once install() ran


class LazyCommand(TyperCommand):
    """A flowctl command not built yet: its name, help and hidden flag (for the group's
    command list); `build()` makes the real one."""

    def __init__(self, command_info: Any, options: dict[str, Any]) -> None:
        callback = command_info.callback
        name = command_info.name or callback.__name__.lower().replace("_", "-")
        doc = command_info.help or inspect.getdoc(callback)
        super().__init__(
            name=name,
            help=inspect.cleandoc(doc) if doc else None,
            short_help=command_info.short_help,
            hidden=command_info.hidden,
            deprecated=command_info.deprecated,
        )
        self.command_info = command_info
        self.options = options

    def build(self) -> Any:
        from flowctl.cli.helpfmt import polish

        command = _TYPER_FROM_INFO[0](command_info=self.command_info, **self.options)
        polish(command)
        return command


def install() -> None:
    """Have Typer stand LazyCommands in for flowctl's commands. Idempotent."""
    import typer.main

    main: Any = typer.main  # get_command_from_info is Typer's name for this step
    if getattr(main.get_command_from_info, "_flowctl", False):
        return
    typers = main.get_command_from_info

    def from_info(command_info: Any, **options: Any) -> Any:
        module = getattr(command_info.callback, "__module__", "") or ""
        if module.startswith(_OURS):
            return LazyCommand(command_info, options)
        return typers(command_info, **options)

    from_info._flowctl = True  # type: ignore[attr-defined]
    _TYPER_FROM_INFO.append(typers)
    main.get_command_from_info = from_info


def resolve(commands: Any, name: str) -> Any:
    """commands[name], built (and kept) if it was a stand-in; None if there is none."""
    command = commands.get(name)
    if isinstance(command, LazyCommand):
        command = commands[name] = command.build()
    return command


def build_all(command: Any) -> Any:
    """Build every stand-in under `command` (tests walk the whole tree). Returns it."""
    subs = getattr(command, "commands", None)
    for name in list(subs or ()):
        build_all(resolve(subs, name))
    return command
