"""Reading the run list, shared by every front end: `flowctl ls`, the TUI's lists and
counts, Client.list. Separate from flowctl.ops.runs so a read loads the store and the
statuses only, never the workflow loader (`flowctl ls` start-up, issue 17 item 4;
tests/test_startup_imports.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from flowctl.errors import UsageError
from flowctl.limits import check_search
from flowctl.model import CallKind, Run, RunStatus
from flowctl.ops.parse import check_workflow_filter, parse_statuses

if TYPE_CHECKING:  # the caller opened the store; this module needs only its interface
    from flowctl.ops.explain import OperatorEvent
    from flowctl.store import RunListing


def count_listed(
    store: RunListing,
    *,
    statuses: list[str] | None = None,
    workflow: str | None = None,
    search: str | None = None,
) -> int:
    """How many runs `list_runs` would give with no limit, so a cut list can say so."""
    counts = count_runs(store, workflow=workflow, search=search)
    wanted = parse_statuses(statuses)
    return sum(n for s, n in counts.items() if wanted is None or s in wanted)


def list_runs(
    store: RunListing,
    *,
    statuses: list[str] | None = None,
    workflow: str | None = None,
    search: str | None = None,
    limit: int = 50,
    offset: int = 0,
    order: str = "created_desc",
) -> list[Run]:
    if limit < 1:
        raise UsageError(lambda f: f"{f('limit')} must be at least 1, got {limit}", field="limit")
    check_workflow_filter(workflow)
    check_search(search)
    return store.list_runs(
        statuses=parse_statuses(statuses),
        workflow=workflow,
        search=search,
        limit=limit,
        offset=offset,
        order=order,
    )


def count_runs(
    store: RunListing, *, workflow: str | None = None, search: str | None = None
) -> dict[RunStatus, int]:
    """Runs per status, narrowed exactly as `list_runs` narrows, so counts match the lists."""
    check_workflow_filter(workflow)
    check_search(search)
    if not search:
        return store.count_by_status(workflow)
    return store.count_by_status_matching(workflow, search)


def waiting_for(store: RunListing, run_ids: list[str]) -> dict[str, str]:
    """What each run in a page is parked on ("signal 'approved'", "child run"), in one query.

    A list of waiting runs shows this without reading each run's journal.
    """
    out = {}
    for run_id, (kind, name) in store.pending_calls(run_ids).items():
        out[run_id] = f"signal {name!r}" if kind is CallKind.SIGNAL else f"{kind} {name!r}"
    return out


def workflow_names(store: RunListing) -> list[str]:
    """Every workflow name that has runs, sorted: the choices for a workflow filter."""
    return store.workflows_seen()


def cancel_requests(store: RunListing, runs: Sequence[Run]) -> dict[str, OperatorEvent]:
    """Who asked to cancel each running run whose cancel is pending (its handler has not
    stopped yet), and when: the newest "cancel requested" timeline event. One read per
    such run; a page holds few (a cancel is honoured at the next heartbeat, or as soon as
    a Python step returns)."""
    out = {}
    for run in runs:
        if run.status is RunStatus.RUNNING and run.cancel_requested:
            from flowctl.ops.explain import OperatorEvent  # only then: `ls` start-up stays light

            ev = store.last_event(run.run_id, ["cancel requested"])
            by = ev.data.get("by") if ev is not None else None
            at = ev.at if ev is not None else run.created_at
            out[run.run_id] = OperatorEvent(at, str(by) if by else None)
    return out


def cancel_pending_text(run: Run, asked: OperatorEvent | None) -> str:
    """What a list says of a running run whose cancel is pending: who asked, that it is
    pending, and the reason given: `cancel pending, asked by ana: wrong input`."""
    by = f", asked by {asked.by}" if asked is not None and asked.by else ""
    reason = (run.cancel_reason or "").strip().splitlines()
    return f"cancel pending{by}" + (f": {reason[0]}" if reason else "")
