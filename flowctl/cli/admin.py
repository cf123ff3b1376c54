"""The commands around the runs: `flowctl init`, `workflows`, `status`, `validate`, `tui`
and `copy`: parse -> flowctl.ops (or the TUI) -> render. `flowctl daemon` is
flowctl/cli/daemon.py.

flowctl/cli/__init__.py registers them on the app, in the order `flowctl --help` lists them.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from flowctl import ops
from flowctl.cli.common import _emit_json, _local, _relative, _state, _table
from flowctl.errors import FlowctlError, UsageError
from flowctl.limits import ROOM_RESERVE, one_line

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
    from flowctl.cli import starter
    from flowctl.config import CONFIG_NAME, DEFAULTS, write_default_config

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
    path = here / CONFIG_NAME
    # idempotent: in a project already set up, plain init keeps its flowctl.toml and makes
    # sure the database it names exists; --example still refuses (it writes the samples
    # where a fresh flowctl.toml says), and --force rewrites the defaults
    kept = path.is_file() and not force and not example
    if not kept:
        path = write_default_config(here, force=force)

    def say(text: str) -> None:
        if not as_json:  # with --json, stdout is the one JSON document
            typer.echo(text)

    say(
        f"kept existing {path} (--force rewrites it with the defaults)" if kept else f"wrote {path}"
    )
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
                "config_written": not kept,
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
    """List the workflows found in the workflows folder.  A YAML file that does not load is
    listed as BROKEN with its first problem.  Example: flowctl workflows"""
    from flowctl.ops.workflows import list_workflows_checked

    st = _state(ctx)
    folder = st.config.workflows_dir()
    found = list_workflows_checked(folder)
    if as_json:
        _emit_json(
            [
                {
                    "name": w.entry.name,
                    "kind": w.entry.kind,
                    "target": w.entry.target,
                    "description": w.entry.description,
                    "problem": w.problem,
                }
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
        file = w.entry.source_path or w.entry.target
        try:
            file = str(Path(file).relative_to(cwd))
        except ValueError:
            pass
        about = w.entry.description if w.problem is None else f"BROKEN: {w.problem}"
        rows.append([w.entry.name, w.entry.kind, file, about])
    _table(["NAME", "KIND", "FILE", "DESCRIPTION"], rows)


# ---------------------------------------------------------------------------
# status


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
    st.masked = True  # needs no key: a sealed value is shown as its key id
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
        if "outage_waited_s" in d.info:  # the last database outage it waited out
            role += f"; waited {d.info['outage_waited_s']}s for the database until"
            role += f" {_local(datetime.fromisoformat(d.info['outage_ended_at']))}"
        typer.echo(
            f"daemon    pid {d.pid} on {d.host} since {_local(d.started_at)}, holding {held}"
            f" run(s){role}"
        )
    now = st.clock.now()
    for d, ok, _ in report.daemons:  # registered, but its process is gone or its beat lapsed
        if not ok:
            typer.echo(
                f"daemon    pid {d.pid} on {d.host}: not running, last seen"
                f" {_local(d.seen_at)} ({_relative(d.seen_at, now)})"
            )
    typer.echo("runs      " + ", ".join(f"{k} {v}" for k, v in report.counts.items()))
    alone, waiting = report.suspects
    if alone or waiting:  # runs whose worker died under them: each runs in a process of its own
        typer.echo(
            f"recovery  {alone} suspect(s) running alone, {waiting} waiting to; other runs go on"
        )
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
    # Rows are copied as stored: sealed values stay sealed, and no key is needed.
    source = open_store(
        resolve_db(src, st.config, flag="SRC"), durability=durability, create=False, masked=True
    )
    try:
        ops.check_copy_source(source, clock=st.clock)  # before DEST is created
        target = open_store(
            resolve_db(dest, st.config, flag="DEST"), durability=durability, masked=True
        )
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
