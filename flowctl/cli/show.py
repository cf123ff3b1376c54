"""`flowctl show` (one run: header, checkpoints, timeline) and `flowctl why`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flowctl import ops
from flowctl.cli.common import (
    _emit_json,
    _first_error_line,
    _local,
    _relative,
    _shown_json,
    _state,
)
from flowctl.durations import format_duration
from flowctl.errors import UsageError
from flowctl.limits import SHOW_STEPS, one_line, terminal_safe
from flowctl.model import EntryState, Run, RunStatus, human_value
from flowctl.tracing.ids import run_trace

if TYPE_CHECKING:  # annotations only: `show` opens the store through the State
    from flowctl.store import Store


def _clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters; a cut one ends with "…" (every cut says so)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe_value(value: Any) -> str:
    """A command step's result as `exit 0 · out: last line`; anything else as short JSON."""
    if isinstance(value, dict) and "exit_code" in value and "stdout" in value:
        out = str(value.get("stdout") or "").strip().splitlines()
        err = str(value.get("stderr") or "").strip().splitlines()
        text = f"exit {value['exit_code']}"
        if out:
            text += f" · out: {_clip(out[-1], 50)}"
        if err:
            text += f" · err: {_clip(err[-1], 40)}"
        return text
    text = _shown_json(value)
    return text if len(text) <= 60 else text[:59] + "…"


_RUN = typer.Argument(metavar="RUN", help="Run id or unique prefix.")
_SHOW_JSON = typer.Option("--json", help="Print run, checkpoints and timeline as JSON.")
_STEPS = typer.Option(
    "--steps",
    metavar="N",
    help=f"Show the newest N checkpoints and timeline events (default {SHOW_STEPS}).",
)
_SKIP = typer.Option("--skip", metavar="K", help="Leave out the K newest first: page back.")
_ALL = typer.Option("--all", help="Show every checkpoint and timeline event.")


def show(
    ctx: typer.Context,
    run_ref: Annotated[str, _RUN],
    as_json: Annotated[bool, _SHOW_JSON] = False,
    steps: Annotated[int | None, _STEPS] = None,
    skip: Annotated[int, _SKIP] = 0,
    every: Annotated[bool, _ALL] = False,
) -> None:
    """Show one run: header, checkpoints by call index, timeline.  Example: flowctl show m8rtkeefq3x7bz2w

    A long run shows its newest checkpoints and events and says how many it left out.
    """
    if every and (steps is not None or skip):
        raise UsageError("give --all, or --steps/--skip to page, not both")
    st = _state(ctx)
    shown = None if every else (SHOW_STEPS if steps is None else steps)
    detail = ops.show_run(st.store, run_ref, clock=st.clock, steps=shown, skip=skip)
    if as_json:
        _emit_json(detail.to_json())
        return
    _print_header(st.store, detail, st.clock.now())
    _print_error(detail.run)
    _print_now(detail)
    typer.echo("")
    _print_checkpoints(detail)
    _print_children(detail)
    _print_timeline(detail)


def _print_header(store: Store, detail: ops.RunDetail, now: datetime) -> None:
    """What the run is and where it stands: status (and why, while it is not finished),
    input, attempt, times, budget, schedule, parent, result."""
    r = detail.run
    typer.echo(f"run       {r.run_id}")
    typer.echo(f"workflow  {r.workflow}  ({r.kind}: {r.target})")
    if r.status.is_terminal:
        typer.echo(f"status    {r.status} at {_local(r.finished_at)}")
    else:
        answer = ops.explain_detail(detail, now)
        said = answer.message if answer else ops.why(detail, now)
        typer.echo(f"status    {r.status} — {one_line(said)}")
        asked = ops.cancel_requests(store, [r]).get(r.run_id)
        if asked is not None:  # who asked, and that the run has not stopped yet
            text = ops.cancel_pending_text(r, asked).removeprefix("cancel ")
            typer.echo(
                f"cancel    {text} (at {_local(asked.at)}); it ends cancelled when its"
                " handler stops"
            )
    typer.echo(f"input     {_shown_json(r.shown_input)}")
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
    typer.echo(f"trace     {run_trace(r.run_id, r.traceparent).trace_id}")
    if r.status is RunStatus.COMPLETED:
        typer.echo(f"result    {_shown_json(r.result)}")


def _print_error(r: Run) -> None:
    """The run's error: its first line and fields, and for a dead run the traceback's
    (or the command's stderr's) last lines."""
    if not r.error:
        return
    typer.echo(f"error     {_first_error_line(r)}")
    for k in ("exit_code", "dead_reason", "by"):  # by: who cancelled it
        if k in r.error:
            typer.echo(f"          {k}: {one_line(str(r.error[k]))}")
    if r.status is not RunStatus.DEAD:
        return
    tb = r.error.get("traceback")
    tail = r.error.get("stderr_tail")
    if not tb and tail and str(tail).strip():
        typer.echo("          stderr (last lines):")
        tb = tail
    if tb:
        lines = str(tb).rstrip().splitlines()[-12:]
        typer.echo("          " + "\n          ".join(terminal_safe(x) for x in lines))


def _print_now(detail: ops.RunDetail) -> None:
    """What the run published, the notes on it, and the output of the step running now."""
    for key, (value, _at) in detail.published.items():
        typer.echo(f"published {key} = {_shown_json(value)}")
    for note in detail.notes:
        typer.echo(f"note      {one_line(note)}")
    if detail.output_step is not None:  # the step running now: its last lines
        head = f"output    of step {detail.output_step} (`flowctl logs {detail.run.run_id} -f`):"
        tail = (f"          {terminal_safe(line)}" for line in detail.output_tail)
        typer.echo("\n".join([head, *tail]))


def _print_checkpoints(detail: ops.RunDetail) -> None:
    """The page of checkpoints by call index (with what it left out), the version markers
    and the signals buffered for the run."""
    typer.echo("checkpoints")
    if not detail.checkpoints and not detail.versions:
        typer.echo("  (none)")
    older, newer = _cut(detail, detail.checkpoints_total, len(detail.checkpoints))
    if older:
        typer.echo(_more("checkpoints", older, "earlier", detail))
    for c in detail.checkpoints:
        extra = ""
        if c.wake_at is not None:
            extra = f" wake_at {_local(c.wake_at)}"
        if c.state is EntryState.ERROR:
            err = c.value or {}
            extra += f" {err.get('type')}: {str(err.get('message', '')).splitlines()[0] if err.get('message') else ''}"
        elif c.kind == "fanout" and isinstance(c.value, dict):
            extra += (
                f" → {c.value.get('count')} branches {c.name}[0..{c.value.get('count', 1) - 1}]"
            )
        elif c.kind == "step" and c.value is not None:
            extra += " → " + _describe_value(c.value)
        took = f" ({format_duration(c.duration)})" if c.duration is not None else ""
        line = f"  #{c.call_index:<3} {c.kind:<7} {c.name:<20} {c.state}{took}{extra}"
        typer.echo(one_line(line))
    if newer:
        typer.echo(_more("checkpoints", newer, "newer", detail))
    for cid, v, _at in detail.versions:
        typer.echo(f"  ver  {cid} = {v}")
    if detail.pending_signals:
        typer.echo("")
        typer.echo("buffered signals")
        for name, payload, at in detail.pending_signals:
            typer.echo(f"  {one_line(name)} {_shown_json(payload)} (sent {_local(at)})")


CHILDREN_SHOWN = 20  # child runs `show` lists; --json lists every one


def _print_children(detail: ops.RunDetail) -> None:
    """The run's child runs, by the call (and branch) that started each."""
    if not detail.children:
        return
    running = sum(1 for c in detail.children if not c.run.status.is_terminal)
    typer.echo("")
    typer.echo(f"children  ({len(detail.children)}, {running} still running)")
    for c in detail.children[:CHILDREN_SHOWN]:
        at = f"#{c.call_index}" if c.call_index is not None else "#?"
        branch = c.branch or c.run.workflow
        typer.echo(one_line(f"  {at:<4} {branch:<28} {c.run.run_id}  {c.run.status}"))
    if len(detail.children) > CHILDREN_SHOWN:
        left = len(detail.children) - CHILDREN_SHOWN
        typer.echo(f"  … {left} more (flowctl show {detail.run.run_id} --json lists all)")


def _print_timeline(detail: ops.RunDetail) -> None:
    """The page of timeline events, oldest first, with what it left out."""
    typer.echo("")
    typer.echo("timeline")
    older, newer = _cut(detail, detail.timeline_total, len(detail.timeline))
    if older:
        typer.echo(_more("timeline events", older, "earlier", detail))
    for e in detail.timeline:
        data = " ".join(f"{k}={human_value(v)}" for k, v in e.data.items())
        typer.echo(one_line(f"  {_local(e.at, ms=True)}  {e.type:<20} {data}"))
    if newer:
        typer.echo(_more("timeline events", newer, "newer", detail))


def _cut(detail: ops.RunDetail, total: int, shown: int) -> tuple[int, int]:
    """(older, newer) rows a page leaves out of `total`: the page is the newest after skip."""
    newer = min(detail.skip, total)
    return max(total - newer - shown, 0), newer


def _more(noun: str, n: int, which: str, detail: ops.RunDetail) -> str:
    """The line that says what a page left out and how to see it."""
    run, step = detail.run.run_id, detail.steps or SHOW_STEPS
    if which == "earlier":
        how = f"--skip {detail.skip + step} for the page before, --steps N for more, --all for all"
    else:
        how = f"--skip {max(detail.skip - step, 0)} for the page after"
    return f"  … {n:,} {which} {noun} not shown (flowctl show {run} {how})"


def why(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print {reason, message, ...facts} as JSON.")
    ] = False,
) -> None:
    """Say in one line why a run is not running (sleeping until T, no daemon, paused …).

    Example: flowctl why m8rtkeefq3x7bz2w --json
    """
    st = _state(ctx)
    answer = ops.why_run(st.store, run_ref, clock=st.clock)
    if as_json:
        _emit_json(answer.to_json())
    else:
        typer.echo(f"{answer.run_id} ({answer.status}): {one_line(answer.message)}")
