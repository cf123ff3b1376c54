"""The TUI's views: which runs each tab lists, in what order, with which columns, and
the query that loads one page of a view.

`load_page` is what the app's page worker runs in a thread; it reads through
`flowctl.ops` exactly as the CLI does, so the TUI has no SQL of its own. Nothing here
touches a widget, which keeps the queries usable from a benchmark or a test without an app.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rich.text import Text

from flowctl import ops
from flowctl.durations import format_duration
from flowctl.flow.explain import is_held
from flowctl.model import Run, RunStatus
from flowctl.ops import schedules as schedule_ops
from flowctl.ops.explain import OperatorEvent
from flowctl.store import Store
from flowctl.tui.render import (
    ago,
    compact_json,
    countdown,
    error_first_line,
    table_cell,
    to_minute,
)

# ---------------------------------------------------------------------------
# Views: which runs each tab lists, in what order, with which columns


@dataclass(frozen=True)
class Row:
    """One listed run, plus what a page query learned about it beyond the runs table."""

    run: Run
    waiting_for: str | None = None
    cancel_asked: OperatorEvent | None = None  # running with a cancel pending: who asked


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    cell: Callable[[Row, datetime], Text]
    live: bool = False  # depends on `now`: re-rendered every tick from the clock
    width: int | None = None  # at most this wide (a countdown: room to tick without a re-fit)
    # Free text (names, input, errors) may be cut to fit the pane, ending with "…"; any
    # other cell (a time, a count, a status) is shown whole, or its column is hidden.
    cut: bool = False


@dataclass(frozen=True)
class View:
    key: str
    number: str
    title: str
    short: str  # the tab label when the terminal is narrow
    statuses: tuple[RunStatus, ...] | None  # None: every status (no filter, so the index serves it)
    order: str  # a Store.list_runs order
    columns: tuple[Column, ...]
    # Tabbed only while it has runs or is open (its key always works): a rare state does not
    # crowd the tab bar of an 80-column terminal.
    optional: bool = False


def _until_cell(row: Row, now: datetime) -> Text:
    text = countdown(row.run.run_at, now)
    return table_cell(text, "bold" if text.startswith("late") else "")


def _due_on_resume(run: Run, now: datetime) -> str:
    """When `flowctl resume` would make a paused run due: at once once its wake passed."""
    if run.paused_run_at is not None and run.paused_run_at <= now:
        return "at once"
    return countdown(run.paused_run_at, now)


def _error_field(run: Run, key: str) -> str:
    """One field of a run's recorded error: who cancelled it and why, for the list."""
    value = (run.error or {}).get(key)
    lines = [] if value is None else str(value).splitlines()
    return lines[0] if lines else ""


RUN_ID = Column("run_id", "RUN ID", lambda r, now: table_cell(r.run.run_id))
WORKFLOW = Column(
    "workflow", "WORKFLOW", lambda r, now: table_cell(r.run.workflow, limit=24), cut=True
)
ATTEMPT = Column(
    "attempt", "ATTEMPT", lambda r, now: table_cell(f"{r.run.attempt}/{r.run.max_attempts}")
)
INPUT = Column(
    "input", "INPUT", lambda r, now: table_cell(compact_json(r.run.shown_input), "dim"), cut=True
)

VIEWS: tuple[View, ...] = (
    View(
        "running",
        "1",
        "Running",
        "Run",
        (RunStatus.RUNNING,),
        "created_desc",
        (
            RUN_ID,
            WORKFLOW,
            ATTEMPT,
            Column(
                "started",
                "STARTED",
                lambda r, now: table_cell(ago(r.run.started_at, now)),
                live=True,
                width=12,
            ),
            Column(
                "spent",
                "EXEC SPENT",
                lambda r, now: table_cell(
                    format_duration(r.run.exec_spent)
                    + (f" / {format_duration(r.run.timeout)}" if r.run.timeout else "")
                ),
            ),
            Column(
                "owner",
                "OWNER",
                lambda r, now: table_cell(
                    ops.cancel_pending_text(r.run, r.cancel_asked)
                    if r.run.cancel_requested
                    else (r.run.lease_owner or ""),
                    "bold" if r.run.cancel_requested else "dim",
                ),
                cut=True,
            ),
        ),
    ),
    View(
        "sleeping",
        "2",
        "Sleeping",
        "Sleep",
        (RunStatus.SLEEPING,),
        "run_at",
        (
            RUN_ID,
            WORKFLOW,
            Column("wakes_in", "WAKES IN", _until_cell, live=True, width=12),
            Column("wake_at", "WAKE AT", lambda r, now: table_cell(to_minute(r.run.run_at))),
            INPUT,
        ),
    ),
    View(
        "waiting",
        "3",
        "Waiting",
        "Wait",
        (RunStatus.WAITING,),
        "run_at",
        (
            RUN_ID,
            WORKFLOW,
            Column(
                "waiting_for",
                "WAITING FOR",
                lambda r, now: table_cell(r.waiting_for or "?", limit=28),
                cut=True,
            ),
            Column("timeout_in", "TIMEOUT IN", _until_cell, live=True, width=12),
            INPUT,
        ),
    ),
    View(
        "queued",
        "4",
        "Queued",
        "Queue",
        (RunStatus.QUEUED,),
        "run_at",
        (
            RUN_ID,
            WORKFLOW,
            Column("due_in", "DUE IN", _until_cell, live=True, width=12),
            ATTEMPT,
            INPUT,
        ),
    ),
    View(
        "dead",
        "5",
        "Dead",
        "Dead",
        (RunStatus.DEAD,),
        "finished_desc",
        (
            RUN_ID,
            WORKFLOW,
            Column(
                "died",
                "DIED",
                lambda r, now: table_cell(ago(r.run.finished_at, now)),
                live=True,
                width=12,
            ),
            Column(
                "error",
                "ERROR",
                lambda r, now: table_cell(error_first_line(r.run.error), limit=60),
                cut=True,
            ),
        ),
    ),
    View(
        "completed",
        "6",
        "Completed",
        "Done",
        (RunStatus.COMPLETED,),
        "finished_desc",
        (
            RUN_ID,
            WORKFLOW,
            Column(
                "finished",
                "FINISHED",
                lambda r, now: table_cell(ago(r.run.finished_at, now)),
                live=True,
                width=12,
            ),
            Column(
                "took",
                "TOOK",
                lambda r, now: table_cell(
                    format_duration(r.run.finished_at - r.run.created_at)
                    if r.run.finished_at
                    else "—"
                ),
            ),
            INPUT,
        ),
    ),
    View("schedules", "7", "Schedules", "Sched", (), "", ()),
    View(
        "all",
        "8",
        "All",
        "All",
        None,
        "created_desc",
        (
            RUN_ID,
            WORKFLOW,
            Column("status", "STATUS", lambda r, now: table_cell(status_text(r.run))),
            Column(
                "created",
                "CREATED",
                lambda r, now: table_cell(ago(r.run.created_at, now)),
                live=True,
                width=12,
            ),
            INPUT,
        ),
    ),
    View(
        "paused",
        "9",
        "Paused",
        "Pause",
        (RunStatus.PAUSED,),
        "created_desc",
        (
            RUN_ID,
            WORKFLOW,
            Column(
                "was",
                "WAS",
                lambda r, now: table_cell(str(r.run.paused_status or "")),
            ),
            Column(
                "due_on_resume",
                "DUE ON RESUME",
                lambda r, now: table_cell(_due_on_resume(r.run, now)),
                live=True,
                width=13,
            ),
            Column(
                "deadline_in",
                "DEADLINE IN",
                lambda r, now: table_cell(countdown(r.run.deadline, now)),
                live=True,
                width=12,
            ),
            INPUT,
        ),
        optional=True,
    ),
    View(
        "cancelled",
        "0",
        "Cancelled",
        "Cancel",
        (RunStatus.CANCELLED,),
        "finished_desc",
        (
            RUN_ID,
            WORKFLOW,
            Column(
                "cancelled",
                "CANCELLED",
                lambda r, now: table_cell(ago(r.run.finished_at, now)),
                live=True,
                width=12,
            ),
            Column(
                "by", "BY", lambda r, now: table_cell(_error_field(r.run, "by"), limit=24), cut=True
            ),
            Column(
                "reason",
                "REASON",
                lambda r, now: table_cell(_error_field(r.run, "message"), "dim", limit=48),
                cut=True,
            ),
        ),
        optional=True,
    ),
)
VIEWS_BY_KEY = {v.key: v for v in VIEWS}


# ---------------------------------------------------------------------------
# Schedules


def list_schedule_dicts(store: Store) -> list[dict[str, Any]]:
    """Every schedule as its `flowctl schedule ls --json` object, plus the words `schedule
    ls` shows for it in "state" (`active`, `paused (yaml)`), never a raw boolean."""
    out = []
    for info in schedule_ops.list_schedules(store):
        item = info.to_json()
        source = "" if item.get("source") in (None, "cli") else f" ({item['source']})"
        out.append({**item, "state": ("paused" if item.get("paused") else "active") + source})
    return out


# Columns of the Schedules view, when a schedule has them ("rule" already names the zone).
SCHEDULE_FIELDS = ("name", "state", "rule", "next_fire_at", "last_fire_at", "target")


# ---------------------------------------------------------------------------
# Loading one page of a view


@dataclass(frozen=True)
class PageQuery:
    """Everything that decides which rows a view shows; a change means a new query."""

    view: str
    workflow: str | None
    search: str | None
    limit: int
    # Also read wake lateness, over the wakes recorded since this instant; None: not this
    # time (the app asks every LATENESS_SECONDS, not at every page).
    wakes_since: datetime | None = None


@dataclass(frozen=True)
class DaemonUp:
    """A live daemon on the database, as the header shows it."""

    owner: str
    started_at: datetime
    held: int  # runs it holds a lease on now


@dataclass(frozen=True)
class WakeLateness:
    """How late timers woke recently: `flowctl status`'s figure, for the header."""

    wakes: int  # wakes counted (at most LATENESS_SAMPLE, the newest)
    p99: float | None  # seconds; None when nothing woke in the window


LATENESS_WINDOW = timedelta(hours=1)  # the window `flowctl status` reports too
LATENESS_SAMPLE = 1000  # newest wakes read: one index range scan, bounded however busy


def wake_lateness(store: Store, since: datetime) -> WakeLateness:
    """The p99 lateness of the newest wakes since `since`, ranked as `flowctl status`
    ranks (the value at index int(0.99 n)); reads the timeline's (type, at) index only."""
    lates = sorted(store.recent_wakes(since, limit=LATENESS_SAMPLE))
    if not lates:
        return WakeLateness(0, None)
    return WakeLateness(len(lates), lates[min(len(lates) - 1, int(0.99 * len(lates)))])


@dataclass
class Page:
    """One answer to a PageQuery; `error` is set instead when the query failed."""

    query: PageQuery
    rows: list[Row] = field(default_factory=list)
    daemons: list[DaemonUp] = field(default_factory=list)  # live ones; empty: none
    counts: dict[RunStatus, int] = field(default_factory=dict)
    schedules: list[dict[str, Any]] = field(default_factory=list)
    lateness: WakeLateness | None = None  # None: not read this time (query.wakes_since)
    error: str | None = None


def live_daemons(store: Store) -> list[DaemonUp]:
    """The registered daemons whose process still runs (a SIGKILLed one's row stays until
    the next daemon clears it, so registration alone does not say one is running)."""
    from flowctl.ids import owner_alive

    return [
        DaemonUp(d.owner, d.started_at, store.held_count(d.owner))
        for d in store.daemons()
        if owner_alive(d.owner)
    ]


def load_page(store: Store, query: PageQuery) -> Page:
    """One view's visible page and the per-status counts, under the current filter/search."""
    view = VIEWS_BY_KEY[query.view]
    page = Page(query)
    page.counts = ops.count_runs(store, workflow=query.workflow, search=query.search)
    page.daemons = live_daemons(store)
    if query.wakes_since is not None:
        page.lateness = wake_lateness(store, query.wakes_since)
    # Schedules are a handful of rows: cheap to list with every page, so their count is live.
    page.schedules = list_schedule_dicts(store)
    if view.key == "schedules":
        return page
    runs = ops.list_runs(
        store,
        statuses=None if view.statuses is None else [str(s) for s in view.statuses],
        workflow=query.workflow,
        search=query.search,
        limit=query.limit,
        order=view.order,
    )
    waits = ops.waiting_for(store, [r.run_id for r in runs]) if view.key == "waiting" else {}
    asked = ops.cancel_requests(store, runs) if view.key == "running" else {}
    page.rows = [Row(r, waits.get(r.run_id), asked.get(r.run_id)) for r in runs]
    return page


def status_text(run: Run) -> str:
    """A run's status as the lists show it: `queued (held)` while flow control holds it."""
    return f"{run.status} (held)" if is_held(run) else str(run.status)
