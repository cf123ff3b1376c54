"""The commands around the runs: `flowctl init`, `workflows`, `daemon`, `status`,
`validate` and `tui`: parse -> flowctl.ops (or the daemon, or the TUI) -> render.

flowctl/cli/__init__.py registers them on the app, in the order `flowctl --help` lists them.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flowctl import ops
from flowctl.cli.common import (
    State,
    _daemon_config,
    _emit_json,
    _local,
    _state,
    _table,
)
from flowctl.cli.schedule import _sync_at_daemon_start
from flowctl.durations import parse_duration
from flowctl.errors import FlowctlError, UsageError
from flowctl.limits import ROOM_RESERVE, one_line

if TYPE_CHECKING:
    from flowctl.store import Store

# ---------------------------------------------------------------------------
# init / workflows


def init(
    ctx: typer.Context,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing flowctl.toml (and samples).")
    ] = False,
    example: Annotated[
        bool,
        typer.Option("--example", help="Also write sample workflows into workflows/."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what was written as one JSON object.")
    ] = False,
) -> None:
    """Create flowctl.toml here with the documented defaults, and its database.  Example: flowctl init --example"""
    from flowctl import starter
    from flowctl.config import DEFAULTS, write_default_config

    here = Path.cwd()
    samples = here / str(DEFAULTS["workflows"])  # the folder the new flowctl.toml names
    if example:
        starter.check_free(samples, force=force)  # before anything is written
    default_db = here / str(DEFAULTS["db"])
    if default_db.is_dir() and not _state(ctx).db_chosen:
        raise UsageError(
            f"{default_db} is a folder: flowctl.toml's database would be there;"
            " move the folder away, then run init again"
        )
    path = write_default_config(here, force=force)

    def say(text: str) -> None:
        if not as_json:  # with --json, stdout is the one JSON document
            typer.echo(text)

    say(f"wrote {path}")
    st = _state(ctx)  # its config is read now, so the database is the one flowctl.toml names
    db = st.db_path
    existed = isinstance(db, str) or db.exists()  # a server's database exists before us
    store = st.open_store(create=True)
    say(f"{'using existing' if existed else 'created'} database {store.path}")
    written = starter.write_samples(samples, force=force) if example else []
    if as_json:
        _emit_json(
            {
                "config": str(path),
                "database": store.path,
                "database_created": not existed,
                "samples": [str(p) for p in written],
                "next": starter.FIRST_RUN if example else None,
            }
        )
        return
    if example:
        typer.echo("wrote " + ", ".join(str(p.relative_to(here)) for p in written))
        typer.echo(f"next: {starter.FIRST_RUN}    # a welcome mail, then a durable 24h sleep")
        typer.echo("      then flowctl ls, flowctl why RUN, flowctl daemon (README: At a glance)")
        typer.echo(f"more examples: {starter.SAMPLES / 'examples'}")


def workflows(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the workflows found in the workflows folder.  Example: flowctl workflows"""
    st = _state(ctx)
    folder = st.config.workflows_dir()
    found = ops.list_workflows(folder)
    if as_json:
        _emit_json(
            [
                {"name": w.name, "kind": w.kind, "target": w.target, "description": w.description}
                for w in found
            ]
        )
        return
    if not found:
        missing = "" if Path(folder).is_dir() else " (the folder does not exist)"
        typer.echo(f"no workflows in {folder}{missing}")
        return
    cwd = Path.cwd()
    rows = []
    for w in found:
        file = w.source_path or w.target
        try:
            file = str(Path(file).relative_to(cwd))
        except ValueError:
            pass
        rows.append([w.name, w.kind, file, w.description])
    _table(["NAME", "KIND", "FILE", "DESCRIPTION"], rows)


# ---------------------------------------------------------------------------
# daemon / status


def _from_config(key: str) -> str:
    """The default shown for a daemon option that flowctl.toml may set."""
    from flowctl.config import AUTO_WORKERS_MAX, DEFAULTS

    if key == "workers":  # not a constant: it depends on the machine
        shown = f"one per core, at most {AUTO_WORKERS_MAX}: {DEFAULTS[key]} here; 1 on PostgreSQL"
        return f"[default: {shown}; or `{key}` in flowctl.toml]"
    return f"[default: {DEFAULTS[key]}, or `{key}` in flowctl.toml]"


def daemon(
    ctx: typer.Context,
    action: Annotated[
        str | None,
        typer.Argument(
            metavar="[stop]",
            help="stop: ask the daemons on this database to drain, and wait for them to exit.",
        ),
    ] = None,
    install: Annotated[
        bool,
        typer.Option(
            "--install", help="Install and start a systemd user service for this database."
        ),
    ] = False,
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="Stop and remove that service.")
    ] = False,
    print_unit: Annotated[
        bool, typer.Option("--print", help="Print the systemd unit (with --install: only print).")
    ] = False,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            max=1024,
            help=f"Runs executed at once.  {_from_config('concurrency')}",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            max=256,
            help="Worker processes that execute runs, each with --concurrency of its own and"
            " taking turns to write; the daemon process supervises them (1: the daemon"
            " process alone, which uses one core)."
            f"  {_from_config('workers')}",
        ),
    ] = None,
    threads: Annotated[
        bool,
        typer.Option(
            "--threads",
            help="Run handlers on --concurrency threads, not as greenlets on one thread: for"
            " workflows that do slow work outside ctx.step (SQLite; PostgreSQL always uses"
            " threads).",
        ),
    ] = False,
    lease: Annotated[
        str | None, typer.Option("--lease", help=f"Lease length.  {_from_config('lease')}")
    ] = None,
    heartbeat: Annotated[
        str | None,
        typer.Option("--heartbeat", help=f"Heartbeat interval.  {_from_config('heartbeat')}"),
    ] = None,
    grace: Annotated[
        str | None,
        typer.Option(
            "--grace",
            help=f"On SIGTERM, wait this long for running handlers.  {_from_config('grace')}",
        ),
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit when nothing is running or due.")
    ] = False,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="With `stop`, --install or --uninstall: print what was done as JSON."
        ),
    ] = False,
) -> None:
    """Run queued work and wake sleepers on time; SIGTERM/Ctrl-C drains; `daemon stop`
    drains a running one; --install makes it a systemd user service.  Example: flowctl daemon -c 8"""
    import logging  # here, not at start-up: only the daemon configures logging

    from flowctl.daemon import Daemon
    from flowctl.daemon.notifier import Notifier

    st = _state(ctx)
    if action is not None and action != "stop":
        raise UsageError(f"flowctl daemon {action!r}: the only action is `stop`")
    if sum((action is not None, install or print_unit, uninstall)) > 1:
        raise UsageError("give one of `stop`, --install/--print or --uninstall")
    if as_json and ((action is None and not install and not uninstall) or print_unit):
        raise UsageError(
            "--json goes with `daemon stop`, --install or --uninstall (a serving daemon"
            " writes its log; --print writes the unit)"
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
    db = st.db_path
    created = isinstance(db, Path) and not db.exists()
    d = Daemon(_open_when_room(st), st.clock, cfg)
    logging.getLogger("flowctl").info(
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
        logging.getLogger("flowctl").info(
            "this process supervises %d worker processes, each executing up to %d runs",
            cfg.workers,
            cfg.concurrency,
        )
    for other in ops.other_live_daemons(st.store, d.owner):
        logging.getLogger("flowctl").info(
            "daemon pid %d on %s already serves this database; this one shares the work"
            " (each run is claimed by one of them)",
            other.pid,
            other.host,
        )
        break
    _sync_at_daemon_start(st)  # YAML `schedule:` blocks and flowctl.toml [schedules.*]
    # Notifications go out beside the daemon's loop, on their own thread, as this daemon.
    served = threading.Event()
    Notifier(d.store, st.clock, st.config.notify(), d.owner).start(served)
    try:
        code = d.run_forever(until_idle=until_idle, install_signals=True)
    finally:
        served.set()
    raise typer.Exit(code)


def _stop_daemons(st: State, as_json: bool) -> None:
    """`flowctl daemon stop`: SIGTERM (the drain) to this database's daemons, then wait."""
    from flowctl.ops.service import STOP_MARGIN, stop_daemons

    grace = _daemon_config(st).grace
    results = stop_daemons(st.store, st.clock, wait=grace + STOP_MARGIN)
    if as_json:
        _emit_json(
            [
                {"pid": r.daemon.pid, "host": r.daemon.host, "stopped": r.stopped, "note": r.note}
                for r in results
            ]
        )
    elif not results:
        typer.echo(f"no daemon is running on {st.db_path}")
    for r in [] if as_json else results:
        typer.echo(f"daemon pid {r.daemon.pid} on {r.daemon.host}: {r.note}")
    if not all(r.stopped for r in results):
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


def _open_when_room(st: State) -> Store:
    """The daemon's database; a full disk at start-up is waited out (said once), as one
    later is, so a supervisor does not restart the daemon in a loop."""
    import logging

    from flowctl.daemon.watches import FULL_RETRY
    from flowctl.errors import DiskFullError

    said = False
    while True:
        try:
            store = st.open_store(create=True)
            if said:
                logging.getLogger("flowctl").warning("the database has room again: serving")
            return store
        except DiskFullError as e:
            if not said:
                logging.getLogger("flowctl").warning(
                    "%s; nothing committed is lost; retrying every %gs", e, FULL_RETRY
                )
                said = True
            st.clock.wait(threading.Event(), FULL_RETRY)


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    prometheus: Annotated[
        bool,
        typer.Option(
            "--prometheus", help="Print Prometheus text exposition (what /metrics serves)."
        ),
    ] = False,
) -> None:
    """Is a daemon running on this database; run counts; wake lateness.  Example: flowctl status"""
    st = _state(ctx)
    if prometheus and as_json:
        raise UsageError("give --json or --prometheus, not both")
    if prometheus:
        from flowctl.ops.metrics import render

        sys.stdout.write(render(st.store).decode("utf-8"))
        return
    report = ops.status(st.store, clock=st.clock)
    if as_json:
        _emit_json(report.to_json())
        return
    typer.echo(f"database  {report.db}")
    if report.short_of_room:
        typer.echo(
            f"disk      {(report.free_bytes or 0) / 1e6:.1f} MB free: under the daemon's"
            f" {ROOM_RESERVE / 1e6:.0f} MB reserve, no new run starts until there is room"
        )
    alive = [(d, held) for d, ok, held in report.daemons if ok]
    if not alive:
        typer.echo("daemon    not running (start one with `flowctl daemon`)")
    for d, held in alive:
        of = d.info.get("worker_of")
        role = f", worker of pid {of}" if of else ""
        if int(d.info.get("workers") or 1) > 1:
            role = f", supervising {d.info['workers']} workers"
        typer.echo(
            f"daemon    pid {d.pid} on {d.host} since {_local(d.started_at)}, holding {held}"
            f" run(s){role}"
        )
    typer.echo("runs      " + ", ".join(f"{k} {v}" for k, v in report.counts.items()))
    lt = report.lateness
    if lt["wakes"]:
        typer.echo(
            f"wakes     {lt['wakes']} in the last hour; lateness p50 {lt['p50_ms']} ms, p99 {lt['p99_ms']} ms, max {lt['max_ms']} ms"
        )
    else:
        typer.echo("wakes     none in the last hour")


# ---------------------------------------------------------------------------
# validate / tui


def validate(
    files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="YAML workflow files.")],
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"ok": bool, "problems": [...]} on stdout.')
    ] = False,
) -> None:
    """Check YAML workflows; every mistake with file:line:column.  Example: flowctl validate workflows/*.yaml"""
    from flowctl.errors import ValidationError
    from flowctl.ops.maintenance import check_children
    from flowctl.ops.schedules import yaml_schedules
    from flowctl.runtime.targets import load_target

    problems: list[str] = []
    for path in files:
        try:
            wf = load_target(str(path))
        except ValidationError as e:
            problems.extend(e.problems)
            continue
        except FlowctlError as e:
            problems.append(f"{path}: {e}")
            continue
        problems.extend(yaml_schedules(wf, path)[1])
        problems.extend(check_children(path))
    if as_json:
        _emit_json({"ok": not problems, "problems": problems})
    elif problems:
        for p in problems:
            typer.echo(one_line(p), err=True)
    else:
        typer.echo(f"ok: {len(files)} file(s) valid")
    if problems:
        raise typer.Exit(2)


def tui(ctx: typer.Context) -> None:
    """Live view of sleeping, running and dead-lettered runs.  Example: flowctl tui"""
    from flowctl.tui import FlowctlApp  # lazy: `flowctl ls` must not pay for Textual

    st = _state(ctx)
    store = st.store  # a missing database is said first, as every reading command says it
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "flowctl tui needs a terminal on stdin and stdout; without one use"
            " `flowctl ls`, `flowctl status` or `flowctl agenda`"
        )
    FlowctlApp(store=store, clock=st.clock, view="auto", shown_path=_shown_path(store.path)).run()


def _shown_path(where: str) -> str:
    """A file path made absolute (the header tells a project database from the home one);
    a URL as the store shows it (no password)."""
    return where if "://" in where else str(Path(where).resolve())


def copy(
    ctx: typer.Context,
    src: Annotated[
        str, typer.Argument(help="Database to copy: a file path or a postgresql:// URL.")
    ],
    dest: Annotated[
        str, typer.Argument(help="Database to copy into: empty (a new file is created).")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the rows copied per table as JSON.")
    ] = False,
) -> None:
    """Copy every run, journal entry, event, signal, published value and schedule to another
    database, SQLite or PostgreSQL, keeping deadlines, fences and ids.  Example: flowctl copy
    ~/.local/state/flowctl/flowctl.db postgresql://flow@db.internal/flowctl"""
    from flowctl.config import resolve_db
    from flowctl.store import open_store
    from flowctl.store.copy import copy_rows

    st = _state(ctx)
    durability = str(st.config.get("durability"))
    source = open_store(resolve_db(src, st.config, flag="SRC"), durability=durability, create=False)
    try:
        ops.check_copy_source(source, clock=st.clock)  # before DEST is created
        target = open_store(resolve_db(dest, st.config, flag="DEST"), durability=durability)
        try:
            plan = ops.plan_copy(source, target, clock=st.clock)
            if sys.stderr.isatty() and plan.total and not as_json:
                with typer.progressbar(length=plan.total, label="copying", file=sys.stderr) as bar:
                    copied = copy_rows(source, target, plan, bar.update)
            else:
                copied = copy_rows(source, target, plan)
            if as_json:
                _emit_json({"from": source.path, "to": target.path, "copied": copied})
            else:
                typer.echo(f"copied {ops.copy_summary(copied)} from {source.path} to {target.path}")
        finally:
            target.close()
    finally:
        source.close()
