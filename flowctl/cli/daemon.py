"""`flowctl daemon`: serve this database (claim due runs, wake sleepers, fire schedules,
send notifications) until SIGTERM drains it; `daemon stop` drains the running ones;
`--install/--print/--uninstall` manage its systemd user service.

Only this command configures logging: the daemon's log is its output (its module is
imported only for `flowctl daemon`). flowctl/cli/__init__.py registers it on the app.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flowctl import ops
from flowctl.cli.common import State, _daemon_config, _emit_json, _local, _state
from flowctl.cli.schedule import _sync_at_daemon_start
from flowctl.durations import parse_duration
from flowctl.errors import DatabaseUnavailable, DiskFullError, UsageError

if TYPE_CHECKING:  # the daemon loads when it serves: `daemon --help` and `stop` need none
    from flowctl.daemon import Daemon, DaemonConfig
    from flowctl.store import Store

log = logging.getLogger("flowctl")


def _from_config(key: str) -> str:
    """The default shown for a daemon option that flowctl.toml may set."""
    from flowctl.config import AUTO_WORKERS_MAX, DEFAULTS

    if key == "workers":  # not a constant: it depends on the machine
        shown = f"one per core, at most {AUTO_WORKERS_MAX}: {DEFAULTS[key]} here; 1 on PostgreSQL"
        return f"[default: {shown}; or `{key}` in flowctl.toml]"
    return f"[default: {DEFAULTS[key]}, or `{key}` in flowctl.toml]"


# Its arguments and options, one line each in its signature.
_ACTION = typer.Argument(
    metavar="[stop]",
    help="stop: ask the daemons on this database to drain, and wait for them to exit.",
)
_INSTALL = typer.Option(
    "--install", help="Install and start a systemd user service for this database."
)
_UNINSTALL = typer.Option("--uninstall", help="Stop and remove that service.")
_PRINT = typer.Option("--print", help="Print the systemd unit (with --install: only print).")
_CONCURRENCY = typer.Option(
    "--concurrency",
    "-c",
    max=1024,
    help=f"Runs executed at once.  {_from_config('concurrency')}",
)
_WORKERS = typer.Option(
    "--workers",
    min=1,
    max=256,
    help="Worker processes that execute runs, each with --concurrency of its own and"
    " taking turns to write; the daemon process supervises them (1: the daemon"
    " process alone, which uses one core)."
    f"  {_from_config('workers')}",
)
_THREADS = typer.Option(
    "--threads",
    help="Run handlers on --concurrency threads, not as greenlets on one thread: for"
    " workflows that do slow work outside ctx.step.",
)
_LEASE = typer.Option("--lease", help=f"Lease length.  {_from_config('lease')}")
_HEARTBEAT = typer.Option("--heartbeat", help=f"Heartbeat interval.  {_from_config('heartbeat')}")
_GRACE = typer.Option(
    "--grace", help=f"On SIGTERM, wait this long for running handlers.  {_from_config('grace')}"
)
_UNTIL_IDLE = typer.Option("--until-idle", help="Exit when nothing is running or due.")
_LOG_LEVEL = typer.Option("--log-level", help="debug, info, warning or error.")
_JSON = typer.Option(
    "--json", help="With `stop`, --install or --uninstall: print what was done as JSON."
)


def daemon(
    ctx: typer.Context,
    action: Annotated[str | None, _ACTION] = None,
    install: Annotated[bool, _INSTALL] = False,
    uninstall: Annotated[bool, _UNINSTALL] = False,
    print_unit: Annotated[bool, _PRINT] = False,
    concurrency: Annotated[int | None, _CONCURRENCY] = None,
    workers: Annotated[int | None, _WORKERS] = None,
    threads: Annotated[bool, _THREADS] = False,
    lease: Annotated[str | None, _LEASE] = None,
    heartbeat: Annotated[str | None, _HEARTBEAT] = None,
    grace: Annotated[str | None, _GRACE] = None,
    until_idle: Annotated[bool, _UNTIL_IDLE] = False,
    log_level: Annotated[str, _LOG_LEVEL] = "info",
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Run queued work and wake sleepers on time; SIGTERM/Ctrl-C drains; `daemon stop`
    drains a running one; --install makes it a systemd user service.  Example: flowctl daemon -c 8"""
    st = _state(ctx)
    _check_action(
        action, install=install, print_unit=print_unit, uninstall=uninstall, as_json=as_json
    )
    if action == "stop":
        if until_idle:
            raise UsageError("--until-idle goes with a serving daemon, not `daemon stop`")
        _stop_daemons(st, as_json)
        return
    if install or print_unit or uninstall:
        _service(st, uninstall=uninstall, print_only=print_unit, grace=grace, as_json=as_json)
        return
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise UsageError(f"--log-level {log_level!r}: use debug, info, warning or error")
    if concurrency is not None and concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {concurrency}")
    cfg = _daemon_config(
        st,
        concurrency=concurrency,
        lease=parse_duration(lease).total_seconds() if lease else None,
        heartbeat=parse_duration(heartbeat).total_seconds() if heartbeat else None,
        grace=parse_duration(grace).total_seconds() if grace is not None else None,
        workers=workers,
        batch=False if threads else None,
    )
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    # The pool's own line per dead connection and per failed reconnect: an outage is said
    # once, by the daemon's loop, when it begins and when it ends.
    logging.getLogger("psycopg.pool").setLevel(max(level, logging.ERROR))
    raise typer.Exit(_serve(st, cfg, until_idle=until_idle))


def _check_action(
    action: str | None, *, install: bool, print_unit: bool, uninstall: bool, as_json: bool
) -> None:
    """`stop`, the service options and serving exclude each other; --json goes with the
    first two only."""
    if action is not None and action != "stop":
        raise UsageError(f"flowctl daemon {action!r}: the only action is `stop`")
    if sum((action is not None, install or print_unit, uninstall)) > 1:
        raise UsageError("give one of `stop`, --install/--print or --uninstall")
    if as_json and ((action is None and not install and not uninstall) or print_unit):
        raise UsageError(
            "--json goes with `daemon stop`, --install or --uninstall (a serving daemon"
            " writes its log; --print writes the unit)"
        )


def _serve(st: State, cfg: DaemonConfig, *, until_idle: bool) -> int:
    """Serve the database until drained (or idle, with --until-idle); the exit code.
    Schedules declared in files are synced first; notifications go out beside the loop,
    on their own thread, as this daemon."""
    from flowctl.daemon import Daemon
    from flowctl.daemon.notifier import Notifier

    db = st.db_path
    created = isinstance(db, Path) and not db.exists()
    d = Daemon(_open_when_room(st), st.clock, cfg)
    _log_start(d, cfg, created=created)
    for other in ops.other_live_daemons(st.store, d.owner):
        log.info(
            "daemon pid %d on %s already serves this database; this one shares the work"
            " (each run is claimed by one of them)",
            other.pid,
            other.host,
        )
        break
    _sync_at_daemon_start(st)  # YAML `schedule:` blocks and flowctl.toml [schedules.*]
    served = threading.Event()
    Notifier(d.store, st.clock, st.config.notify(), d.owner).start(served)
    try:
        return d.run_forever(until_idle=until_idle, install_signals=True)
    finally:
        served.set()


def _log_start(d: Daemon, cfg: DaemonConfig, *, created: bool) -> None:
    log.info(
        "daemon %s %s %s (concurrency %d %s, workers %d, lease %gs, heartbeat %gs)",
        d.owner,
        "created a new database at" if created else "on",
        d.store.path,  # a URL's password is not logged
        cfg.concurrency,
        "as greenlets on one thread" if d.batched() else "on threads",
        cfg.workers,
        cfg.lease,
        cfg.heartbeat,
    )
    if cfg.workers > 1:
        log.info(
            "this process supervises %d worker processes, each executing up to %d runs",
            cfg.workers,
            cfg.concurrency,
        )


def _open_when_room(st: State) -> Store:
    """The daemon's database; a full disk or a server away at start-up is waited out (said
    once), as one later is, so a supervisor does not restart the daemon in a loop."""
    from flowctl.daemon.lifecycle import OUTAGE_CAP_S
    from flowctl.daemon.watches import FULL_RETRY

    said = ""
    while True:
        try:
            store = st.open_store(create=True)
            if said:
                log.warning("the database %s again: serving", said)
            return store
        except DiskFullError as e:
            if not said:
                log.warning("%s; nothing committed is lost; retrying every %gs", e, FULL_RETRY)
                said = "has room"
            st.clock.wait(threading.Event(), FULL_RETRY)
        except DatabaseUnavailable as e:
            if not said:
                log.warning("%s; waiting for it, retrying every %gs", e, OUTAGE_CAP_S)
                said = "is reachable"
            st.clock.wait(threading.Event(), OUTAGE_CAP_S)


def _stop_daemons(st: State, as_json: bool) -> None:
    """`flowctl daemon stop`: SIGTERM (the drain) to this database's daemons, then wait.
    Registered daemons that are not running are forgotten and said so; with none live,
    it says so and succeeds."""
    from flowctl.ops.service import STOP_MARGIN, stop_daemons

    grace = _daemon_config(st).grace
    results = stop_daemons(st.store, st.clock, wait=grace + STOP_MARGIN)
    live = [r for r in results if r.live]
    if as_json:
        _emit_json(
            [
                {
                    "pid": r.daemon.pid,
                    "host": r.daemon.host,
                    "live": r.live,
                    "stopped": r.stopped,
                    "note": r.note,
                }
                for r in results
            ]
        )
    else:
        if not live:
            typer.echo(f"no daemon is running on {st.shown_db}")
        for r in results:
            d = r.daemon
            note = r.note
            if not r.live:
                note = f"not running, last seen {_local(d.seen_at)}; its registration is removed"
            typer.echo(f"daemon pid {d.pid} on {d.host}: {note}")
    if not all(r.stopped for r in live):
        raise typer.Exit(1)


def _service(
    st: State, *, uninstall: bool, print_only: bool, grace: str | None, as_json: bool = False
) -> None:
    """`daemon --install/--print/--uninstall`: the systemd user unit of this database."""
    from flowctl.ops import service

    target = st.db_path
    if not isinstance(target, Path):
        raise UsageError(
            "daemon --install/--print/--uninstall write a unit for a SQLite file; for a"
            " database URL write the unit by hand (README: Many machines)"
        )
    db = target.resolve()
    if uninstall:
        report = service.uninstall(db)
        if not as_json:
            typer.echo(f"removed {report.path}")
    else:
        seconds = parse_duration(grace).total_seconds() if grace else _daemon_config(st).grace
        workdir = st.config.root if st.config.path is not None else db.parent
        text = service.unit_text(service.flowctl_argv(), db, workdir, seconds)
        if print_only:
            typer.echo(text, nl=False)
            return
        report = service.install(text, db)
        if not as_json:
            typer.echo(f"wrote {report.path}")
    if as_json:
        _emit_json(
            {
                "unit": str(report.path),
                "removed" if uninstall else "installed": True,
                "ran": [" ".join(argv) for argv in report.ran],
                "notes": report.notes,
            }
        )
        return
    for argv in report.ran:
        typer.echo(f"ran: {' '.join(argv)}")
    for note in report.notes:
        typer.echo(note)
