"""`flowctl ls`: the run list, newest first: parse -> flowctl.ops -> render.

Annotations are evaluated when the module loads (no `from __future__ import annotations`):
Typer reads `ls`'s signature to build the command, and string annotations would each be
compiled again then, which `flowctl ls --help` pays for. The model (run rows), the
durations and the ops it calls load when a list is drawn, not for the help
(tests/test_startup_imports.py)."""

import sys
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from flowctl import ops
from flowctl.cli.common import (
    RUN_LIST_JSON_HELP,
    State,
    _cut,
    _emit_json,
    _first_error_line,
    _local,
    _relative,
    _run_json,
    _state,
    _table,
)
from flowctl.errors import UsageError
from flowctl.limits import MAX_COUNT
from flowctl.status import STATUS_NAMES, RunStatus

if TYPE_CHECKING:
    from flowctl.model import Run
    from flowctl.ops.explain import OperatorEvent


def ls(
    ctx: typer.Context,
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", help=f"Filter by status ({STATUS_NAMES}); repeatable."),
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
    watch: Annotated[
        bool, typer.Option("--watch", help="Redraw the list every --every until Ctrl-C.")
    ] = False,
    every: Annotated[
        str | None,
        typer.Option("--every", metavar="DURATION", help="With --watch: how often (default 2s)."),
    ] = None,
) -> None:
    """List runs, newest first. With --watch, redraw the list until Ctrl-C (in a terminal
    the screen is redrawn; piped, the list is printed again each time under a time line).
    Example: flowctl ls --status sleeping --json  Example: flowctl ls --watch --every 5s"""
    from flowctl.durations import parse_duration

    if every is not None and not watch:
        raise UsageError("--every goes with --watch: give both, or leave --every out")
    every = every or "2s"
    st = _state(ctx)
    ops.parse_statuses(status)  # bad input is exit 2 before the database is looked for
    if search is not None and not search.strip():
        raise UsageError("--search is empty: give text to look for, or leave it out")
    pause = parse_duration(every).total_seconds()
    if not watch:
        _list_once(st, status, workflow, search, limit, as_json)
        return
    if as_json:
        raise UsageError("give --watch or --json, not both (for JSON, run `flowctl ls --json`)")
    if pause <= 0:
        raise UsageError(f"--every must be a positive duration, got {every!r}")
    _watch(st, pause, every, lambda: _list_once(st, status, workflow, search, limit, False))


def _is_terminal() -> bool:
    return sys.stdout.isatty()


def _watch(st: State, pause: float, every: str, draw: Callable[[], None]) -> None:
    """Draw, wait `pause` seconds, again, until Ctrl-C (exit 0: that is how a watch ends).
    In a terminal the screen is cleared first; piped, each drawing follows a time line."""
    idle = threading.Event()
    term = _is_terminal()
    try:
        while True:
            stamp = f"every {every} · {_local(st.clock.now())} · Ctrl-C stops"
            if term:  # home and clear: the new list replaces the old on the screen
                typer.echo("\x1b[H\x1b[2J" + stamp, color=True)
            else:
                typer.echo(f"── {stamp}")
            draw()
            if not term:
                typer.echo("")
            sys.stdout.flush()
            st.clock.wait(idle, pause)
    except KeyboardInterrupt:
        return


def _list_once(
    st: State,
    status: list[str] | None,
    workflow: str | None,
    search: str | None,
    limit: int,
    as_json: bool,
) -> None:
    runs = ops.list_runs(
        st.run_list, statuses=status, workflow=workflow, search=search, limit=limit
    )
    total = None
    if len(runs) == limit:
        total = ops.count_listed(st.run_list, statuses=status, workflow=workflow, search=search)
    if as_json:
        _emit_json([_run_json(r) for r in runs])
    elif not runs:
        typer.echo("no runs")
    else:
        _run_table(runs, st.clock.now(), ops.cancel_requests(st.run_list, runs))
    if total is not None and total > limit:
        _cut(limit, total, "runs")  # on stderr: stdout stays the table or one JSON document


def _note(run: "Run", asked: "dict[str, OperatorEvent]") -> str:
    """The last column: the error a run ended with (a cancel says who cancelled it), or a
    cancel that is pending on a running run, and who asked for it."""
    if run.run_id in asked:
        return ops.cancel_pending_text(run, asked[run.run_id])
    if run.held_at is not None or run.flow_wait is not None:
        from flowctl.flow.explain import held_note  # only where flow control holds a run

        note = held_note(run)
        if note is not None:
            return note
    by = (run.error or {}).get("by") if run.status is RunStatus.CANCELLED else None
    line = _first_error_line(run)
    if by and line.startswith("Cancelled"):
        return f"Cancelled by {by}{line[len('Cancelled') :]}"
    return line


def _held(run: "Run") -> bool:
    if run.held_at is None and run.flow_wait is None:
        return False
    from flowctl.flow.explain import is_held

    return is_held(run)


def _run_table(runs: "list[Run]", now: datetime, asked: "dict[str, OperatorEvent]") -> None:
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
                f"{r.status} (held)" if _held(r) else str(r.status),
                f"{r.attempt}/{r.max_attempts}",
                _local(r.created_at),
                nxt,
                _note(r, asked),
            ]
        )
    # NOTE: the error a run ended with, or a cancel pending on it; ids, statuses and times
    # are never cut; in a narrow terminal ATTEMPT goes first, then CREATED, NOTE, ...
    headers = ["RUN", "WORKFLOW", "STATUS", "ATTEMPT", "CREATED", "NEXT/ENDED", "NOTE"]
    _table(headers, rows, keep=(0, 2, 4), order=(0, 2, 1, 5, 6, 4, 3))
