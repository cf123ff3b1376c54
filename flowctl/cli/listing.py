"""`flowctl ls`: the run list, newest first: parse -> flowctl.ops -> render."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from flowctl import ops
from flowctl.cli.common import (
    RUN_LIST_JSON_HELP,
    _cut,
    _emit_json,
    _first_error_line,
    _local,
    _relative,
    _run_json,
    _state,
    _table,
)
from flowctl.limits import MAX_COUNT
from flowctl.model import Run, RunStatus


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
    total = None
    if len(runs) == limit:
        total = ops.count_listed(st.store, statuses=status, workflow=workflow, search=search)
    if as_json:
        _emit_json([_run_json(r) for r in runs])
    elif not runs:
        typer.echo("no runs")
    else:
        _run_table(runs, st.clock.now())
    if total is not None and total > limit:
        _cut(limit, total, "runs")  # on stderr: stdout stays the table or one JSON document


def _run_table(runs: list[Run], now: datetime) -> None:
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
