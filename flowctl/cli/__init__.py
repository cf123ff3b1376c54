"""The `flowctl` command: parse -> ops -> render. Builds the app, registers the commands
(flowctl/cli/start.py, listing.py, show.py, actions.py, admin.py, daemon.py, schedule.py,
...) by name in the order `flowctl --help` lists them (COMMANDS: a module is imported only
when its command is used, cli/lazy.py), and holds `main`. With `_Group` (flowctl/cli/common.py) this
is the one place errors become exit codes.

Annotations are evaluated when the module loads (no `from __future__ import annotations`):
Typer reads the root callback's signature on every start, and a string annotation would be
compiled then, each time."""

import sys
from typing import Annotated, Any

import typer

try:  # typer >= 0.26 ships its own copy of click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exc  # type: ignore[no-redef]

from flowctl.cli import coerce, lazy
from flowctl.cli.common import State, _Group, said
from flowctl.clock import SystemClock
from flowctl.errors import FlowctlError
from flowctl.limits import clip_middle, is_utf8, one_line, shown_bytes

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
            "--db",
            help="The database: a SQLite file or a postgresql:// URL (default: FLOWCTL_DB,"
            " flowctl.toml, XDG state dir).",
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = State(db, SystemClock())  # looked up here, so tests can swap cli.SystemClock
    ctx.call_on_close(ctx.obj.close)


# Every command: its name, where it is (module:attribute; `schedule` is a Typer app), the
# line `flowctl --help` lists for it (the first sentence of its own help: tests/
# test_lazy_commands.py checks they agree) and the panel it is listed in, panels in this
# order. Registered by name, so a command's module is imported only when that command is
# used: `flowctl --help` imports none of them.
COMMANDS: tuple[tuple[str, str, str, str], ...] = (
    (
        "init",
        "flowctl.cli.admin:init",
        "Create flowctl.toml here with the documented defaults, and its database.",
        "Project",
    ),
    (
        "workflows",
        "flowctl.cli.admin:workflows",
        "List the workflows found in the workflows folder.",
        "Project",
    ),
    (
        "validate",
        "flowctl.cli.admin:validate",
        "Check YAML workflows; every mistake with file:line:column.",
        "Project",
    ),
    ("run", "flowctl.cli.start:run", "Start a workflow run.", "Runs"),
    ("ls", "flowctl.cli.listing:ls", "List runs, newest first.", "Runs"),
    (
        "show",
        "flowctl.cli.show:show",
        "Show one run: header, checkpoints by call index, timeline.",
        "Runs",
    ),
    (
        "why",
        "flowctl.cli.show:why",
        "Say in one line why a run is not running (sleeping until T, no daemon, paused …).",
        "Runs",
    ),
    (
        "wait",
        "flowctl.cli.start:wait",
        "Wait until runs end (a daemon or another `run --wait` runs them); say each as it ends.",
        "Runs",
    ),
    (
        "logs",
        "flowctl.cli.maintenance:logs",
        "What a run's steps printed (stdout, stderr, logging), in order with step and time.",
        "Runs",
    ),
    (
        "signal",
        "flowctl.cli.actions:send_signal",
        "Send a signal to a run, by id or by key.",
        "Act on runs",
    ),
    (
        "cancel",
        "flowctl.cli.actions:cancel",
        "Cancel a run; a running one is told at its next heartbeat.",
        "Act on runs",
    ),
    (
        "redrive",
        "flowctl.cli.actions:redrive",
        "Give a dead or cancelled run a fresh attempt budget, keeping its checkpoints and its deadline; one past its deadline needs --deadline or --no-deadline (--all: every dead run).",
        "Act on runs",
    ),
    (
        "fork",
        "flowctl.cli.start:fork",
        "Start a new run of the same workflow from a call index of an earlier one; the original is left as it was.",
        "Act on runs",
    ),
    (
        "rerun",
        "flowctl.cli.start:rerun",
        "Start the same workflow again with the same input (a fork from 0).",
        "Act on runs",
    ),
    (
        "pause",
        "flowctl.cli.actions:pause",
        "Pause a run: never claimed until resumed; its deadline still runs.",
        "Act on runs",
    ),
    (
        "resume",
        "flowctl.cli.actions:resume",
        "Resume a paused run: due at once if its wake passed, else at its wake.",
        "Act on runs",
    ),
    (
        "wake",
        "flowctl.cli.actions:wake",
        "End a sleep early (recorded as an operator action).",
        "Act on runs",
    ),
    (
        "schedule",
        "flowctl.cli.schedule:schedule_app",
        "Cron and interval schedules: each fire starts one run, exactly once.",
        "Schedules",
    ),
    (
        "agenda",
        "flowctl.cli.schedule:agenda",
        "Every future wake, start, retry, timeout, deadline and schedule fire, in time order.",
        "Schedules",
    ),
    (
        "limits",
        "flowctl.cli.limits:limits_app",
        "Named limits that steps share across runs, workflows and daemons.",
        "Schedules",
    ),
    (
        "daemon",
        "flowctl.cli.daemon:daemon",
        "Run queued work and wake sleepers on time; SIGTERM/Ctrl-C drains; `daemon stop` drains a running one; --install makes it a systemd user service.",
        "Daemon",
    ),
    (
        "status",
        "flowctl.cli.admin:status",
        "Is a daemon running on this database; run counts; wake lateness.",
        "Daemon",
    ),
    (
        "tui",
        "flowctl.cli.admin:tui",
        "Live view of sleeping, running and dead-lettered runs.",
        "Daemon",
    ),
    (
        "serve",
        "flowctl.cli.serve:serve",
        "Serve the JSON HTTP API; needs FLOWCTL_TOKEN or [serve] token.",
        "Daemon",
    ),
    (
        "check",
        "flowctl.cli.maintenance:check",
        "Before a deploy: replay every unfinished run against the code on disk (nothing runs, nothing is written); exit 1 if any would break.",
        "Maintenance",
    ),
    (
        "copy",
        "flowctl.cli.admin:copy",
        "Copy every run, journal entry, event, signal, published value and schedule to another database, SQLite or PostgreSQL, keeping deadlines, fences and ids.",
        "Maintenance",
    ),
    (
        "prune",
        "flowctl.cli.maintenance:prune",
        "Delete finished runs (journal, timeline, signals, output, published values) that ended before the cutoff; never a run that is not finished.",
        "Maintenance",
    ),
    (
        "vacuum",
        "flowctl.cli.maintenance:vacuum",
        "Give the space of deleted runs back to the filesystem (VACUUM; writers wait while it runs).",
        "Maintenance",
    ),
    (
        "replicate",
        "flowctl.cli.replica:replicate",
        "Keep a continuous replica of the SQLite database at DEST with Litestream (a child process) until stopped; beside a daemon or on its own.",
        "Maintenance",
    ),
    (
        "restore",
        "flowctl.cli.replica:restore",
        "Write a database from the replica at DEST to PATH, checked with PRAGMA integrity_check.",
        "Maintenance",
    ),
    (
        "keys",
        "flowctl.cli.keys:keys_app",
        "Encryption keys: values are sealed with FLOWCTL_KEY_FILE (or key_file in flowctl.toml).",
        "Maintenance",
    ),
    (
        "backup",
        "flowctl.cli.maintenance:backup",
        "A consistent copy of the database while daemons write, checked with PRAGMA integrity_check; the copy is a working database.",
        "Maintenance",
    ),
)
lazy.register(app, COMMANDS)


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
        typer.echo(
            f"flowctl: {clip_middle(one_line(e.format_message()))} (see `{cmd} --help`)", err=True
        )
        sys.exit(2)
    except _EXITS as e:
        sys.exit(e.exit_code)
    except _ABORTS:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except FlowctlError as e:
        typer.echo(f"flowctl: {said(e)}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
