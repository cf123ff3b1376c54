"""The run commands: `flowctl run`, `ls`, `show`, `why`, `signal`, `cancel`, `redrive`,
`fork`, `rerun`, `pause`, `resume` and `wake`: parse -> flowctl.ops -> render.

flowctl/cli/__init__.py registers them on the app, in the order `flowctl --help` lists them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from flowctl import ops
from flowctl.cli.common import (
    RUN_LIST_JSON_HELP,
    State,
    _daemon_config,
    _emit_json,
    _local,
    _relative,
    _run_json,
    _state,
    _table,
)
from flowctl.durations import format_duration, parse_duration
from flowctl.errors import UsageError
from flowctl.limits import MAX_COUNT
from flowctl.model import EntryState, Run, RunStatus, iso

# -- rendering helpers ------------------------------------------------------


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
# run


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
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input-file",
            metavar="FILE|-",
            help="Queue one run per line of JSON objects (- reads stdin), in one transaction;"
            " with --key, line N's run gets key KEY:N. Needs --detach.",
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
    if input_file is not None:
        if not detach:
            raise UsageError("--input-file only queues runs: add --detach")
        if inputs or input_json is not None:
            raise UsageError("give -i/--input or --input-file, not both")
    data = ops.parse_inputs(inputs, input_json)
    run_at = None
    if in_ is not None:
        run_at = clock.now() + parse_duration(in_)
    elif at is not None:
        run_at = ops.parse_start_at(at, clock)
    deadline_at = (
        ops.parse_duration_or_time(deadline, clock, flag="--deadline") if deadline else None
    )
    if timeout is not None:
        parse_duration(timeout)
    if input_file is not None:
        _run_many(st, target, input_file, key, run_at, deadline_at, timeout, max_attempts, as_json)
        return
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


def _run_many(
    st: State,
    target: str,
    input_file: str,
    key: str | None,
    run_at: datetime | None,
    deadline_at: datetime | None,
    timeout: str | None,
    max_attempts: int | None,
    as_json: bool,
) -> None:
    """`run --detach --input-file`: every line checked, then all queued in one transaction."""
    if input_file == "-":
        text, source = sys.stdin.read(), "stdin"
    else:
        try:
            text = Path(input_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--input-file {input_file}: cannot read it ({e})") from None
        source = input_file
    inputs = ops.parse_input_lines(text, source)
    keys = None if key is None else [f"{key}:{i}" for i in range(1, len(inputs) + 1)]
    started = ops.start_many(
        st.open_store(create=True),
        target,
        inputs,
        clock=st.clock,
        keys=keys,
        workflows_dir=st.config.workflows_dir(),
        run_at=run_at,
        deadline=deadline_at,
        timeout=timeout,
        max_attempts=max_attempts,
    )
    if as_json:
        _emit_json([_run_summary(s.run, created=s.created) for s in started])
        return
    new = sum(s.created for s in started)
    known = f" ({len(started) - new} already existed for their keys)" if new < len(started) else ""
    typer.echo(f"queued {new} run(s) of {started[0].run.workflow}{known}")


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


# ---------------------------------------------------------------------------
# ls / show / why


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
        str | None,
        typer.Option(
            "--search",
            help="Match run id or input text among the newest 5,000 runs, or an exact run id"
            " or key.",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", max=MAX_COUNT, help="At most this many runs.")
    ] = 50,
    as_json: Annotated[bool, typer.Option("--json", help=RUN_LIST_JSON_HELP)] = False,
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


def show(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print run, checkpoints and timeline as JSON.")
    ] = False,
) -> None:
    """Show one run: header, checkpoints by call index, timeline.  Example: flowctl show m8rtkeef"""
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
    if detail.output_step is not None:  # the step running now: its last lines
        head = f"output    of step {detail.output_step} (`flowctl logs {r.run_id} -f`):"
        typer.echo("\n".join([head, *(f"          {line}" for line in detail.output_tail)]))
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


def why(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print {reason, message, ...facts} as JSON.")
    ] = False,
) -> None:
    """Say in one line why a run is not running (sleeping until T, no daemon, paused …).

    Example: flowctl why m8rtkeef --json
    """
    st = _state(ctx)
    answer = ops.why_run(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(answer.to_json())
    else:
        typer.echo(f"{answer.run_id} ({answer.status}): {answer.message}")


# ---------------------------------------------------------------------------
# operator actions


def send_signal(
    ctx: typer.Context,
    args: Annotated[
        list[str],
        typer.Argument(metavar="[RUN] NAME", help="Run id (or unique prefix) and signal name."),
    ],
    key: Annotated[
        str | None,
        typer.Option("--key", help="Signal the one active run with this idempotency key."),
    ] = None,
    data: Annotated[str, typer.Option("--data", help="JSON payload.")] = "null",
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """Send a signal to a run, by id or by key.  Example: flowctl signal m8rtkeef approved --data '{"by":"ana"}'  Example: flowctl signal --key user-42 replied"""
    st = _state(ctx)
    if len(args) != (1 if key is not None else 2):
        shape = "NAME (with --key)" if key is not None else "RUN NAME (or --key KEY NAME)"
        raise UsageError(f"signal takes {shape}, got {len(args)} argument(s)")
    payload, name = ops.parse_json_arg("--data", data), args[-1]
    if key is not None:
        run_obj = ops.send_signal_by_key(st.store, key, name, payload, clock=st.clock)
    else:
        run_obj = ops.send_signal(st.store, args[0], name, payload, clock=st.clock)
    if as_json:
        _emit_json(_run_json(run_obj))
    else:
        typer.echo(f"sent {name!r} to {run_obj.run_id} ({run_obj.status})")


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
    """Cancel a run; a running one is told at its next heartbeat.  Example: flowctl cancel m8rtkeef --reason dup"""
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
    """Give dead runs a fresh attempt budget, keeping their checkpoints.  Example: flowctl redrive m8rtkeef"""
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
    original is left as it was.  Example: flowctl fork m8rtkeef --from 3 --wait"""
    st = _state(ctx)
    data = ops.parse_inputs(None, input_json) if input_json is not None else None
    new = ops.fork(st.store, run_ref, from_index, clock=st.clock, input=data)
    origin = st.store.find_run(run_ref).run_id
    _start_copy(st, new, origin, from_index, wait, as_json)


def rerun(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    input_json: Annotated[str | None, _FORK_INPUT] = None,
    wait: Annotated[bool, _FORK_WAIT] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new run as JSON.")] = False,
) -> None:
    """Start the same workflow again with the same input (a fork from 0).
    Example: flowctl rerun m8rtkeef --wait"""
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


def pause(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id or unique prefix.")
    ] = None,
    workflow: Annotated[str | None, _PAUSE_WORKFLOW] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Pause a run: never claimed until resumed; its deadline still runs. A running run
    parks at its next durable call.  Example: flowctl pause m8rtkeef"""
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


def resume(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id or unique prefix.")
    ] = None,
    workflow: Annotated[str | None, _PAUSE_WORKFLOW] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Resume a paused run: due at once if its wake passed, else at its wake.
    Example: flowctl resume m8rtkeef"""
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


def wake(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """End a sleep early (recorded as an operator action).  Example: flowctl wake m8rtkeef"""
    st = _state(ctx)
    run_obj = ops.wake_now(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(_run_json(run_obj))
    else:
        typer.echo(f"woke {run_obj.run_id}: due now")
