"""Operator actions on runs: `flowctl signal`, `cancel`, `redrive`, `pause`, `resume` and
`wake`: parse -> flowctl.ops -> render."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

import typer

from flowctl import ops
from flowctl.cli.common import State, _emit_json, _local, _relative, _run_json, _state
from flowctl.errors import UsageError
from flowctl.model import Run, RunStatus


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
    """Send a signal to a run, by id or by key.  Example: flowctl signal m8rtkeefq3x7bz2w approved --data '{"by":"ana"}'  Example: flowctl signal --key user-42 replied"""
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
    """Cancel a run; a running one is told at its next heartbeat.  Example: flowctl cancel m8rtkeefq3x7bz2w --reason dup"""
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


_REDRIVE_DEADLINE = typer.Option(
    "--deadline",
    metavar="TIME|DURATION",
    help="A new deadline for the run, as `run --deadline` takes it (its own is kept by default).",
)
_NO_DEADLINE = typer.Option("--no-deadline", help="Redrive it with no deadline at all.")


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
    deadline: Annotated[str | None, _REDRIVE_DEADLINE] = None,
    no_deadline: Annotated[bool, _NO_DEADLINE] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Give a dead or cancelled run a fresh attempt budget, keeping its checkpoints and its
    deadline; one past its deadline needs --deadline or --no-deadline (--all: every dead
    run).  Example: flowctl redrive m8rtkeefq3x7bz2w --deadline 2h"""
    st = _state(ctx)
    if all_ == (run_ref is not None):
        raise UsageError("give a RUN, or --all with optional --workflow/--since filters")
    late: list[Run] = []
    if all_:
        since_at = ops.parse_since(since, st.clock) if since else None
        done = ops.redrive_many(
            st.store,
            clock=st.clock,
            workflow=workflow,
            since=since_at,
            deadline=deadline,
            no_deadline=no_deadline,
        )
        runs, late = done.runs, done.past_deadline
    else:
        one = ops.redrive(
            st.store, run_ref or "", clock=st.clock, deadline=deadline, no_deadline=no_deadline
        )
        runs = [one]
    if late:
        typer.echo(
            f"flowctl: {len(late)} dead run(s) past their deadline left dead (e.g. {late[0].run_id}):"
            " give --deadline or --no-deadline to redrive them",
            err=True,
        )
    if as_json:
        _emit_json([_run_json(r) for r in runs])
        return
    for r in runs:
        typer.echo(f"redriven {r.run_id} ({r.workflow}): queued")
    if all_:
        typer.echo(f"{len(runs)} run(s) redriven")


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
    parks at its next durable call.  Example: flowctl pause m8rtkeefq3x7bz2w"""
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
    Example: flowctl resume m8rtkeefq3x7bz2w"""
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
    """End a sleep early (recorded as an operator action).  Example: flowctl wake m8rtkeefq3x7bz2w"""
    st = _state(ctx)
    run_obj = ops.wake_now(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(_run_json(run_obj))
    else:
        typer.echo(f"woke {run_obj.run_id}: due now")
