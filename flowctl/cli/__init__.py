"""The `flowctl` command: parse -> ops -> render. Builds the app, registers the commands
(flowctl/cli/start.py, listing.py, show.py, actions.py, admin.py, schedule.py, ...) in the order `flowctl --help` lists them, and
holds `main`. With `_Group` (flowctl/cli/common.py) this is the one place errors become
exit codes."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

try:  # typer >= 0.26 ships its own copy of click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exc  # type: ignore[no-redef]

from flowctl.cli import actions, admin, coerce, lazy, listing, maintenance, show, start
from flowctl.cli.common import State, _Group
from flowctl.cli.schedule import agenda, schedule_app
from flowctl.cli.serve import serve
from flowctl.clock import SystemClock
from flowctl.errors import FlowctlError
from flowctl.limits import is_utf8, one_line, shown_bytes

coerce.install()  # before any command is parsed: keeps pydantic off the start-up path
lazy.install()  # each command is built when it is used, not all of them on every start

app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,  # Rich help costs its import on every --help: see helpfmt.py
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    help="Durable workflows on one machine: one command, one SQLite file."
    "  Example: flowctl init --example  Example: flowctl run onboarding -i user=42"
    "  Example: flowctl ls --status sleeping  Example: flowctl daemon",
)


def _version(value: bool) -> None:
    if value:
        from flowctl import __version__

        typer.echo(f"flowctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="SQLite file to use (default: FLOWCTL_DB, flowctl.toml, XDG state dir)."
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = State(db, SystemClock())  # looked up here, so tests can swap cli.SystemClock
    ctx.call_on_close(ctx.obj.close)


app.command()(admin.init)
app.command()(admin.workflows)
app.command()(start.run)
app.command("ls")(listing.ls)
app.command()(show.show)
app.command()(show.why)
app.command("signal")(actions.send_signal)
app.command()(actions.cancel)
app.command()(actions.redrive)
app.command()(start.fork)
app.command()(start.rerun)
app.command()(start.wait)
app.command()(actions.pause)
app.command()(actions.resume)
app.command()(actions.wake)
app.command()(admin.daemon)
app.command()(admin.status)
app.command("serve")(serve)
app.command()(admin.copy)
app.command()(maintenance.check)
app.command()(maintenance.logs)
app.command()(maintenance.prune)
app.command()(maintenance.vacuum)
app.command()(maintenance.backup)
app.command()(admin.validate)
app.command()(admin.tui)
app.command()(agenda)
app.add_typer(schedule_app, name="schedule")


# typer >= 0.26 raises its own Exit/Abort; older versions raise click's.
_EXITS: tuple[type[Any], ...] = (typer.Exit, getattr(click_exc, "Exit", typer.Exit))
_ABORTS: tuple[type[BaseException], ...] = (typer.Abort, getattr(click_exc, "Abort", typer.Abort))


def main() -> None:
    """Entry point, and the boundary no input crosses as a traceback: arguments that are
    not UTF-8 and click's usage errors become one line on stderr with exit code 2."""
    for arg in sys.argv[1:]:
        if not is_utf8(arg):
            typer.echo(
                f"flowctl: argument '{one_line(shown_bytes(arg))}' is not valid UTF-8; give UTF-8 text",
                err=True,
            )
            sys.exit(2)
    try:
        rv = app(standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else str(e))
        sys.exit(0)
    except click_exc.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "flowctl"
        typer.echo(f"flowctl: {one_line(e.format_message())} (see `{cmd} --help`)", err=True)
        sys.exit(2)
    except _EXITS as e:
        sys.exit(e.exit_code)
    except _ABORTS:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except FlowctlError as e:
        typer.echo(f"flowctl: {one_line(str(e))}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
