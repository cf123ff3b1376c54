"""`flowctl tui`: a live, keyboard-first view of what is running, sleeping, waiting and dead.

Only this module imports Textual, and only `flowctl tui` imports this module, so every
other command starts without paying for Textual.

How it stays instant on a database with 100,000 runs:

- One view is on screen at a time, and only that view's visible page is queried
  (PAGE_SIZE rows; the next page loads when the cursor reaches the end), plus one
  count per status for the tab bar. Nothing ever reads every row.
- `PRAGMA data_version` (a read of microseconds) is polled every POLL_SECONDS; the page
  is re-queried only when another connection (the daemon, the CLI) committed.
- Countdowns ("wakes in 2d03h") are re-rendered every second from the injected clock,
  without touching the database, so a FakeClock makes every screen reproducible.

Every query and every action runs in a thread worker through `flowctl.ops`, exactly
as the CLI calls it; workers post messages, and only message handlers touch widgets.
The TUI writes no SQL of its own.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Button, DataTable, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from flowctl import ops
from flowctl.clock import Clock
from flowctl.durations import format_duration
from flowctl.errors import FlowctlError
from flowctl.model import EntryState, JournalEntry, Run, RunStatus, TimelineEvent
from flowctl.store import Store

PAGE_SIZE = 200  # rows per query; the next page is fetched when the cursor reaches the end
POLL_SECONDS = 0.5  # how often data_version is read
SEARCH_DEBOUNCE = 0.25  # seconds of no typing before a search query runs
TICK_SECONDS = 1.0  # how often countdowns and the clock re-render (no database reads)
TIMELINE_LIMIT = 200  # newest timeline events shown in the detail pane
CHECKPOINT_LIMIT = 300  # newest checkpoints shown in the detail pane
TEXT_LIMIT = 4000  # characters of input/result/traceback shown before "…"


# ---------------------------------------------------------------------------
# Formatting: pure functions of a run and `now`, so screens are reproducible


def _when(at: datetime | None) -> str:
    """An instant as the operator reads it: UTC, to the second."""
    return "—" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def _minute(at: datetime | None) -> str:
    """An instant for a list column, where the year matters more than the seconds."""
    return "—" if at is None else at.strftime("%Y-%m-%d %H:%M")


def _short_when(at: datetime) -> str:
    return at.strftime("%m-%d %H:%M:%S")


def _until(at: datetime | None, now: datetime) -> str:
    """A countdown to `at`: "2d03h", "due", or "late 5m03s" when nothing has acted on it."""
    if at is None:
        return "—"
    seconds = (at - now).total_seconds()
    if seconds > 0:
        return format_duration(at - now)
    if seconds > -1:
        return "due"
    return f"late {format_duration(now - at)}"


def _ago(at: datetime | None, now: datetime) -> str:
    return "—" if at is None else f"{format_duration(now - at)} ago"


def _compact_json(value: Any, limit: int = 48) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "\n…"


def error_first_line(error: dict[str, Any] | None) -> str:
    """`Type: first line of the message`, as the dead-letter list shows it."""
    if not error:
        return ""
    message = str(error.get("message") or "")
    first = message.splitlines()[0] if message else ""
    kind = str(error.get("type") or "Error")
    return f"{kind}: {first}" if first else kind


def describe_error(e: Exception) -> str:
    """One line for a notification. Workers catch every exception, not only FlowctlError:
    one that escaped would end the whole app (Textual's default), and an operator watching
    a busy database should see "database is locked" and carry on."""
    return str(e) if isinstance(e, FlowctlError) else f"{type(e).__name__}: {e}"


def _count(n: int) -> str:
    """A tab count that stays short at 100,000 runs."""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def _cell(text: str, style: str = "", limit: int | None = None) -> Text:
    """A table cell as plain text: run data must never be parsed as markup."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


# ---------------------------------------------------------------------------
# Views: which runs each tab lists, in what order, with which columns


@dataclass(frozen=True)
class Row:
    """One listed run, plus what a page query learned about it beyond the runs table."""

    run: Run
    waiting_for: str | None = None


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    cell: Callable[[Row, datetime], Text]
    live: bool = False  # depends on `now`: re-rendered every tick from the clock
    width: int | None = None


@dataclass(frozen=True)
class View:
    key: str
    number: str
    title: str
    short: str  # the tab label when the terminal is narrow
    statuses: tuple[RunStatus, ...] | None  # None: every status (no filter, so the index serves it)
    order: str  # a Store.list_runs order
    columns: tuple[Column, ...]


def _until_cell(row: Row, now: datetime) -> Text:
    text = _until(row.run.run_at, now)
    return _cell(text, "bold" if text.startswith("late") else "")


RUN_ID = Column("run_id", "RUN ID", lambda r, now: _cell(r.run.run_id))
WORKFLOW = Column("workflow", "WORKFLOW", lambda r, now: _cell(r.run.workflow, limit=24))
ATTEMPT = Column(
    "attempt", "ATTEMPT", lambda r, now: _cell(f"{r.run.attempt}/{r.run.max_attempts}")
)
INPUT = Column("input", "INPUT", lambda r, now: _cell(_compact_json(r.run.input), "dim"))

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
                lambda r, now: _cell(_ago(r.run.started_at, now)),
                live=True,
                width=12,
            ),
            Column(
                "spent",
                "EXEC SPENT",
                lambda r, now: _cell(
                    format_duration(r.run.exec_spent)
                    + (f" / {format_duration(r.run.timeout)}" if r.run.timeout else "")
                ),
            ),
            Column(
                "owner",
                "OWNER",
                lambda r, now: _cell(
                    "cancel requested" if r.run.cancel_requested else (r.run.lease_owner or ""),
                    "bold" if r.run.cancel_requested else "dim",
                ),
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
            Column("wakes_in", "WAKES IN", _until_cell, live=True, width=10),
            Column("wake_at", "WAKE AT (UTC)", lambda r, now: _cell(_minute(r.run.run_at))),
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
                "waiting_for", "WAITING FOR", lambda r, now: _cell(r.waiting_for or "?", limit=28)
            ),
            Column("timeout_in", "TIMEOUT IN", _until_cell, live=True, width=10),
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
            Column("due_in", "DUE IN", _until_cell, live=True, width=10),
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
                lambda r, now: _cell(_ago(r.run.finished_at, now)),
                live=True,
                width=12,
            ),
            Column("error", "ERROR", lambda r, now: _cell(error_first_line(r.run.error), limit=60)),
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
                lambda r, now: _cell(_ago(r.run.finished_at, now)),
                live=True,
                width=12,
            ),
            Column(
                "took",
                "TOOK",
                lambda r, now: _cell(
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
            Column("status", "STATUS", lambda r, now: _cell(str(r.run.status))),
            Column(
                "created",
                "CREATED",
                lambda r, now: _cell(_ago(r.run.created_at, now)),
                live=True,
                width=12,
            ),
            INPUT,
        ),
    ),
)
VIEWS_BY_KEY = {v.key: v for v in VIEWS}


def _list_schedules(store: Store, clock: Clock) -> list[dict[str, Any]] | None:
    """Schedules as plain dicts, or None while this build has no `ops.list_schedules`."""
    list_schedules = getattr(ops, "list_schedules", None)
    if list_schedules is None:
        return None
    takes_clock = "clock" in inspect.signature(list_schedules).parameters
    items = list_schedules(store, clock=clock) if takes_clock else list_schedules(store)
    out = []
    for item in items:
        if hasattr(item, "to_json"):
            out.append(dict(item.to_json()))
        elif isinstance(item, dict):
            out.append(dict(item))
        else:
            out.append(dict(vars(item)))
    return out


# Columns of the Schedules view, when a schedule has them ("rule" already names the zone).
SCHEDULE_FIELDS = ("name", "rule", "next_fire_at", "last_fire_at", "paused", "target")


def _schedule_cell(value: Any) -> str:
    """A schedule field for the table: ISO instants as UTC seconds, the rest as text."""
    if value is None:
        return "—"
    if isinstance(value, str) and len(value) >= 19 and value[10:11] == "T":
        try:
            return _when(datetime.fromisoformat(value).astimezone(UTC))
        except ValueError:
            return value
    return value if isinstance(value, str) else _compact_json(value, 40)


# ---------------------------------------------------------------------------
# The detail pane, rendered from a RunDetail, `now` and the pane's width
#
# Long lines are wrapped here, with a hanging indent, rather than by the widget: a
# timeline entry whose data wraps back to column 0 is hard to scan.


def _wrap(text: str, width: int, indent: int = 2) -> list[str]:
    """`text` as lines of at most `width` cells; continuation lines indent past the first."""
    out: list[str] = []
    for line in text.rstrip("\n").splitlines() or [""]:
        lead = len(line) - len(line.lstrip(" "))
        out.extend(
            textwrap.wrap(
                line,
                width=max(width, 20),
                initial_indent=" " * indent,
                subsequent_indent=" " * (indent + lead + 2),
                break_long_words=True,
                break_on_hyphens=False,
            )
            or [""]
        )
    return out


def _indent(text: str, width: int, style: str = "") -> Content:
    return Content.styled("".join(f"{line}\n" for line in _wrap(text, width)), style)


def _section(title: str) -> Content:
    return Content.styled(f"\n{title}\n", "bold $accent")


def _kv(label: str, value: str, width: int, style: str = "") -> Content:
    lines = _wrap(value, width - 10, indent=0)
    body = "\n".join([lines[0], *(" " * 10 + line for line in lines[1:])])
    return Content.assemble((f"{label:<10}", "dim"), (body, style), "\n")


def _head_and_tail(head: Content, tail: str, width: int, tail_style: str) -> Content:
    """`head tail` on one line when it fits, else `tail` wrapped on the lines below."""
    if not tail:
        return Content.assemble(head, "\n")
    if head.cell_length + len(tail) <= width:
        return Content.assemble(head, (tail, tail_style), "\n")
    lines = "\n".join(_wrap(tail, width, indent=6))
    return Content.assemble(head, "\n", (lines, tail_style), "\n")


def _checkpoint_line(entry: JournalEntry, now: datetime, width: int) -> Content:
    state_style = {
        EntryState.DONE: "$success",
        EntryState.ERROR: "$error",
        EntryState.PENDING: "$warning",
        EntryState.RETRYING: "$warning",
    }[entry.state]
    if entry.state is EntryState.ERROR:
        what = error_first_line(entry.value if isinstance(entry.value, dict) else None)
    elif entry.kind == "sleep":
        at = entry.wake_at
        what = f"wake_at {_when(at)}"
        if entry.state is EntryState.PENDING and at is not None:
            what += f" (in {_until(at, now)})"
        elif entry.resolved_at is not None:
            what += f", woke {_when(entry.resolved_at)}"
    elif entry.state is EntryState.RETRYING:
        what = f"try {entry.tries + 1} at {_when(entry.wake_at)}"
    elif entry.state is EntryState.PENDING:
        what = f"until {_when(entry.wake_at)}" if entry.wake_at else "…"
    else:
        what = _compact_json(entry.value, 120)
    took = f"{format_duration(entry.duration)} " if entry.duration is not None else ""
    head = Content.assemble(
        (f"  #{entry.call_index:<3}", "dim"),
        f"{entry.kind!s:<7}",
        (f"{entry.name[:18]:<19}", "bold"),
        (f"{entry.state!s:<9}", state_style),
        (took, "dim"),
    )
    return _head_and_tail(head, what, width, "")


def _timeline_line(event: TimelineEvent, width: int) -> Content:
    data = ", ".join(f"{k}={v}" for k, v in event.data.items())
    style = {
        "dead-lettered": "$error",
        "failed": "$error",
        "step failed": "$error",
        "timed out": "$error",
        "cancelled": "$warning",
        "woken by operator": "$warning",
        "completed": "$success",
    }.get(event.type, "bold")
    head = Content.assemble((f"  {_short_when(event.at)}  ", "dim"), (f"{event.type:<18}", style))
    return _head_and_tail(head, data, width, "dim")


def _budget(run: Run) -> str:
    spent = format_duration(run.exec_spent)
    if run.timeout is None:
        return f"no execution timeout ({spent} spent this attempt)"
    left = max(run.timeout - run.exec_spent, 0.0)
    return f"{format_duration(left)} left of {format_duration(run.timeout)} ({spent} spent)"


def _deadline(run: Run, now: datetime) -> str:
    if run.deadline is None:
        return "none"
    if run.deadline <= now:
        return f"{_when(run.deadline)} (passed)"
    return f"{_when(run.deadline)} (in {format_duration(run.deadline - now)})"


def _error_block(error: dict[str, Any], title: str, width: int) -> list[Content]:
    """The whole recorded error: message, why it is final, traceback, stderr tail."""
    parts = [_section(title), Content.styled(f"  {error.get('type', 'Error')}\n", "bold $error")]
    message = str(error.get("message") or "")
    if message:
        parts.append(_indent(message[:TEXT_LIMIT], width))
    facts = [
        f"{key}={error[key]}"
        for key in ("kind", "attempt", "dead_reason", "exit_code", "by")
        if error.get(key) is not None
    ]
    if facts:
        parts.append(_indent(", ".join(facts), width, "dim"))
    if error.get("traceback"):
        parts.append(_section("Traceback"))
        parts.append(_indent(str(error["traceback"])[-TEXT_LIMIT:], width))
    if error.get("stderr_tail"):
        parts.append(_section("Stderr (tail)"))
        parts.append(_indent(str(error["stderr_tail"])[-TEXT_LIMIT:], width))
    return parts


def render_detail(detail: ops.RunDetail, now: datetime, width: int = 80) -> Content:
    """Everything an operator asks about one run, as one scrollable block of text."""
    run = detail.run
    status_style = {
        RunStatus.DEAD: "bold $error",
        RunStatus.COMPLETED: "bold $success",
        RunStatus.CANCELLED: "bold $warning",
    }.get(run.status, "bold $accent")
    parts: list[Content] = [
        Content.assemble(
            (run.run_id, "bold"),
            "  ",
            (run.workflow, "bold"),
            "  ",
            (str(run.status), status_style),
            "\n",
        )
    ]
    for note in detail.notes:
        parts.append(
            Content.styled("".join(f"{x}\n" for x in _wrap(f"! {note}", width, 0)), "$warning")
        )
    parts.append(_kv("why", ops.why(detail, now), width))
    parts.append(_kv("attempt", f"{run.attempt} of {run.max_attempts}", width))
    parts.append(_kv("deadline", _deadline(run, now), width))
    parts.append(_kv("budget", _budget(run), width))
    parts.append(_kv("created", _when(run.created_at), width))
    if run.started_at:
        parts.append(_kv("started", _when(run.started_at), width))
    if run.finished_at:
        parts.append(_kv("finished", _when(run.finished_at), width))
    parts.append(_kv("target", run.target, width, "dim"))
    if run.schedule:
        parts.append(_kv("schedule", f"{run.schedule} at {_when(run.scheduled_at)}", width))
    if run.parent_run_id:
        parts.append(_kv("parent", run.parent_run_id, width))

    parts.append(_section("Input"))
    parts.append(_indent(_pretty_json(run.input), width))
    if run.status is RunStatus.COMPLETED:
        parts.append(_section("Result"))
        parts.append(_indent(_pretty_json(run.result), width))
    if run.error:
        title = {RunStatus.DEAD: "Error", RunStatus.CANCELLED: "Cancelled"}.get(
            run.status, "Last error"
        )
        parts.extend(_error_block(run.error, title, width))
        # The run's error may be recorded without the failing step's traceback or stderr
        # tail; the step's checkpoint keeps them.
        failed = [c for c in detail.checkpoints if c.state is EntryState.ERROR]
        step_error = failed[-1].value if failed and isinstance(failed[-1].value, dict) else {}
        for key, label in (("traceback", "Traceback"), ("stderr_tail", "Stderr (tail)")):
            if step_error.get(key) and not run.error.get(key):
                parts.append(_section(f"{label} of step {failed[-1].name!r}"))
                parts.append(_indent(str(step_error[key])[-TEXT_LIMIT:], width))

    if detail.published:
        parts.append(_section("Published"))
        for key, (value, _at) in detail.published.items():
            parts.append(_indent(f"{key} = {_compact_json(value, 120)}", width))

    if detail.pending_signals:
        parts.append(_section("Buffered signals"))
        for name, payload, sent_at in detail.pending_signals:
            line = f"{_short_when(sent_at)}  {name}  {_compact_json(payload, 120)}"
            parts.append(_indent(line, width))

    parts.append(_section(f"Checkpoints ({len(detail.checkpoints)})"))
    shown = detail.checkpoints[-CHECKPOINT_LIMIT:]
    if len(shown) < len(detail.checkpoints):
        hidden = len(detail.checkpoints) - len(shown)
        parts.append(_indent(f"… {hidden} earlier checkpoints not shown", width, "dim"))
    if not detail.checkpoints:
        parts.append(_indent("none yet", width, "dim"))
    for entry in shown:
        parts.append(_checkpoint_line(entry, now, width))
    for change_id, version, _at in detail.versions:
        parts.append(_indent(f"version {change_id} = {version}", width, "dim"))

    parts.append(_section("Timeline"))
    if len(detail.timeline) >= TIMELINE_LIMIT:
        parts.append(_indent(f"… only the newest {TIMELINE_LIMIT} events are shown", width, "dim"))
    for event in detail.timeline:
        parts.append(_timeline_line(event, width))
    return Content.assemble(*parts)


def render_schedule(item: dict[str, Any], width: int = 80) -> Content:
    parts = [Content.styled(f"{item.get('name', 'schedule')}\n\n", "bold")]
    for key, value in item.items():
        shown = value if isinstance(value, str) else _compact_json(value, 200)
        parts.append(_kv(str(key)[:9], shown, width))
    return Content.assemble(*parts)


# ---------------------------------------------------------------------------
# Messages from thread workers


@dataclass(frozen=True)
class PageQuery:
    """Everything that decides which rows a view shows; a change means a new query."""

    view: str
    workflow: str | None
    search: str | None
    limit: int


@dataclass
class Page:
    query: PageQuery
    rows: list[Row] = field(default_factory=list)
    counts: dict[RunStatus, int] = field(default_factory=dict)
    schedules: list[dict[str, Any]] | None = None
    error: str | None = None


class PageLoaded(Message):
    def __init__(self, generation: int, page: Page) -> None:
        super().__init__()
        self.generation = generation
        self.page = page


class DetailLoaded(Message):
    def __init__(self, run_id: str, detail: ops.RunDetail | None, error: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.detail = detail
        self.error = error


class ActionDone(Message):
    def __init__(self, message: str, error: bool) -> None:
        super().__init__()
        self.message = message
        self.error = error


def load_page(store: Store, clock: Clock, query: PageQuery) -> Page:
    """One view's visible page and the per-status counts, under the current filter/search."""
    view = VIEWS_BY_KEY[query.view]
    page = Page(query)
    page.counts = ops.count_runs(store, workflow=query.workflow, search=query.search)
    # Schedules are a handful of rows: cheap to list with every page, so their count is live.
    page.schedules = _list_schedules(store, clock)
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
    page.rows = [Row(r, waits.get(r.run_id)) for r in runs]
    return page


# ---------------------------------------------------------------------------
# Widgets


class ViewBar(Static):
    """The tab bar: number key, view name and live count; labels shorten on narrow terminals."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.active = VIEWS[0].key
        self.counts: dict[str, int | None] = {}

    def set_state(self, active: str, counts: dict[str, int | None]) -> None:
        self.active = active
        self.counts = counts
        self.refresh()

    def _labels(self, names: str, gap: str) -> list[tuple[View, str]]:
        """Tab labels; `names` is "full", "short", or "active" (only the current view named)."""
        out = []
        for view in VIEWS:
            n = self.counts.get(view.key)
            if names == "full":
                name = f" {view.title}"
            elif names == "short" or view.key == self.active:
                name = f" {view.short}"
            else:
                name = ""
            out.append((view, f" {view.number}{name}{'' if n is None else ' ' + _count(n)}{gap}"))
        return out

    def render(self) -> Content:
        for names, gap in (("full", " "), ("short", " "), ("short", ""), ("active", " ")):
            labels = self._labels(names, gap)
            if sum(len(label) for _, label in labels) <= self.size.width:
                break
        parts: list[str | tuple[str, str]] = []
        for view, label in labels:
            click = f"@click=app.show_view('{view.key}')"
            style = "reverse bold" if view.key == self.active else "dim"
            parts.append((label, f"{style} {click}"))
        return Content.assemble(*parts)


class HeaderLine(Static):
    """Database, active filter and search on the left; the clock on the right."""

    def render(self) -> Content:
        app = self.app
        if not isinstance(app, FlowctlApp):
            return Content()
        left = Content.assemble(
            (" flowctl ", "bold reverse"),
            f" {Path(app.store.path).name}",
            ("  workflow: ", "dim"),
            (app.workflow or "all", "bold $accent" if app.workflow else ""),
            ("  search: ", "dim"),
            (app.search or "—", "bold $accent" if app.search else ""),
        )
        clock = f"{_when(app.clock.now())} UTC "
        pad = max(1, self.size.width - left.cell_length - len(clock))
        return Content.assemble(left, " " * pad, (clock, "dim"))


class KeyHints(Static):
    """The key reminder line; it drops the padding between items on narrow terminals."""

    KEYS = (
        ("?", "help"),
        ("/", "search"),
        ("f", "filter"),
        ("c", "cancel"),
        ("r", "redrive"),
        ("s", "signal"),
        ("w", "wake"),
        ("y", "copy id"),
        ("q", "quit"),
    )

    def render(self) -> Content:
        wide = sum(len(k) + len(label) + 4 for k, label in self.KEYS) <= self.size.width
        gap = "  " if wide else " "
        parts: list[str | tuple[str, str]] = []
        for key, label in self.KEYS:
            parts.append((f"{gap[:1]}{key}", "bold $accent"))
            parts.append(f" {label}{gap[1:]}")
        return Content.assemble(*parts)


# Tab cycles views from the list and the detail; bound on them, not on the app, so that
# Tab still moves between fields in the signal form.
VIEW_CYCLE_BINDINGS = [
    Binding("tab", "app.cycle_view(1)", "Next view", show=False),
    Binding("shift+tab", "app.cycle_view(-1)", "Previous view", show=False),
]


class RunTable(DataTable[Text]):
    """The run list, with vim keys on top of the arrows."""

    BINDINGS: ClassVar = [
        *VIEW_CYCLE_BINDINGS,
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g,home", "scroll_top", "Top", show=False),
        Binding("G,end", "scroll_bottom", "Bottom", show=False),
    ]


class DetailPane(VerticalScroll):
    """The scrollable detail of the selected run (long tracebacks scroll here)."""

    class Resized(Message):
        """The pane changed width (zoom, terminal resize): its text must be rewrapped."""

    BINDINGS: ClassVar = [
        *VIEW_CYCLE_BINDINGS,
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("g", "scroll_home", "Top", show=False),
        Binding("G", "scroll_end", "Bottom", show=False),
    ]

    def on_resize(self) -> None:
        self.post_message(self.Resized())


# ---------------------------------------------------------------------------
# Modal screens


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no before anything is written: y or enter confirms, n or escape backs out."""

    BINDINGS: ClassVar = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No", show=False),
    ]

    def __init__(self, question: Content, title: str) -> None:
        super().__init__()
        self.question = question
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as dialog:
            dialog.border_title = self.title_text
            yield Static(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button(Content("Yes [y]"), variant="error", id="yes")
                yield Button(Content("No [n]"), id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class SignalSent(Message):
    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class SignalScreen(ModalScreen[str | None]):
    """Name + JSON payload. Mistakes are shown inline and the form stays open.

    The payload is parsed with the CLI's own `ops.parse_json_arg`, and the name is
    checked by `ops.send_signal` itself (reserved `_` names are refused there), so the
    TUI cannot drift from the CLI's rules.
    """

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel", show=False)]

    def __init__(self, store: Store, clock: Clock, run_id: str) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.run_id = run_id
        self.sent_name = ""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as dialog:
            dialog.border_title = f"Send a signal to {self.run_id}"
            yield Label("Signal name")
            yield Input(placeholder="approved", id="signal-name")
            yield Label("JSON payload (empty = null)")
            yield Input(placeholder='{"by": "ana"}', id="signal-payload")
            yield Static("", id="signal-error")
            with Horizontal(classes="buttons"):
                yield Button(Content("Send [enter]"), variant="primary", id="send")
                yield Button(Content("Cancel [esc]"), id="cancel")

    def on_mount(self) -> None:
        self.query_one("#signal-name", Input).focus()

    def _show_error(self, text: str) -> None:
        self.query_one("#signal-error", Static).update(Content.styled(text, "bold $error"))

    @on(Input.Submitted)
    @on(Button.Pressed, "#send")
    def submit(self) -> None:
        name = self.query_one("#signal-name", Input).value.strip()
        text = self.query_one("#signal-payload", Input).value.strip() or "null"
        try:
            payload = ops.parse_json_arg("payload", text)
        except FlowctlError as e:
            self._show_error(str(e))
            return
        self.sent_name = name
        self._send(name, payload)

    @work(thread=True, exclusive=True, group="signal")
    def _send(self, name: str, payload: Any) -> None:
        try:
            ops.send_signal(self.store, self.run_id, name, payload, clock=self.clock)
        except Exception as e:
            self.post_message(SignalSent(describe_error(e)))
        else:
            self.post_message(SignalSent(None))

    @on(SignalSent)
    def _sent(self, message: SignalSent) -> None:
        if message.error:
            self._show_error(message.error)
        else:
            self.dismiss(self.sent_name)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class WorkflowNames(Message):
    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names


class FilterScreen(ModalScreen[str | None]):
    """Pick a workflow to narrow every view to; "all workflows" clears the filter.

    Dismisses with the workflow name, "" for all, or None when backed out.
    """

    BINDINGS: ClassVar = [Binding("escape", "back", "Back", show=False)]

    def __init__(self, store: Store, current: str | None) -> None:
        super().__init__()
        self.store = store
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as dialog:
            dialog.border_title = "Filter by workflow"
            yield OptionList(Option("all workflows", id=""), id="workflows")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self._load()

    @work(thread=True)
    def _load(self) -> None:
        self.post_message(WorkflowNames(ops.workflow_names(self.store)))

    @on(WorkflowNames)
    def _loaded(self, message: WorkflowNames) -> None:
        options = self.query_one(OptionList)
        options.add_options([Option(name, id=name) for name in message.names])
        if self.current in message.names:
            options.highlighted = message.names.index(self.current) + 1

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id or "")

    def action_back(self) -> None:
        self.dismiss(None)


HELP = """\
[b]Views[/b]
  1 Running    2 Sleeping   3 Waiting    4 Queued
  5 Dead       6 Completed  7 Schedules  8 All
  tab / shift+tab   next / previous view

[b]Moving[/b]
  j k  ↑ ↓       move (in the list) or scroll (in the detail)
  g G  home end  first / last row
  ← →            scroll a wide list sideways
  d              move focus between the list and the detail (to scroll it)
  enter          open the detail full-screen; escape returns

[b]Narrowing[/b]
  /              search run ids and input text (enter keeps it, escape clears)
  f              filter by workflow

[b]Actions on the selected run[/b] (each asks first)
  c  cancel      r  redrive (dead or cancelled)
  s  signal      w  wake now (ends a sleep early)
  y  copy the run id

  ?  this help   q  quit
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [
        Binding("escape,q,question_mark", "close", "Close", show=False),
    ]

    def __init__(self, db_path: str) -> None:
        super().__init__()
        self.db_path = db_path

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help") as dialog:
            dialog.border_title = "flowctl tui — keys"
            yield Static(Content.from_markup(HELP))
            yield Static(Content.styled(f"database: {self.db_path}", "dim"))

    def action_close(self) -> None:
        self.dismiss(None)


# ---------------------------------------------------------------------------
# The app


class FlowctlApp(App[None]):
    """A live view of one flowctl database. Built from explicit inputs: a Store and a Clock."""

    TITLE = "flowctl"
    CSS_PATH = Path(__file__).with_name("tui.tcss")  # absolute: subclasses live elsewhere
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    ENABLE_COMMAND_PALETTE = False

    BINDINGS: ClassVar = [
        *(Binding(v.number, f"show_view('{v.key}')", v.title, show=False) for v in VIEWS),
        Binding("slash", "search", "Search"),
        Binding("f", "filter", "Filter"),
        Binding("c", "cancel_run", "Cancel"),
        Binding("r", "redrive_run", "Redrive"),
        Binding("s", "signal_run", "Signal"),
        Binding("w", "wake_run", "Wake"),
        Binding("y", "copy_id", "Copy id"),
        Binding("d", "toggle_focus", "Detail", show=False),
        Binding("escape", "leave", "Back", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, store: Store, clock: Clock) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.view = VIEWS[0].key
        self.workflow: str | None = None
        self.search: str | None = None
        self.limit = PAGE_SIZE
        self._generation = 0  # bumps on every query; late answers to older queries are dropped
        self._loading = False
        self._data_version: int | None = None
        self._rows: list[Row] = []
        self._row_ids: list[str] = []
        self._cells: dict[str, dict[str, str]] = {}
        self._schedules: list[dict[str, Any]] = []
        self._detail: ops.RunDetail | None = None
        self._detail_run_id: str | None = None
        self._detail_error: str | None = None
        self._total = 0
        self._search_timer: Timer | None = None

    # -- layout ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HeaderLine(id="header")
        yield ViewBar(id="views")
        with Horizontal(id="body"):
            with Vertical(id="list"):
                yield RunTable(id="table", cursor_type="row", zebra_stripes=True)
                yield Static("loading…", id="empty")
            with DetailPane(id="detail"):
                yield Static("", id="detail-text")
        yield Input(placeholder="search run ids and input text", id="search")
        yield KeyHints(id="hints")

    def on_mount(self) -> None:
        self.query_one("#detail").border_title = "Detail"
        self.query_one("#search").display = False
        self._set_columns()
        self._render_header()
        self.query_one(RunTable).focus()
        self._data_version = self.store.data_version()
        self._reload()
        self.set_interval(POLL_SECONDS, self._poll)
        self.set_interval(TICK_SECONDS, self._tick)

    MAIN_SCREEN_ACTIONS = frozenset(
        {
            "show_view",
            "cycle_view",
            "search",
            "filter",
            "cancel_run",
            "redrive_run",
            "signal_run",
            "wake_run",
            "copy_id",
            "toggle_focus",
            "leave",
            "help",
            "quit",
        }
    )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While a dialog is open, the main screen's keys do nothing: `2` must not switch
        views under a confirmation, and `q` must not quit from inside one."""
        dialog_open = len(self.screen_stack) > 1
        return not (dialog_open and action in self.MAIN_SCREEN_ACTIONS)

    def _render_header(self) -> None:
        self.query_one(HeaderLine).refresh()

    @on(DetailPane.Resized)
    def _detail_resized(self) -> None:
        self._render_detail()  # rewrap at the new width

    # -- queries ---------------------------------------------------------------

    def _query(self) -> PageQuery:
        return PageQuery(self.view, self.workflow, self.search, self.limit)

    def _reload(self) -> None:
        """Re-query the current view's page and the counts, in a thread."""
        self._generation += 1
        self._loading = True
        self._load_page(self._query(), self._generation)

    @work(thread=True, exclusive=True, group="page")
    def _load_page(self, query: PageQuery, generation: int) -> None:
        try:
            page = load_page(self.store, self.clock, query)
        except Exception as e:
            page = Page(query, error=describe_error(e))
        self.post_message(PageLoaded(generation, page))

    @work(thread=True, exclusive=True, group="detail")
    def _load_detail(self, run_id: str) -> None:
        try:
            detail = ops.show_run(
                self.store, run_id, clock=self.clock, timeline_limit=TIMELINE_LIMIT
            )
        except Exception as e:
            self.post_message(DetailLoaded(run_id, None, describe_error(e)))
        else:
            self.post_message(DetailLoaded(run_id, detail, None))

    def _poll(self) -> None:
        """Re-query only when another connection committed: data_version says so cheaply."""
        if self._loading:
            return  # a query is in flight; it will see the change, or the next poll will
        version = self.store.data_version()
        if version != self._data_version:
            self._data_version = version
            self._reload()

    def _tick(self) -> None:
        """Countdowns, the clock and the detail's relative times, from the clock alone."""
        self._render_header()
        now = self.clock.now()
        view = VIEWS_BY_KEY[self.view]
        live = [c for c in view.columns if c.live]
        if live:
            table = self.query_one(RunTable)
            for row in self._rows:
                cells = self._cells.get(row.run.run_id, {})
                for column in live:
                    cell = column.cell(row, now)
                    if cells.get(column.key) != cell.plain:
                        cells[column.key] = cell.plain
                        table.update_cell(row.run.run_id, column.key, cell)
        self._render_detail()

    # -- applying results ------------------------------------------------------

    @on(PageLoaded)
    def _page_loaded(self, message: PageLoaded) -> None:
        if message.generation != self._generation:
            return  # an answer to an older query: the view, filter or search changed since
        self._loading = False
        page = message.page
        if page.error:
            self.notify(page.error, severity="error", title="query failed")
            return
        self._update_view_bar(page)
        if page.query.view == "schedules":
            self._show_schedules(page.schedules)
        else:
            self._show_rows(page.rows)
        self._refresh_selected_detail()

    def _update_view_bar(self, page: Page) -> None:
        counts: dict[str, int | None] = {}
        for view in VIEWS:
            if view.key == "schedules":
                counts[view.key] = None if page.schedules is None else len(page.schedules)
            else:
                statuses = RunStatus if view.statuses is None else view.statuses
                counts[view.key] = sum(page.counts.get(s, 0) for s in statuses)
        self.query_one(ViewBar).set_state(self.view, counts)
        view = VIEWS_BY_KEY[self.view]
        self._total = counts.get(view.key) or 0

    def _set_columns(self) -> None:
        table = self.query_one(RunTable)
        table.clear(columns=True)
        view = VIEWS_BY_KEY[self.view]
        if view.key == "schedules":
            return
        for column in view.columns:
            table.add_column(column.label, key=column.key, width=column.width)

    def _show_rows(self, rows: list[Row]) -> None:
        """Update cells in place when the same runs are listed; rebuild when the set changed."""
        table = self.query_one(RunTable)
        view = VIEWS_BY_KEY[self.view]
        now = self.clock.now()
        selected = self._selected_key()
        ids = [r.run.run_id for r in rows]
        rendered = {r.run.run_id: [c.cell(r, now) for c in view.columns] for r in rows}
        if ids == self._row_ids:
            for run_id, cells in rendered.items():
                old = self._cells.get(run_id, {})
                for column, cell in zip(view.columns, cells, strict=True):
                    if old.get(column.key) != cell.plain:
                        table.update_cell(run_id, column.key, cell)
        else:
            old_index = table.cursor_row
            scroll_y = table.scroll_y
            table.clear()
            for run_id, cells in rendered.items():
                table.add_row(*cells, key=run_id)
            table.scroll_y = scroll_y
            if ids:
                index = ids.index(selected) if selected in ids else min(old_index, len(ids) - 1)
                table.move_cursor(row=max(index, 0))
        self._rows = rows
        self._row_ids = ids
        self._cells = {
            run_id: {c.key: cell.plain for c, cell in zip(view.columns, cells, strict=True)}
            for run_id, cells in rendered.items()
        }
        self._show_list_state(bool(rows))

    def _show_schedules(self, schedules: list[dict[str, Any]] | None) -> None:
        """Schedules are few: rebuild the table each time, keeping the cursor's row."""
        table = self.query_one(RunTable)
        cursor = table.cursor_row
        self._rows, self._row_ids, self._cells = [], [], {}
        table.clear(columns=True)
        self._schedules = schedules or []
        if not self._schedules:
            self._show_list_state(False)
            return
        fields_ = [f for f in SCHEDULE_FIELDS if any(f in s for s in self._schedules)]
        if "rule" not in fields_:
            fields_ = [f for f in list(self._schedules[0]) if f != "name"][:4]
            fields_.insert(0, "name")
        for name in fields_:
            table.add_column(name.upper().replace("_", " "), key=name)
        for i, item in enumerate(self._schedules):
            cells = [_cell(_schedule_cell(item.get(f)), limit=44) for f in fields_]
            table.add_row(*cells, key=f"s{i}")
        table.move_cursor(row=min(cursor, len(self._schedules) - 1))
        self._show_list_state(True)

    def _show_list_state(self, has_rows: bool) -> None:
        """The table when there are rows; otherwise a one-line explanation of the empty view."""
        view = VIEWS_BY_KEY[self.view]
        empty = self.query_one("#empty", Static)
        self.query_one("#list").set_class(not has_rows, "-empty")
        narrowed = []
        if self.workflow:
            narrowed.append(f"workflow {self.workflow!r}")
        if self.search:
            narrowed.append(f"search {self.search!r}")
        where = f" matching {' and '.join(narrowed)}" if narrowed else ""
        if view.key == "schedules":
            missing = not self._schedules
            empty.update(Content.styled("no schedules" if missing else "", "dim"))
        else:
            what = "runs" if view.key == "all" else f"{view.title.lower()} runs"
            empty.update(Content.styled(f"no {what}{where}", "dim"))
        listing = self.query_one("#list")
        listing.border_title = f"{view.title}"
        if view.key == "schedules":
            listing.border_subtitle = ""
        elif len(self._rows) < self._total:
            listing.border_subtitle = f"{len(self._rows)} of {self._total:,} (more load at the end)"
        else:
            listing.border_subtitle = f"{self._total:,}"
        if not has_rows:
            self._detail, self._detail_run_id, self._detail_error = None, None, None
            self._render_detail()

    def _selected_key(self) -> str | None:
        table = self.query_one(RunTable)
        if table.row_count == 0:
            return None
        try:
            return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        except Exception:
            return None

    def selected_run(self) -> Run | None:
        """The run under the cursor, as of the last page query."""
        key = self._selected_key()
        if key is None or self.view == "schedules":
            return None
        for row in self._rows:
            if row.run.run_id == key:
                return row.run
        return None

    def _refresh_selected_detail(self) -> None:
        if self.view == "schedules":
            self._render_detail()
            return
        run = self.selected_run()
        if run is not None:
            self._load_detail(run.run_id)

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if self.view == "schedules":
            self._render_detail()
            return
        if key is not None and key != self._detail_run_id:
            self._load_detail(str(key))
        at_end = event.cursor_row >= len(self._rows) - 1
        if at_end and len(self._rows) < self._total and not self._loading:
            self.limit += PAGE_SIZE  # the next page: the cursor reached the end
            self._reload()

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self.query_one("#body").add_class("-zoom")
        self.query_one(DetailPane).focus()

    @on(DetailLoaded)
    def _detail_loaded(self, message: DetailLoaded) -> None:
        if message.run_id != self._selected_key():
            return
        if message.run_id != self._detail_run_id:
            self.query_one(DetailPane).scroll_home(animate=False)
        self._detail_run_id = message.run_id
        self._detail = message.detail
        self._detail_error = message.error
        self._render_detail()

    def _render_detail(self) -> None:
        text = self.query_one("#detail-text", Static)
        if self.view == "schedules":
            key = self._selected_key()
            index = int(key[1:]) if key is not None and key.startswith("s") else -1
            if 0 <= index < len(self._schedules):
                text.update(render_schedule(self._schedules[index], self._detail_width()))
            elif _list_schedules_available():
                text.update(Content.styled("no schedules", "dim"))
            else:
                text.update(
                    Content.styled(
                        "no schedules\n\nSchedules appear here once this flowctl has them.", "dim"
                    )
                )
            return
        if self._detail_error:
            text.update(Content.styled(self._detail_error, "$error"))
            return
        if self._detail is None or self._detail_run_id is None:
            text.update(Content.styled("no run selected", "dim"))
            return
        text.update(render_detail(self._detail, self.clock.now(), self._detail_width()))

    def _detail_width(self) -> int:
        """Cells available for one line of detail text (the gutter is reserved in CSS)."""
        width = self.query_one(DetailPane).scrollable_content_region.width
        return width if width > 0 else 80

    # -- switching views, searching, filtering ---------------------------------

    def action_show_view(self, key: str) -> None:
        if key == self.view:
            return
        self.view = key
        self.limit = PAGE_SIZE
        self._rows, self._row_ids, self._cells = [], [], {}
        self._detail, self._detail_run_id, self._detail_error = None, None, None
        self._set_columns()
        self.query_one("#body").remove_class("-zoom")
        self.query_one(ViewBar).set_state(key, self.query_one(ViewBar).counts)
        self._show_list_state(False)
        self.query_one("#empty", Static).update(Content.styled("loading…", "dim"))
        self.query_one(RunTable).focus()
        self._reload()

    def action_cycle_view(self, step: int) -> None:
        keys = [v.key for v in VIEWS]
        self.action_show_view(keys[(keys.index(self.view) + step) % len(keys)])

    def action_search(self) -> None:
        search = self.query_one("#search", Input)
        search.display = True
        search.focus()

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        """Search as you type, once typing pauses: a search scans every row's input text."""
        if self._search_timer is not None:
            self._search_timer.stop()
        self._search_timer = self.set_timer(
            SEARCH_DEBOUNCE, lambda: self._apply_search(event.value)
        )

    def _apply_search(self, text: str) -> None:
        if self._search_timer is not None:
            self._search_timer.stop()
            self._search_timer = None
        search = text.strip() or None
        if search == self.search:
            return
        self.search = search
        self.limit = PAGE_SIZE
        self._render_header()
        self._reload()

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        self._apply_search(event.value)
        if not event.value.strip():
            self.query_one("#search").display = False
        self.query_one(RunTable).focus()

    def action_leave(self) -> None:
        """Escape, innermost first: leave the search box (clearing it), leave the
        full-screen detail, then drop a search kept with enter."""
        search = self.query_one("#search", Input)
        body = self.query_one("#body")
        if search.has_focus or (not body.has_class("-zoom") and self.search):
            search.value = ""
            search.display = False
            self._apply_search("")
            self.query_one(RunTable).focus()
        elif body.has_class("-zoom"):
            body.remove_class("-zoom")
            self.query_one(RunTable).focus()

    def action_toggle_focus(self) -> None:
        if self.query_one(DetailPane).has_focus:
            self.query_one(RunTable).focus()
        else:
            self.query_one(DetailPane).focus()

    def action_filter(self) -> None:
        def chosen(name: str | None) -> None:
            if name is None:
                return
            self.workflow = name or None
            self.limit = PAGE_SIZE
            self._render_header()
            self._reload()

        self.push_screen(FilterScreen(self.store, self.workflow), chosen)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.store.path))

    # -- actions on the selected run -------------------------------------------

    def _require_run(self) -> Run | None:
        run = self.selected_run()
        if run is None:
            self.notify("select a run first", severity="warning")
        return run

    def _confirm(
        self, title: str, question: Content, action: Callable[[], str], failure: str
    ) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self._run_action(action, failure)

        self.push_screen(ConfirmScreen(question, title), answered)

    @work(thread=True, group="action")
    def _run_action(self, action: Callable[[], str], failure: str) -> None:
        """Run one ops call off the UI thread; its outcome comes back as a notification."""
        try:
            message = action()
        except Exception as e:
            self.post_message(ActionDone(f"{failure}: {describe_error(e)}", error=True))
        else:
            self.post_message(ActionDone(message, error=False))

    @on(ActionDone)
    def _action_done(self, message: ActionDone) -> None:
        self.notify(
            message.message,
            severity="error" if message.error else "information",
            timeout=8 if message.error else 4,
        )
        self._reload()  # our own writes do not move data_version on our own connection

    def _question(self, verb: str, run: Run, extra: str = "") -> Content:
        return Content.assemble(
            f"{verb} run ",
            (run.run_id, "bold"),
            f" ({run.workflow}, {run.status})?",
            (f"\n\n{extra}" if extra else "", "dim"),
        )

    def action_cancel_run(self) -> None:
        run = self._require_run()
        if run is None:
            return
        if run.status.is_terminal:
            self.notify(
                f"{run.run_id} is already {run.status}; nothing to cancel", severity="warning"
            )
            return
        extra = (
            "It is running: it stops at its next heartbeat."
            if run.status is RunStatus.RUNNING
            else ""
        )

        def cancel() -> str:
            after = ops.cancel(self.store, run.run_id, clock=self.clock)
            if after.status is RunStatus.CANCELLED:
                return f"cancelled {run.run_id}"
            return f"cancel requested: {run.run_id} stops at its next heartbeat"

        self._confirm("Cancel", self._question("Cancel", run, extra), cancel, "cancel failed")

    def action_redrive_run(self) -> None:
        run = self._require_run()
        if run is None:
            return
        if run.status not in (RunStatus.DEAD, RunStatus.CANCELLED):
            self.notify(
                f"{run.run_id} is {run.status}: only dead or cancelled runs can be redriven",
                severity="warning",
            )
            return

        def redrive() -> str:
            ops.redrive(self.store, run.run_id, clock=self.clock)
            return f"redriven {run.run_id}: queued with a fresh attempt budget"

        extra = (
            "It is queued again with a fresh attempt budget; checkpoints before the failure stand."
        )
        self._confirm("Redrive", self._question("Redrive", run, extra), redrive, "redrive failed")

    def action_wake_run(self) -> None:
        run = self._require_run()
        if run is None:
            return
        if run.status not in (RunStatus.SLEEPING, RunStatus.QUEUED):
            self.notify(
                f"{run.run_id} is {run.status}: only sleeping or queued runs can be woken",
                severity="warning",
            )
            return

        def wake() -> str:
            ops.wake_now(self.store, run.run_id, clock=self.clock)
            return f"woke {run.run_id}: due now (recorded as an operator action)"

        extra = (
            f"Due at {_when(run.run_at)} UTC; it becomes due now. The timeline records who"
            " woke it, and the recorded deadline is kept for history."
        )
        self._confirm("Wake now", self._question("Wake", run, extra), wake, "wake failed")

    def action_signal_run(self) -> None:
        run = self._require_run()
        if run is None:
            return
        if run.status.is_terminal:
            self.notify(
                f"{run.run_id} is {run.status}: signals go to queued, running, sleeping or"
                " waiting runs",
                severity="warning",
            )
            return

        def sent(name: str | None) -> None:
            if name:
                self.notify(f"signal {name!r} sent to {run.run_id}")
                self._reload()

        self.push_screen(SignalScreen(self.store, self.clock, run.run_id), sent)

    def action_copy_id(self) -> None:
        run = self._require_run()
        if run is None:
            return
        self.copy_to_clipboard(run.run_id)
        self.notify(f"copied {run.run_id}")


def _list_schedules_available() -> bool:
    return getattr(ops, "list_schedules", None) is not None
