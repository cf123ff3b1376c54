"""Commands built when they are used (issue 17, item 4): start-up pays for one command.

Typer turns every command function into a click command (signature, Annotated options,
converters) each time the app runs, tens of ms of CPU for flowctl's ~35 commands, and
`flowctl --help` or `flowctl ls` needs one of them at most. `install()` makes Typer give
each flowctl command as a `LazyCommand`: its name and help, nothing else. `_Group`
(common.py, which imports this module) builds the real one from the same `CommandInfo` the
moment it is looked up to run, complete or show its own help, as a `FlowctlCommand`
(helpfmt.py); the group's command list reads the stubs' help and builds nothing.
What is built is exactly what Typer builds (its own function does it), so options, help and
errors are unchanged; only when differs. Other Typer apps in the process are left alone.

The root's commands are not even imported until used: `register()` records each as a
`Deferred` callback (module:attribute and the line the command list shows), so
`flowctl --help` compiles and runs none of the command modules (flowctl/cli/start.py,
admin.py, ...: about 20 ms of compiling where no bytecode is cached). A `Deferred` that
names a Typer app (`schedule`) becomes that app's group when it is built.
"""

from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperCommand

_OURS = "flowctl.cli."  # commands whose callbacks live here are built lazily
_TYPER_FROM_INFO: list[Any] = []  # Typer's own get_command_from_info, once install() ran


class Deferred:
    """The callback of a command registered by name: where its function (or Typer app) is,
    as `module:attribute`, and the one line the command list shows for it. Its module is
    imported by `load()`, when the command is built."""

    def __init__(self, target: str, short_help: str) -> None:
        self.target = target
        self.short_help = short_help
        self.__module__ = target.partition(":")[0]  # how install()'s hook knows it is ours

    def load(self) -> Any:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # never called by Typer: built first
        return self.load()(*args, **kwargs)


class LazyCommand(TyperCommand):
    """A flowctl command not built yet: its name, help and hidden flag (for the group's
    command list); `build()` makes the real one."""

    def __init__(self, command_info: Any, options: dict[str, Any]) -> None:
        callback = command_info.callback
        name = command_info.name or callback.__name__.lower().replace("_", "-")
        doc: str | None = (
            callback.short_help
            if isinstance(callback, Deferred)
            else command_info.help or inspect.getdoc(callback)
        )
        super().__init__(
            name=name,
            help=inspect.cleandoc(doc) if doc else None,
            short_help=command_info.short_help,
            hidden=command_info.hidden,
            deprecated=command_info.deprecated,
            rich_help_panel=command_info.rich_help_panel,
        )
        self.command_info = command_info
        self.options = options

    def build(self) -> Any:
        from flowctl.cli.helpfmt import FlowctlCommand, polish

        info = self.command_info
        if isinstance(info.callback, Deferred):
            target = info.callback.load()
            if isinstance(target, typer.Typer):
                return _group(target, info, self.options)  # polished by its own _Group
            info = copy.copy(info)
            info.callback = target
        if info.cls in (None, TyperCommand):  # help in panels (cli/panels.py)
            info = copy.copy(info)
            info.cls = FlowctlCommand
        command = _TYPER_FROM_INFO[0](command_info=info, **self.options)
        polish(command)
        return command


def _group(typer_app: Any, info: Any, options: dict[str, Any]) -> Any:
    """The group `app.add_typer(typer_app, name=..., rich_help_panel=...)` would make."""
    from typer.main import get_group_from_info
    from typer.models import TyperInfo

    return get_group_from_info(
        TyperInfo(typer_app, name=info.name, rich_help_panel=info.rich_help_panel),
        suggest_commands=typer_app.suggest_commands,
        **options,
    )


def register(app: Any, commands: Iterable[tuple[str, str, str, str]]) -> None:
    """Add each (name, "module:attribute", short help, panel) to `app` as a Deferred
    command, in order: the command list shows them so, and nothing is imported until one
    is used."""
    from typer.models import CommandInfo

    for name, target, short_help, panel in commands:
        callback = Deferred(target, short_help)
        info = CommandInfo(name=name, callback=callback, rich_help_panel=panel)
        app.registered_commands.append(info)


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
