"""The `flowctl` command: parse -> ops -> render. Builds the app, holds the run commands
and registers the schedule ones (flowctl/cli_schedule.py). With `_Group` (flowctl/cli_common.py)
this is the one place errors become exit codes."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

try:  # typer >= 0.26 ships its own copy of click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exc  # type: ignore[no-redef]

from flowctl import ops
from flowctl.cli_common import (
    State,
    _emit_json,
    _Group,
    _local,
    _relative,
    _run_json,
    _state,
    _table,
)
from flowctl.cli_schedule import _sync_at_daemon_start, agenda, schedule_app
from flowctl.clock import SystemClock
from flowctl.durations import format_duration, parse_duration
from flowctl.errors import FlowctlError, UsageError
from flowctl.limits import MAX_COUNT, is_utf8, one_line, shown_bytes
from flowctl.model import EntryState, Run, RunStatus, iso
from flowctl.store import Store

app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Durable workflows on one machine: one command, one SQLite file.",
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


# ---------------------------------------------------------------------------
# rendering helpers


def _first_error_line(run: Run) -> str:
    if not run.error:
        return ""
    msg = str(run.error.get("message") or "").strip().splitlines()
    return f"{run.error.get('type')}: {msg[0]}" if msg else str(run.error.get("type"))


def _describe_value(value: Any) -> str:
    """A command step's result as `exit 0 · out: last line`; anything else as short JSON."""
    if isinstance(value, dict) and "exit_code" in value and "stdout" in value:
        out = str(value.get("stdout") or "").strip().splitlines()
        err = str(value.get("stderr") or "").strip().splitlines()
        text = f"exit {value['exit_code']}"
        if out:
            text += f" · out: {out[-1][:50]}"
        if err:
            text += f" · err: {err[-1][:40]}"
        return text
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------
# init / workflows


@app.command()
def init(
    ctx: typer.Context,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing flowctl.toml.")
    ] = False,
) -> None:
    """Create flowctl.toml here with the documented defaults, and its database.  Example: flowctl init"""
    from flowctl.config import write_default_config

    path = write_default_config(Path.cwd(), force=force)
    typer.echo(f"wrote {path}")
    st = _state(ctx)  # its config is read now, so the database is the one flowctl.toml names
    existed = st.db_path.exists()
    st.open_store(create=True)
    typer.echo(f"{'using existing' if existed else 'created'} database {st.db_path}")


@app.command()
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
        typer.echo(f"no workflows in {folder}")
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
# run


@app.command()
def run(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="file.py:function, module:function, file.yaml, or a workflow name.",
        ),
    ],
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "-i",
            "--arg",
            metavar="KEY=VALUE",
            help="Input: key=value (string) or key:=JSON (typed). Repeatable.",
        ),
    ] = None,
    input_json: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON", help="The whole input as a JSON object."),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Stay in the foreground through sleeps until the run ends."),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Only queue the run; a daemon runs it.")
    ] = False,
    in_: Annotated[
        str | None,
        typer.Option(
            "--in", metavar="DURATION", help="Start after a duration (queues the run), e.g. 10m."
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", metavar="TIME", help="Start at a time (queues the run), ISO-8601."),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            metavar="TIME|DURATION",
            help="Give up on the whole run at this time or after this duration.",
        ),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            metavar="DURATION",
            help="Execution budget per attempt (sleeping spends none), e.g. 30s.",
        ),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            "--max-attempts", metavar="N", max=MAX_COUNT, help="Attempts in total (default 3)."
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            metavar="KEY",
            help="Idempotency key: a second run with the same key returns the first.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Start a workflow run.  Example: flowctl run examples/hello.py:hello -i name=ana --wait"""
    st = _state(ctx)
    clock = st.clock
    if in_ is not None and at is not None:
        raise UsageError("give --in or --at, not both")
    if wait and detach:
        raise UsageError("give --wait or --detach, not both")
    data = ops.parse_inputs(inputs, input_json)
    run_at = None
    if in_ is not None:
        run_at = clock.now() + parse_duration(in_)
    elif at is not None:
        run_at = ops.parse_start_at(at, clock)
    deadline_at = ops.parse_when(deadline, clock, flag="--deadline") if deadline else None
    if timeout is not None:
        parse_duration(timeout)
    started = ops.start(
        st.open_store(create=True),
        target,
        data,
        clock=clock,
        workflows_dir=st.config.workflows_dir(),
        key=key,
        run_at=run_at,
        deadline=deadline_at,
        timeout=timeout,
        max_attempts=max_attempts,
    )
    run_obj = started.run
    if not started.created:
        if not as_json:
            typer.echo(f"run {run_obj.run_id} already exists for key {key!r} ({run_obj.status})")
        if wait and not run_obj.status.is_terminal:
            run_obj = _drive(st, run_obj, wait=True, quiet=as_json)
        if as_json:
            _emit_json(_run_summary(run_obj, created=False))
        return
    if detach or run_at is not None:
        if as_json:
            _emit_json(_run_summary(run_obj))
        else:
            when = (
                ""
                if run_at is None
                else f" to start {_local(run_at)} ({_relative(run_at, clock.now())})"
            )
            typer.echo(f"queued {run_obj.run_id} ({run_obj.workflow}){when}")
        return
    final = _drive(st, run_obj, wait=wait, quiet=as_json)
    if as_json:
        _emit_json(_run_summary(final))
    else:
        _print_end(final, clock.now())
    if final.status in (RunStatus.DEAD, RunStatus.CANCELLED):
        raise typer.Exit(1)


def _run_summary(run: Run, *, created: bool = True) -> dict[str, Any]:
    """What `flowctl run --json` prints; `created` is false when --key matched an earlier run."""
    return {
        "id": run.run_id,
        "created": created,
        "workflow": run.workflow,
        "status": str(run.status),
        "result": run.result,
        "error": run.error,
        "run_at": iso(run.run_at),
    }


def _drive(
    st: State, run_obj: Run, *, wait: bool, quiet: bool, known: set[int] | None = None
) -> Run:
    """Run it here as a worker; print each step as it is journaled (`known`: call indices
    already journaled before, e.g. copied by a fork, not printed)."""
    from flowctl.daemon import drive_run
    from flowctl.engine import Outcome
    from flowctl.model import JournalEntry

    def on_checkpoint(entry: JournalEntry) -> None:
        if quiet or entry.kind != "step":
            return
        took = f" ({format_duration(entry.duration)})" if entry.duration is not None else ""
        mark = "✓" if entry.state is EntryState.DONE else "✗"
        typer.echo(f"  {mark} {entry.name}{took}")

    printed: set[int] = set(known or ())

    def on_step(entry: JournalEntry) -> None:
        printed.add(entry.call_index)
        on_checkpoint(entry)

    def on_outcome(outcome: Outcome) -> None:
        # Say why the terminal goes quiet when --wait waits through a sleep or a retry.
        if quiet or not wait or outcome.run_at is None:
            return
        until = f"{_local(outcome.run_at)} ({_relative(outcome.run_at, st.clock.now())})"
        if outcome.status is RunStatus.SLEEPING:
            typer.echo(f"  … sleeping until {until}")
        elif outcome.status is RunStatus.WAITING:
            typer.echo(f"  … waiting for a signal, timeout {until}")
        elif outcome.status is RunStatus.QUEUED:
            typer.echo(f"  ↻ retrying at {until}")

    cfg = _daemon_config(st, concurrency=1)
    try:
        final: Run = drive_run(
            st.store,
            st.clock,
            run_obj.run_id,
            cfg,
            wait=wait,
            on_checkpoint=on_step,
            on_outcome=on_outcome,
        )
        if not quiet:
            # Steps a daemon ran while we waited: shown once the run is back with us.
            for entry in st.store.journal(run_obj.run_id).values():
                if entry.kind == "step" and entry.call_index not in printed:
                    on_checkpoint(entry)
        return final
    except KeyboardInterrupt:
        typer.echo(
            f"\ninterrupted: run {run_obj.run_id} is left to `flowctl daemon`, which resumes it",
            err=True,
        )
        raise typer.Exit(130) from None


def _print_end(run: Run, now: datetime) -> None:
    if run.status is RunStatus.COMPLETED:
        typer.echo(f"completed {run.run_id}: {json.dumps(run.result)}")
    elif run.status is RunStatus.SLEEPING:
        typer.echo(f"sleeping until {_local(run.run_at)} ({_relative(run.run_at, now)})")
        typer.echo(f"run {run.run_id} (`flowctl daemon` wakes it; `flowctl show {run.run_id}`)")
    elif run.status is RunStatus.WAITING:
        due = f", timeout {_local(run.run_at)}" if run.run_at else ""
        typer.echo(f"waiting for a signal{due}")
        typer.echo(f"run {run.run_id} (`flowctl signal {run.run_id} NAME`)")
    elif run.status is RunStatus.QUEUED:
        typer.echo(
            f"queued {run.run_id}: next attempt {_local(run.run_at)} ({_relative(run.run_at, now)})"
        )
        if run.error:
            typer.echo(f"  last error: {_first_error_line(run)}")
    elif run.status is RunStatus.RUNNING:
        typer.echo(f"running {run.run_id} in another worker")
    elif run.status is RunStatus.PAUSED:
        typer.echo(f"paused {run.run_id} (`flowctl resume {run.run_id}` resumes it)")
    else:
        typer.echo(f"{run.status} {run.run_id}: {_first_error_line(run)}", err=True)


def _daemon_config(st: State, **overrides: Any) -> Any:
    from flowctl.daemon import DaemonConfig

    cfg = st.config
    values: dict[str, Any] = {
        "concurrency": int(cfg.get("concurrency")),
        "lease": parse_duration(cfg.get("lease")).total_seconds(),
        "heartbeat": parse_duration(cfg.get("heartbeat")).total_seconds(),
        "grace": parse_duration(cfg.get("grace")).total_seconds(),
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return DaemonConfig(**values)


# ---------------------------------------------------------------------------
# ls / show


@app.command("ls")
def ls(
    ctx: typer.Context,
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", help=f"Filter by status ({ops.STATUS_NAMES}); repeatable."),
    ] = None,
    workflow: Annotated[
        str | None, typer.Option("--workflow", "-w", help="Filter by workflow name.")
    ] = None,
    search: Annotated[
        str | None, typer.Option("--search", help="Match run id or input text.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", max=MAX_COUNT, help="At most this many runs.")
    ] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list of run objects.")
    ] = False,
) -> None:
    """List runs, newest first.  Example: flowctl ls --status sleeping --json"""
    st = _state(ctx)
    ops.parse_statuses(status)  # bad input is exit 2 before the database is looked for
    runs = ops.list_runs(st.store, statuses=status, workflow=workflow, search=search, limit=limit)
    cut = ""
    if len(runs) == limit:
        total = ops.count_listed(st.store, statuses=status, workflow=workflow, search=search)
        if total > limit:
            cut = f"{limit:,} of {total:,} shown; --limit N for more"
    if as_json:
        _emit_json([_run_json(r) for r in runs])
        if cut:
            typer.echo(cut, err=True)  # stdout stays one JSON document
        return
    if not runs:
        typer.echo("no runs")
        return
    now = st.clock.now()
    rows = []
    for r in runs:
        if r.status in (RunStatus.SLEEPING, RunStatus.WAITING, RunStatus.QUEUED):
            nxt = _relative(r.run_at, now)
        elif r.finished_at:
            nxt = _relative(r.finished_at, now)
        else:
            nxt = "-"
        rows.append(
            [
                r.run_id,
                r.workflow,
                str(r.status),
                f"{r.attempt}/{r.max_attempts}",
                _local(r.created_at),
                nxt,
                _first_error_line(r),
            ]
        )
    _table(["RUN", "WORKFLOW", "STATUS", "ATTEMPT", "CREATED", "NEXT/ENDED", "ERROR"], rows)
    if cut:
        typer.echo(cut)


@app.command()
def show(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print run, checkpoints and timeline as JSON.")
    ] = False,
) -> None:
    """Show one run: header, checkpoints by call index, timeline.  Example: flowctl show 01jd"""
    st = _state(ctx)
    detail = ops.show_run(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(detail.to_json())
        return
    r = detail.run
    now = st.clock.now()
    typer.echo(f"run       {r.run_id}")
    typer.echo(f"workflow  {r.workflow}  ({r.kind}: {r.target})")
    if r.status.is_terminal:
        typer.echo(f"status    {r.status} at {_local(r.finished_at)}")
    else:
        answer = ops.explain_detail(detail, now)
        typer.echo(f"status    {r.status} — {answer.message if answer else ops.why(detail, now)}")
    typer.echo(f"input     {json.dumps(r.shown_input)}")
    typer.echo(f"attempt   {r.attempt}/{r.max_attempts}")
    typer.echo(f"created   {_local(r.created_at)}")
    if r.deadline:
        typer.echo(f"deadline  {_local(r.deadline)} ({_relative(r.deadline, now)})")
    if r.timeout:
        typer.echo(
            f"budget    {format_duration(r.exec_spent)} of {format_duration(r.timeout)} spent this attempt"
        )
    if r.schedule:
        typer.echo(f"schedule  {r.schedule} (fire time {_local(r.scheduled_at)})")
    if r.parent_run_id:
        typer.echo(f"parent    {r.parent_run_id}")
    if r.status is RunStatus.COMPLETED:
        typer.echo(f"result    {json.dumps(r.result)}")
    if r.error:
        typer.echo(f"error     {_first_error_line(r)}")
        for k in ("exit_code", "dead_reason"):
            if k in r.error:
                typer.echo(f"          {k}: {r.error[k]}")
        if r.status is RunStatus.DEAD:
            tb = r.error.get("traceback") or r.error.get("stderr_tail")
            if tb:
                typer.echo("          " + "\n          ".join(str(tb).rstrip().splitlines()[-12:]))
    for key, (value, _at) in detail.published.items():
        typer.echo(f"published {key} = {json.dumps(value)}")
    for note in detail.notes:
        typer.echo(f"note      {note}")
    typer.echo("")
    typer.echo("checkpoints")
    if not detail.checkpoints and not detail.versions:
        typer.echo("  (none)")
    for c in detail.checkpoints:
        extra = ""
        if c.wake_at is not None:
            extra = f" wake_at {_local(c.wake_at)}"
        if c.state is EntryState.ERROR:
            err = c.value or {}
            extra += f" {err.get('type')}: {str(err.get('message', '')).splitlines()[0] if err.get('message') else ''}"
        elif c.kind == "step" and c.value is not None:
            extra += " → " + _describe_value(c.value)
        took = f" ({format_duration(c.duration)})" if c.duration is not None else ""
        typer.echo(f"  #{c.call_index:<3} {c.kind:<7} {c.name:<20} {c.state}{took}{extra}")
    for cid, v, _at in detail.versions:
        typer.echo(f"  ver  {cid} = {v}")
    if detail.pending_signals:
        typer.echo("")
        typer.echo("buffered signals")
        for name, payload, at in detail.pending_signals:
            typer.echo(f"  {name} {json.dumps(payload)} (sent {_local(at)})")
    typer.echo("")
    typer.echo("timeline")
    for e in detail.timeline:
        data = " ".join(f"{k}={v}" for k, v in e.data.items())
        typer.echo(f"  {_local(e.at)}.{e.at.microsecond // 1000:03d}  {e.type:<20} {data}")


@app.command()
def why(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print {reason, message, ...facts} as JSON.")
    ] = False,
) -> None:
    """Say in one line why a run is not running (sleeping until T, no daemon, paused …).

    Example: flowctl why 01jd --json
    """
    st = _state(ctx)
    answer = ops.why_run(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(answer.to_json())
    else:
        typer.echo(f"{answer.run_id} ({answer.status}): {answer.message}")


# ---------------------------------------------------------------------------
# operator actions


@app.command("signal")
def send_signal(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    name: Annotated[str, typer.Argument(help="Signal name, e.g. approved.")],
    data: Annotated[str, typer.Option("--data", help="JSON payload.")] = "null",
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """Send a signal to a run.  Example: flowctl signal 01jd approved --data '{"by":"ana"}'"""
    st = _state(ctx)
    payload = ops.parse_json_arg("--data", data)
    run_obj = ops.send_signal(st.store, run_ref, name, payload, clock=st.clock)
    if as_json:
        _emit_json(_run_json(run_obj))
    else:
        typer.echo(f"sent {name!r} to {run_obj.run_id} ({run_obj.status})")


@app.command()
def cancel(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why; kept in the timeline.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until a running run has really stopped.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """Cancel a run; a running one is told at its next heartbeat.  Example: flowctl cancel 01jd --reason dup"""
    st = _state(ctx)
    run_obj = ops.cancel(st.store, run_ref, clock=st.clock, reason=reason)
    if run_obj.status is RunStatus.RUNNING and wait:
        import threading

        ev = threading.Event()
        while run_obj.status is RunStatus.RUNNING:
            st.clock.wait(ev, 0.05)
            run_obj = st.store.get_run(run_obj.run_id)
    if as_json:
        _emit_json(_run_json(run_obj))
    elif run_obj.status is RunStatus.RUNNING:
        typer.echo(
            f"cancel requested for {run_obj.run_id}: its handler is told at the next heartbeat"
        )
    else:
        typer.echo(f"{run_obj.status} {run_obj.run_id}")


@app.command()
def redrive(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id or unique prefix.")
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Redrive every dead run matching the filters.")
    ] = False,
    workflow: Annotated[
        str | None, typer.Option("--workflow", "-w", help="With --all: only this workflow.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="With --all: runs created since (ISO time or duration ago)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Give dead runs a fresh attempt budget, keeping their checkpoints.  Example: flowctl redrive 01jd"""
    st = _state(ctx)
    if all_ == (run_ref is not None):
        raise UsageError("give a RUN, or --all with optional --workflow/--since filters")
    if all_:
        since_at = ops.parse_since(since, st.clock) if since else None
        runs = ops.redrive_many(st.store, clock=st.clock, workflow=workflow, since=since_at)
    else:
        runs = [ops.redrive(st.store, run_ref or "", clock=st.clock)]
    if as_json:
        _emit_json([_run_json(r) for r in runs])
        return
    for r in runs:
        typer.echo(f"redriven {r.run_id} ({r.workflow}): queued")
    if all_:
        typer.echo(f"{len(runs)} run(s) redriven")


def _start_copy(st: State, new: Run, origin: str, index: int, wait: bool, as_json: bool) -> None:
    """Render a fork or rerun; with --wait, drive it here as `run --wait` does."""
    journal = set(st.store.journal(new.run_id))
    copied = len(journal)
    final = _drive(st, new, wait=True, quiet=as_json, known=journal) if wait else new
    if as_json:
        _emit_json(
            {**_run_summary(final), "forked_from": origin, "from_index": index, "copied": copied}
        )
    elif wait:
        _print_end(final, st.clock.now())
    else:
        typer.echo(
            f"queued {new.run_id} ({new.workflow}): forked from {origin} at call #{index},"
            f" {copied} checkpoint(s) copied"
        )
    if final.status in (RunStatus.DEAD, RunStatus.CANCELLED):
        raise typer.Exit(1)


_FORK_INPUT = typer.Option(
    "--input", metavar="JSON", help="Input as a JSON object (default: the original's)."
)
_FORK_WAIT = typer.Option("--wait", help="Run it here, in the foreground, until it ends.")


@app.command()
def fork(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    from_index: Annotated[
        int,
        typer.Option(
            "--from",
            metavar="INDEX",
            max=MAX_COUNT,
            help="Copy the checkpoints before this call index.",
        ),
    ],
    input_json: Annotated[str | None, _FORK_INPUT] = None,
    wait: Annotated[bool, _FORK_WAIT] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new run as JSON.")] = False,
) -> None:
    """Start a new run of the same workflow from a call index of an earlier one; the
    original is left as it was.  Example: flowctl fork 01jd --from 3 --wait"""
    st = _state(ctx)
    data = ops.parse_inputs(None, input_json) if input_json is not None else None
    new = ops.fork(st.store, run_ref, from_index, clock=st.clock, input=data)
    origin = st.store.find_run(run_ref).run_id
    _start_copy(st, new, origin, from_index, wait, as_json)


@app.command()
def rerun(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    input_json: Annotated[str | None, _FORK_INPUT] = None,
    wait: Annotated[bool, _FORK_WAIT] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new run as JSON.")] = False,
) -> None:
    """Start the same workflow again with the same input (a fork from 0).
    Example: flowctl rerun 01jd --wait"""
    st = _state(ctx)
    data = ops.parse_inputs(None, input_json) if input_json is not None else None
    new = ops.rerun(st.store, run_ref, clock=st.clock, input=data)
    origin = st.store.find_run(run_ref).run_id
    _start_copy(st, new, origin, 0, wait, as_json)


def _pause_targets(run_ref: str | None, workflow: str | None) -> None:
    if (run_ref is None) == (workflow is None):
        raise UsageError("give a RUN, or --workflow W for every run of a workflow")


def _say_paused(run: Run, now: datetime) -> str:
    if run.status is RunStatus.RUNNING:
        return (
            f"pause requested for {run.run_id}: it parks at its next durable call"
            " (nothing is interrupted)"
        )
    tail = f"; its deadline {_local(run.deadline)} still runs" if run.deadline else ""
    return f"paused {run.run_id} ({run.workflow}){tail}"


def _say_resumed(run: Run, now: datetime) -> str:
    if run.status is RunStatus.RUNNING:
        return f"resumed {run.run_id}: the pause it was asked for is withdrawn"
    if run.run_at is None:
        return f"resumed {run.run_id}: {run.status}"
    when = (
        "due now"
        if run.run_at <= now
        else f"due {_local(run.run_at)} ({_relative(run.run_at, now)})"
    )
    return f"resumed {run.run_id}: {run.status}, {when}"


_PAUSE_WORKFLOW = typer.Option("--workflow", "-w", help="Every run of this workflow instead.")


@app.command()
def pause(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id or unique prefix.")
    ] = None,
    workflow: Annotated[str | None, _PAUSE_WORKFLOW] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Pause a run: never claimed until resumed; its deadline still runs. A running run
    parks at its next durable call.  Example: flowctl pause 01jd"""
    _act_on_runs(
        _state(ctx),
        run_ref,
        workflow,
        as_json,
        ops.pause,
        ops.pause_workflow,
        _say_paused,
        "paused",
    )


@app.command()
def resume(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id or unique prefix.")
    ] = None,
    workflow: Annotated[str | None, _PAUSE_WORKFLOW] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Resume a paused run: due at once if its wake passed, else at its wake.
    Example: flowctl resume 01jd"""
    _act_on_runs(
        _state(ctx),
        run_ref,
        workflow,
        as_json,
        ops.resume,
        ops.resume_workflow,
        _say_resumed,
        "resumed",
    )


def _act_on_runs(
    st: State,
    run_ref: str | None,
    workflow: str | None,
    as_json: bool,
    one: Callable[..., Run],
    every: Callable[..., list[Run]],
    say: Callable[[Run, datetime], str],
    done: str,
) -> None:
    """pause/resume of one run, or of every active run of `--workflow`, and their output."""
    _pause_targets(run_ref, workflow)
    if workflow is not None:
        runs = every(st.store, workflow, clock=st.clock)
    else:
        runs = [one(st.store, run_ref or "", clock=st.clock)]
    if as_json:
        _emit_json([_run_json(r) for r in runs] if workflow is not None else _run_json(runs[0]))
        return
    now = st.clock.now()
    for r in runs:
        typer.echo(say(r, now))
    if workflow is not None:
        typer.echo(f"{len(runs)} run(s) of {workflow} {done}")


@app.command()
def wake(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """End a sleep early (recorded as an operator action).  Example: flowctl wake 01jd"""
    st = _state(ctx)
    run_obj = ops.wake_now(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(_run_json(run_obj))
    else:
        typer.echo(f"woke {run_obj.run_id}: due now")


# ---------------------------------------------------------------------------
# daemon / status


@app.command()
def daemon(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", max=1024, help="Runs executed at once."),
    ] = None,
    lease: Annotated[str | None, typer.Option("--lease", help="Lease length, e.g. 15s.")] = None,
    heartbeat: Annotated[
        str | None, typer.Option("--heartbeat", help="Heartbeat interval, e.g. 1s.")
    ] = None,
    grace: Annotated[
        str | None, typer.Option("--grace", help="On SIGTERM, wait this long for running handlers.")
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit when nothing is running or due.")
    ] = False,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Run queued work and wake sleepers on time; SIGTERM/Ctrl-C drains.  Example: flowctl daemon -c 8"""
    from flowctl.daemon import Daemon

    st = _state(ctx)
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
    )
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    created = not st.db_path.exists()
    d = Daemon(_open_when_room(st), st.clock, cfg)
    logging.getLogger("flowctl").info(
        "daemon %s %s %s (concurrency %d, lease %gs, heartbeat %gs)",
        d.owner,
        "created a new database at" if created else "on",
        st.db_path,
        cfg.concurrency,
        cfg.lease,
        cfg.heartbeat,
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
    code = d.run_forever(until_idle=until_idle, install_signals=True)
    raise typer.Exit(code)


def _open_when_room(st: State) -> Store:
    """The daemon's database; a full disk at start-up is waited out (said once), as one
    later is, so a supervisor does not restart the daemon in a loop."""
    from flowctl.daemon import FULL_RETRY
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


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Is a daemon running on this database; run counts; wake lateness.  Example: flowctl status"""
    st = _state(ctx)
    report = ops.status(st.store, clock=st.clock)
    if as_json:
        _emit_json(report.to_json())
        return
    typer.echo(f"database  {report.db}")
    alive = [(d, held) for d, ok, held in report.daemons if ok]
    if not alive:
        typer.echo("daemon    not running (start one with `flowctl daemon`)")
    for d, held in alive:
        typer.echo(
            f"daemon    pid {d.pid} on {d.host} since {_local(d.started_at)}, holding {held} run(s)"
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


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="YAML workflow files.")],
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"ok": bool, "problems": [...]} on stdout.')
    ] = False,
) -> None:
    """Check YAML workflows; every mistake with file:line:column.  Example: flowctl validate workflows/*.yaml"""
    from flowctl.errors import ValidationError
    from flowctl.schedule_ops import yaml_schedules
    from flowctl.workflow import load_target

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
    if as_json:
        _emit_json({"ok": not problems, "problems": problems})
    elif problems:
        for p in problems:
            typer.echo(one_line(p), err=True)
    else:
        typer.echo(f"ok: {len(files)} file(s) valid")
    if problems:
        raise typer.Exit(2)


@app.command()
def tui(ctx: typer.Context) -> None:
    """Live view of sleeping, running and dead-lettered runs.  Example: flowctl tui"""
    from flowctl.tui import FlowctlApp  # lazy: `flowctl ls` must not pay for Textual

    st = _state(ctx)
    FlowctlApp(store=st.store, clock=st.clock, view="auto").run()


# ---------------------------------------------------------------------------
# schedules / agenda: flowctl/cli_schedule.py

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


_ = UTC
