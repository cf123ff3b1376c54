"""The `flowctl` command: parse -> ops -> render. The one place errors become exit codes."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.26 ships its own copy of click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exc  # type: ignore[no-redef]

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.config import Config, load_config, resolve_db
from flowctl.durations import format_duration, parse_duration
from flowctl.errors import FlowctlError, UsageError
from flowctl.model import EntryState, Run, RunStatus, iso
from flowctl.store import Store


class _Group(TyperGroup):
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except FlowctlError as e:
            typer.echo(f"flowctl: {e}", err=True)
            raise typer.Exit(e.exit_code) from None


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Durable workflows on one machine: one command, one SQLite file.",
)


class State:
    def __init__(self, db: str | None) -> None:
        self._db = db
        self._config: Config | None = None
        self._store: Store | None = None
        self.clock = SystemClock()

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config()
        return self._config

    @property
    def db_path(self) -> Path:
        return resolve_db(self._db, self.config)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.db_path, durability=str(self.config.get("durability")))
        return self._store


def _state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


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
    ctx.obj = State(db)


# ---------------------------------------------------------------------------
# rendering helpers


def _emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _local(when: datetime | None) -> str:
    if when is None:
        return "-"
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _relative(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    delta = when - now
    if delta.total_seconds() >= 0:
        return f"in {format_duration(delta)}"
    return f"{format_duration(-delta)} ago"


def _table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    widths[-1] = min(widths[-1], 60)
    typer.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        typer.echo("  ".join(c[:w].ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


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


def _run_json(run: Run) -> dict[str, Any]:
    return run.to_json()


# ---------------------------------------------------------------------------
# init / workflows


@app.command()
def init(
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing flowctl.toml.")
    ] = False,
) -> None:
    """Create flowctl.toml here with the documented defaults.  Example: flowctl init"""
    from flowctl.config import write_default_config

    path = write_default_config(Path.cwd(), force=force)
    typer.echo(f"wrote {path}")


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
        typer.Option("--max-attempts", metavar="N", help="Attempts in total (default 3)."),
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
        run_at = ops.parse_time(at, clock, flag="--at")
    deadline_at = ops.parse_when(deadline, clock, flag="--deadline") if deadline else None
    if timeout is not None:
        parse_duration(timeout)
    started = ops.start(
        st.store,
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


def _drive(st: State, run_obj: Run, *, wait: bool, quiet: bool) -> Run:
    from flowctl.daemon import drive_run
    from flowctl.engine import Outcome
    from flowctl.model import JournalEntry

    def on_checkpoint(entry: JournalEntry) -> None:
        if quiet or entry.kind != "step":
            return
        took = f" ({format_duration(entry.duration)})" if entry.duration is not None else ""
        mark = "✓" if entry.state is EntryState.DONE else "✗"
        typer.echo(f"  {mark} {entry.name}{took}")

    printed: set[int] = set()

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
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many runs.")] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list of run objects.")
    ] = False,
) -> None:
    """List runs, newest first.  Example: flowctl ls --status sleeping --json"""
    st = _state(ctx)
    runs = ops.list_runs(st.store, statuses=status, workflow=workflow, search=search, limit=limit)
    if as_json:
        _emit_json([_run_json(r) for r in runs])
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
        typer.echo(f"status    {r.status} — {ops.why(detail, now)}")
    typer.echo(f"input     {json.dumps(r.input)}")
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
        since_at = None
        if since:
            try:
                since_at = st.clock.now() - parse_duration(since)
            except FlowctlError:
                since_at = ops.parse_time(since, st.clock, flag="--since")
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


@app.command()
def wake(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
) -> None:
    """End a sleep early (recorded as an operator action).  Example: flowctl wake 01jd"""
    st = _state(ctx)
    run_obj = ops.wake_now(st.store, run_ref, clock=st.clock)
    typer.echo(f"woke {run_obj.run_id}: due now")


# ---------------------------------------------------------------------------
# daemon / status


@app.command()
def daemon(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Runs executed at once.")
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
    _sync_at_daemon_start(st)  # YAML `schedule:` blocks and flowctl.toml [schedules.*]
    d = Daemon(st.store, st.clock, cfg)
    logging.getLogger("flowctl").info(
        "daemon %s on %s (concurrency %d, lease %gs, heartbeat %gs)",
        d.owner,
        st.db_path,
        cfg.concurrency,
        cfg.lease,
        cfg.heartbeat,
    )
    code = d.run_forever(until_idle=until_idle, install_signals=True)
    raise typer.Exit(code)


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
    files: Annotated[list[Path], typer.Argument(help="YAML workflow files.")],
) -> None:
    """Check YAML workflows; every mistake with file:line:column.  Example: flowctl validate workflows/*.yaml"""
    from flowctl.errors import ValidationError
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
        problems.extend(ops.yaml_schedules(wf, path)[1])
    if problems:
        for p in problems:
            typer.echo(p, err=True)
        raise typer.Exit(2)
    typer.echo(f"ok: {len(files)} file(s) valid")


@app.command()
def tui(ctx: typer.Context) -> None:
    """Live view of sleeping, running and dead-lettered runs.  Example: flowctl tui"""
    from flowctl.tui import FlowctlApp  # lazy: `flowctl ls` must not pay for Textual

    st = _state(ctx)
    FlowctlApp(store=st.store, clock=st.clock).run()


# typer >= 0.26 raises its own Exit/Abort; older versions raise click's.
_EXITS: tuple[type[Any], ...] = (typer.Exit, getattr(click_exc, "Exit", typer.Exit))
_ABORTS: tuple[type[BaseException], ...] = (typer.Abort, getattr(click_exc, "Abort", typer.Abort))


# ---------------------------------------------------------------------------
# schedules / agenda

schedule_app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Cron and interval schedules: each fire starts one run, exactly once.",
)
app.add_typer(schedule_app, name="schedule")

_POLICY_HELP = {
    "missed": "Fires missed while no daemon ran: skip (default), latest (run the last one), all (run each, max 100).",
    "overlap": "When the previous run is still active: skip (default, recorded), allow, or queue (start after it ends).",
    "gap": "A local time that DST skips: shift (default, fire at the first valid instant) or skip.",
    "fold": "A local time that DST repeats: first (default), last, or both.",
}


def _default_tz(st: State) -> str | None:
    """flowctl.toml's `timezone` when set, else None (the machine's zone)."""
    return str(st.config.get("timezone") or "") or None


def _zoned(when: datetime | None, tz: str | None) -> str:
    """A time in the schedule's own zone, with the zone's abbreviation: 2026-03-30 09:00 CEST."""
    from zoneinfo import ZoneInfo

    if when is None:
        return "-"
    local = when.astimezone(ZoneInfo(tz)) if tz else when.astimezone()
    return local.strftime("%Y-%m-%d %H:%M:%S %Z" if local.second else "%Y-%m-%d %H:%M %Z")


def _short_target(target: str) -> str:
    try:
        return str(Path(target).relative_to(Path.cwd()))
    except ValueError:
        return target


def _last_outcome(event: Any, now: datetime) -> str:
    """`fired 2h ago → completed`, `skipped-overlap 5m ago`, `error 1d ago`."""
    if event is None:
        return "-"
    text = f"{event.action} {_relative(event.fire_at or event.at, now)}"
    if event.run_status is not None:
        text += f" → {event.run_status}"
    return text


def _sync_declared(st: State) -> ops.SyncReport:
    return ops.sync_schedules(
        st.store,
        clock=st.clock,
        workflows_dir=st.config.workflows_dir(),
        toml_schedules=st.config.values.get("schedules"),
        toml_path=st.config.path,
        default_tz=_default_tz(st),
    )


def _sync_at_daemon_start(st: State) -> None:
    """The daemon starts with the declared schedules in force; a bad declaration is logged
    and leaves the stored schedules as they were (it never stops the daemon)."""
    from flowctl.errors import ValidationError

    log = logging.getLogger("flowctl")
    try:
        report = _sync_declared(st)
    except ValidationError as e:
        for problem in e.problems:
            log.warning("schedule sync skipped: %s", problem)
        return
    except FlowctlError as e:
        log.warning("schedule sync skipped: %s", e)
        return
    changed = {k: v for k, v in report.to_json().items() if v and k != "unchanged"}
    if changed:
        log.info("schedules synced: %s", changed)


@schedule_app.command("add")
def schedule_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name, e.g. nightly-report.")],
    target: Annotated[
        str, typer.Argument(help="file.py:function, module:function, file.yaml, or a name.")
    ],
    cron: Annotated[
        str | None,
        typer.Option("--cron", help='5-field cron or @daily-style alias: "0 9 * * MON-FRI".'),
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="Interval from now: 15m, 2h, 1d.")
    ] = None,
    tz: Annotated[
        str | None, typer.Option("--tz", help="IANA zone, e.g. Europe/Paris (default: local).")
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "-i", "--arg", metavar="KEY=VALUE", help="Input: key=value or key:=JSON. Repeatable."
        ),
    ] = None,
    input_json: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON", help="The whole input as a JSON object."),
    ] = None,
    missed: Annotated[str, typer.Option("--missed", help=_POLICY_HELP["missed"])] = "skip",
    max_missed: Annotated[
        int, typer.Option("--max-missed", help="With --missed all: at most this many.")
    ] = 100,
    overlap: Annotated[str, typer.Option("--overlap", help=_POLICY_HELP["overlap"])] = "skip",
    gap: Annotated[str, typer.Option("--gap", help=_POLICY_HELP["gap"])] = "shift",
    fold: Annotated[str, typer.Option("--fold", help=_POLICY_HELP["fold"])] = "first",
    jitter: Annotated[
        str, typer.Option("--jitter", help="Delay each start by a stable random 0..D, e.g. 5m.")
    ] = "0s",
    replace: Annotated[
        bool, typer.Option("--replace", help="Redefine an existing schedule of this name.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
) -> None:
    """Add a schedule.  Example: flowctl schedule add nightly --cron "0 9 * * MON-FRI" --tz Europe/Paris examples/report.yaml -i team=ops"""
    st = _state(ctx)
    data = ops.parse_inputs(inputs, input_json)
    info = ops.add_schedule(
        st.store,
        name,
        target,
        data,
        clock=st.clock,
        cron=cron,
        every=every,
        tz=tz or _default_tz(st),
        missed=missed,
        max_missed=max_missed,
        overlap=overlap,
        gap=gap,
        fold=fold,
        jitter=jitter,
        replace=replace,
        workflows_dir=st.config.workflows_dir(),
    )
    if as_json:
        _emit_json(info.to_json())
        return
    tzname = info.spec.tz if info.spec else None
    nxt = info.row.next_fire_at
    typer.echo(f"{'replaced' if replace else 'added'} schedule {info.name}: {info.rule}")
    if info.row.paused:
        typer.echo(f"paused: no fires until `flowctl schedule resume {info.name}`")
    else:
        typer.echo(f"next fire {_zoned(nxt, tzname)} ({_relative(nxt, st.clock.now())})")


@schedule_app.command("ls")
def schedule_ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List schedules: rule, next fire, last fire and its outcome.  Example: flowctl schedule ls"""
    st = _state(ctx)
    infos = ops.list_schedules(st.store)
    if as_json:
        _emit_json([i.to_json() for i in infos])
        return
    if not infos:
        typer.echo("no schedules (add one with `flowctl schedule add`)")
        return
    now = st.clock.now()
    rows = []
    for i in infos:
        tzname = i.spec.tz if i.spec else None
        nxt = i.row.next_fire_at
        rows.append(
            [
                i.name,
                ("paused" if i.row.paused else "active")
                + ("" if i.row.source == "cli" else f" ({i.row.source})"),
                i.rule,
                "-" if nxt is None else f"{_zoned(nxt, tzname)} ({_relative(nxt, now)})",
                _last_outcome(i.last, now),
                _short_target(i.row.target),
            ]
        )
    _table(["NAME", "STATE", "RULE", "NEXT", "LAST", "TARGET"], rows)


@schedule_app.command("show")
def schedule_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    count: Annotated[int, typer.Option("--count", "-n", help="Upcoming fires to list.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a schedule: its rule, next fires and recent history.  Example: flowctl schedule show nightly"""
    st = _state(ctx)
    detail = ops.show_schedule(st.store, name, clock=st.clock, count=count)
    if as_json:
        _emit_json(detail.to_json())
        return
    info, r = detail.info, detail.info.row
    tzname = info.spec.tz if info.spec else None
    now = st.clock.now()
    origin = f" from {r.origin}" if r.origin else ""
    typer.echo(f"schedule  {r.name} ({'paused' if r.paused else 'active'}; {r.source}{origin})")
    typer.echo(f"rule      {info.rule}")
    if info.spec is not None:
        s = info.spec
        typer.echo(
            f"policies  missed={s.missed} (max {s.max_missed}) overlap={s.overlap}"
            f" gap={s.gap} fold={s.fold} jitter={format_duration(s.jitter) if s.jitter else 'none'}"
        )
    typer.echo(f"target    {_short_target(r.target)}")
    typer.echo(f"input     {json.dumps(r.input)}")
    typer.echo(f"created   {_zoned(r.created_at, tzname)}")
    typer.echo(f"last fire {_zoned(r.last_fire_at, tzname)}")
    typer.echo("")
    typer.echo("next fires" + (" (paused: none will fire until resumed)" if r.paused else ""))
    if not detail.upcoming:
        typer.echo("  (none)")
    for f in detail.upcoming:
        note = f"  {f.note}" if f.note else ""
        typer.echo(f"  {_zoned(f.at, tzname):<24} {iso(f.at)}  {_relative(f.at, now)}{note}")
    typer.echo("")
    typer.echo("history")
    if not detail.history:
        typer.echo("  (none)")
    for e in detail.history:
        run = f" {e.run_id}" if e.run_id else ""
        status = f" ({e.run_status})" if e.run_status else ""
        why = f"  {e.detail}" if e.detail else ""
        typer.echo(f"  {_zoned(e.fire_at or e.at, tzname):<24} {e.action:<16}{run}{status}{why}")


@schedule_app.command("pause")
def schedule_pause(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Schedule name.")]
) -> None:
    """Stop a schedule from firing until resumed.  Example: flowctl schedule pause nightly"""
    st = _state(ctx)
    info = ops.pause_schedule(st.store, name, clock=st.clock)
    typer.echo(f"paused {info.name}")


@schedule_app.command("resume")
def schedule_resume(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Schedule name.")]
) -> None:
    """Resume a paused schedule from now (fires during the pause are not run).  Example: flowctl schedule resume nightly"""
    st = _state(ctx)
    info = ops.resume_schedule(st.store, name, clock=st.clock)
    nxt = info.row.next_fire_at
    tzname = info.spec.tz if info.spec else None
    typer.echo(
        f"resumed {info.name}: next fire {_zoned(nxt, tzname)} ({_relative(nxt, st.clock.now())})"
    )


@schedule_app.command("rm")
def schedule_rm(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Schedule name.")]
) -> None:
    """Delete a schedule and its history (its runs stay).  Example: flowctl schedule rm nightly"""
    st = _state(ctx)
    ops.remove_schedule(st.store, name)
    typer.echo(f"removed schedule {name}")


@schedule_app.command("trigger")
def schedule_trigger(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fire a schedule now, once (recorded as manual).  Example: flowctl schedule trigger nightly"""
    st = _state(ctx)
    done = ops.trigger_schedule(st.store, name, clock=st.clock)
    out = done.outcome
    if as_json:
        _emit_json(
            {
                "schedule": name,
                "action": out.action,
                "created": out.created,
                "detail": out.detail,
                "run": None if done.run is None else _run_json(done.run),
            }
        )
        return
    if done.run is None:
        typer.echo(f"{name}: no run started: {out.detail}")
    elif not out.created:
        typer.echo(f"{name}: already triggered at this instant: run {done.run.run_id}")
    elif done.run.run_at is None:
        typer.echo(f"triggered {name}: run {done.run.run_id} queued, {out.detail}")
    else:
        typer.echo(f"triggered {name}: run {done.run.run_id} queued (a daemon starts it)")


@schedule_app.command("explain")
def schedule_explain(
    ctx: typer.Context,
    expression: Annotated[str, typer.Argument(metavar="EXPR", help='Cron, e.g. "30 2 * * *".')],
    tz: Annotated[str | None, typer.Option("--tz", help="IANA zone (default: local).")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="How many fires.")] = 10,
    gap: Annotated[str, typer.Option("--gap", help=_POLICY_HELP["gap"])] = "shift",
    fold: Annotated[str, typer.Option("--fold", help=_POLICY_HELP["fold"])] = "first",
    from_: Annotated[
        str | None,
        typer.Option("--from", help="List fires after this time (ISO-8601; default now)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the next fires of a cron expression, flagging DST gaps and folds.  Example: flowctl schedule explain "30 2 * * *" --tz Europe/Paris"""
    st = _state(ctx)
    zone = tz or _default_tz(st)
    after = ops.parse_time(from_, st.clock, flag="--from", tz=zone) if from_ else None
    result = ops.explain_schedule(
        expression, clock=st.clock, tz=zone, count=count, gap=gap, fold=fold, after=after
    )
    if as_json:
        _emit_json(result)
        return
    typer.echo(result["rule"])
    rows = []
    n = 0
    for f in result["fires"]:
        at = datetime.fromisoformat(f["at"])
        if f["fires"]:
            n += 1
        note = ""
        if f["note"]:
            verdict = "" if f["fires"] else ": does not fire"
            note = f"{f['note']} [{f['policy']}{verdict}]"
        rows.append(
            [
                str(n) if f["fires"] else "-",
                _zoned(at, result["tz"]),
                f["weekday"][:3],
                at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                note,
            ]
        )
    _table(["#", f"LOCAL ({result['tz']})", "DAY", "UTC", "DST"], rows)


@schedule_app.command("sync")
def schedule_sync(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Load schedules declared in YAML workflows and flowctl.toml.  Example: flowctl schedule sync"""
    from flowctl.errors import ValidationError

    st = _state(ctx)
    try:
        report = _sync_declared(st)
    except ValidationError as e:
        for problem in e.problems:
            typer.echo(f"flowctl: {problem}", err=True)
        typer.echo("flowctl: schedule sync: nothing changed", err=True)
        raise typer.Exit(2) from None
    if as_json:
        _emit_json(report.to_json())
        return
    for label, names in report.to_json().items():
        if names:
            typer.echo(f"{label:<10}{', '.join(names)}")
    if not any(report.to_json().values()):
        typer.echo("no declared schedules")


@app.command()
def agenda(
    ctx: typer.Context,
    until: Annotated[str, typer.Option("--until", help="How far ahead, e.g. 7d.")] = "30d",
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many items.")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Every future wake, start, retry, timeout, deadline and schedule fire, in time order.  Example: flowctl agenda --until 7d"""
    st = _state(ctx)
    items = ops.agenda(st.store, clock=st.clock, until=until, limit=limit)
    if as_json:
        _emit_json([i.to_json() for i in items])
        return
    if not items:
        typer.echo(f"nothing scheduled in the next {until}")
        return
    now = st.clock.now()
    rows = [
        [
            _local(i.at),
            _relative(i.at, now),
            i.kind,
            i.run_id or f"schedule {i.schedule}",
            (f"{i.workflow}: " if i.workflow else "") + i.detail,
        ]
        for i in items
    ]
    _table(["WHEN", "", "KIND", "RUN / SCHEDULE", "WHAT"], rows)


def main() -> None:
    """Entry point: click usage errors become one line on stderr with exit code 2."""
    try:
        rv = app(standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else str(e))
        sys.exit(0)
    except click_exc.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "flowctl"
        typer.echo(f"flowctl: {e.format_message()} (see `{cmd} --help`)", err=True)
        sys.exit(2)
    except _EXITS as e:
        sys.exit(e.exit_code)
    except _ABORTS:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except FlowctlError as e:
        typer.echo(f"flowctl: {e}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


_ = UTC
