"""`flowctl tui`: a live, keyboard-first view of what is running, sleeping, waiting and dead.

Only the `flowctl.tui` package imports Textual, and only `flowctl tui` imports them, so
every other command starts without paying for Textual. The TUI is split by job:

- `flowctl.tui.app` (here): the app — its state, bindings, workers and live refresh.
- `flowctl.tui.actions`: the actions on the selected run (each asks first, runs through
  ops), composed into the app; `flowctl.tui.schedule_actions` those on a schedule.
- `flowctl.tui.header`: the header line (database path, daemon, filters, clock).
- `flowctl.tui.views`: which runs each tab lists, with which columns; `load_page`.
- `flowctl.tui.render`: pure text — cells, countdowns, the detail pane, error blocks.
- `flowctl.tui.widgets`: the main screen's widgets (tab bar, run list, detail pane, keys).
- `flowctl.tui.screens`: the dialogs (confirm, signal, filter, help).
- `flowctl.tui.messages`: what the thread workers post back.

How it stays instant on a database with 100,000 runs:

- One view is on screen at a time, and only that view's visible page is queried
  (PAGE_SIZE rows; the next page loads when the cursor reaches the end), plus one
  count per status for the tab bar. Nothing ever reads every row.
- `PRAGMA data_version` (a read of microseconds) is polled every POLL_SECONDS; the page
  is re-queried only when another connection (the daemon, the CLI) committed.
- Countdowns ("wakes in 2d03h") are re-rendered every second from the injected clock,
  without touching the database, so a FakeClock makes every screen reproducible. The
  widgets that tick own their timers (see `flowctl.tui.widgets`), so nothing ticks into a
  widget that is gone; handlers of worker messages do nothing once the app is exiting.

Every query and every action runs in a thread worker through `flowctl.ops`, exactly
as the CLI calls it; workers post messages, and only message handlers touch widgets.
The TUI writes no SQL of its own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from flowctl import ops
from flowctl.clock import Clock
from flowctl.limits import MAX_SEARCH
from flowctl.model import CallKind, EntryState, Run, RunStatus
from flowctl.ops import schedules as schedule_ops
from flowctl.store import Store
from flowctl.tui.actions import Acting, RunActions
from flowctl.tui.fit import fit, natural_widths
from flowctl.tui.header import HeaderLine
from flowctl.tui.messages import ActionDone, DetailLoaded, PageLoaded, ScheduleLoaded
from flowctl.tui.render import (
    DETAIL_STEPS,
    describe_error,
    render_detail,
    render_schedule,
    schedule_field,
    table_cell,
)
from flowctl.tui.schedule_actions import ScheduleActions
from flowctl.tui.screens import FilterScreen, HelpScreen, SignalScreen
from flowctl.tui.views import (
    LATENESS_WINDOW,
    SCHEDULE_FIELDS,
    VIEWS,
    VIEWS_BY_KEY,
    Column,
    DaemonUp,
    Page,
    PageQuery,
    Row,
    View,
    WakeLateness,
    load_page,
)
from flowctl.tui.widgets import DetailPane, DetailText, KeyHints, RunTable, ViewBar

# FlowctlApp is what `flowctl tui` imports; the rest stay importable from here for the
# tests and benchmarks/tui_startup.py, which predate the split.
__all__ = [
    "VIEWS",
    "FlowctlApp",
    "HeaderLine",
    "PageQuery",
    "Row",
    "RunTable",
    "SignalScreen",
    "load_page",
]

PAGE_SIZE = 200  # rows per query; the next page is fetched when the cursor reaches the end
POLL_SECONDS = 0.5  # how often data_version is read
SEARCH_DEBOUNCE = 0.25  # seconds of no typing before a search query runs
LATENESS_SECONDS = 10.0  # how often the header's wake lateness is re-read (real time)


def _first_busy_view(store: Store) -> str:
    counts = store.count_by_status()
    for view in VIEWS:
        if view.statuses and any(counts.get(s, 0) for s in view.statuses):
            return view.key
    return VIEWS[0].key


# ---------------------------------------------------------------------------
# The app


class FlowctlApp(App[None]):
    """A live view of one flowctl database. Built from explicit inputs: a Store and a Clock.

    Its actions on runs and schedules are composed objects (`run_actions`,
    `schedule_actions`, flowctl/tui/actions.py): the key bindings call the action_ methods
    here, which hand them on."""

    TITLE = "flowctl"
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    ENABLE_COMMAND_PALETTE = False

    # Priority bindings: a key acts when it arrives, before the keys typed after it are
    # handed on. Otherwise `s` would bubble up through the list first and `approved` typed
    # at once after it would move the list (a, p: pause!) before the form opened.
    # check_action switches them off while a text field or a dialog has the keys.
    BINDINGS: ClassVar = [
        *(
            Binding(v.number, f"show_view('{v.key}')", v.title, show=False, priority=True)
            for v in VIEWS
        ),
        Binding("slash", "search", "Search", priority=True),
        Binding("f", "filter", "Filter", priority=True),
        Binding("c", "cancel_run", "Cancel", priority=True),
        Binding("r", "redrive_run", "Redrive", priority=True),
        Binding("s", "signal_run", "Signal", priority=True),
        Binding("w", "wake_run", "Wake", priority=True),
        Binding("p", "pause_run", "Pause/resume", show=False, priority=True),
        Binding("t", "trigger_schedule", "Trigger schedule", show=False, priority=True),
        Binding("y", "copy_id", "Copy id", priority=True),
        Binding("d", "toggle_focus", "Detail", show=False, priority=True),
        Binding("escape", "leave", "Back", show=False),
        Binding("question_mark", "help", "Help", priority=True),
        Binding("q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self, store: Store, clock: Clock, *, view: str = VIEWS[0].key, shown_path: str | None = None
    ) -> None:
        """`view="auto"` opens on the first view with runs in it: what runs, waits, sleeps
        or died comes before what is done. `shown_path` is the database as the header names
        it (default: the store's full path)."""
        super().__init__()
        self.store = store
        self.clock = clock
        where = store.path  # a URL comes with its password masked (store.path)
        self.shown_path = shown_path or (where if "://" in where else str(Path(where).resolve()))
        self.daemons: list[DaemonUp] | None = None  # from the last page; None before it
        self.lateness: WakeLateness | None = None  # the last read; None before it
        self._lateness_read = float("-inf")  # time.monotonic() of the last read
        self.view = _first_busy_view(store) if view == "auto" else view
        self.workflow: str | None = None
        self.search: str | None = None
        self.limit = PAGE_SIZE
        self._generation = 0  # bumps on every query; late answers to older queries are dropped
        self._loading = False
        self._data_version: int | None = None
        self._rows: list[Row] = []
        self._row_ids: list[str] = []
        self._cells: dict[str, dict[str, str]] = {}
        self._shown: list[Column] = []  # the view's columns the table shows (the pane's width)
        self._hidden: list[str] = []  # the labels of those it has no room for
        self._schedules: list[dict[str, Any]] = []
        self._schedule_card: dict[str, Any] | None = None  # the selected one, `schedule show`
        self._detail: ops.RunDetail | None = None
        self._detail_run_id: str | None = None
        self._detail_error: str | None = None
        self._total = 0
        self._search_timer: Timer | None = None
        acting = Acting(self)
        self.run_actions = RunActions(acting, store, clock, self.selected_run, self.awaited_signal)
        self.schedule_actions = ScheduleActions(acting, store, clock, self.selected_schedule)

    # -- layout ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HeaderLine(self, id="header")
        yield ViewBar(id="views")
        with Horizontal(id="body"):
            with Vertical(id="list"):
                yield RunTable(
                    id="table",
                    cursor_type="row",
                    zebra_stripes=True,
                    on_tick=self._tick_rows,
                    on_resize=self._table_resized,
                )
                yield Static("loading…", id="empty")
            with DetailPane(id="detail"):
                yield DetailText(id="detail-text", on_tick=self._render_detail)
        yield Input(placeholder="search run ids and input text", id="search", max_length=MAX_SEARCH)
        yield KeyHints(id="hints")

    def on_mount(self) -> None:
        self.query_one("#detail").border_title = "Detail"
        self.query_one("#search").display = False
        self._set_columns()
        self._render_header()
        self.query_one(KeyHints).set_view(self.view)
        self.query_one(RunTable).focus()
        self._data_version = self.store.data_version()
        self._reload()
        self.set_interval(POLL_SECONDS, self._poll)

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
            "pause_run",
            "trigger_schedule",
            "copy_id",
            "toggle_focus",
            "leave",
            "help",
            "quit",
        }
    )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While a dialog is open, the main screen's keys do nothing: `2` must not switch
        views under a confirmation, and `q` must not quit from inside one. While the search
        field has focus they are its text (escape still leaves it)."""
        dialog_open = len(self.screen_stack) > 1
        typing = isinstance(self.focused, Input) and action != "leave"
        return not ((dialog_open or typing) and action in self.MAIN_SCREEN_ACTIONS)

    def _render_header(self) -> None:
        self.query_one(HeaderLine).refresh()

    @on(DetailPane.Resized)
    def _detail_resized(self) -> None:
        if self.is_running:
            self._render_detail()  # rewrap at the new width

    # -- queries ---------------------------------------------------------------

    def _query(self) -> PageQuery:
        """This view's page; wake lateness too when the last read is LATENESS_SECONDS old
        (the page reloads whenever a daemon commits, every heartbeat: the header's figure
        over the last hour need not)."""
        since = None
        if time.monotonic() - self._lateness_read >= LATENESS_SECONDS:
            self._lateness_read = time.monotonic()
            since = self.clock.now() - LATENESS_WINDOW
        return PageQuery(self.view, self.workflow, self.search, self.limit, since)

    def _reload(self) -> None:
        """Re-query the current view's page and the counts, in a thread."""
        self._generation += 1
        self._loading = True
        self._load_page(self._query(), self._generation)

    @work(thread=True, exclusive=True, group="page")
    def _load_page(self, query: PageQuery, generation: int) -> None:
        try:
            page = load_page(self.store, query)
        except Exception as e:
            page = Page(query, error=describe_error(e))
        self.post_message(PageLoaded(generation, page))

    @work(thread=True, exclusive=True, group="detail")
    def _load_detail(self, run_id: str) -> None:
        try:
            detail = ops.show_run(self.store, run_id, clock=self.clock, steps=DETAIL_STEPS)
        except Exception as e:
            self.post_message(DetailLoaded(run_id, None, describe_error(e)))
        else:
            self.post_message(DetailLoaded(run_id, detail, None))

    @work(thread=True, exclusive=True, group="detail")
    def _load_schedule(self, name: str) -> None:
        try:
            item = schedule_ops.show_schedule(self.store, name, clock=self.clock).to_json()
        except Exception as e:
            self.post_message(ScheduleLoaded(name, None, describe_error(e)))
        else:
            self.post_message(ScheduleLoaded(name, item, None))

    @on(ScheduleLoaded)
    def _schedule_loaded(self, message: ScheduleLoaded) -> None:
        selected = self.selected_schedule()
        if not self.is_running or selected is None or selected["name"] != message.name:
            return
        self._schedule_card = message.item
        self._detail_error = message.error
        self._render_detail()

    def selected_schedule(self) -> dict[str, Any] | None:
        """The schedule under the cursor in the Schedules view, as of the last page."""
        key = self._selected_key()
        if self.view != "schedules" or key is None or not key.startswith("s"):
            return None
        index = int(key[1:])
        return self._schedules[index] if 0 <= index < len(self._schedules) else None

    def _poll(self) -> None:
        """Re-query only when another connection committed: data_version says so cheaply."""
        if self._loading or not self.is_running:
            return  # a query is in flight; it will see the change, or the next poll will
        version = self.store.data_version()
        if version != self._data_version or self._a_daemon_died():
            self._data_version = version
            self._reload()

    def _a_daemon_died(self) -> bool:
        """A SIGKILLed daemon commits nothing, so data_version cannot tell the header."""
        from flowctl.ids import owner_alive

        return any(not owner_alive(d.owner) for d in self.daemons or ())

    def _tick_rows(self, table: RunTable) -> None:
        """Countdowns, from the clock alone (the table's own timer calls this)."""
        if not self.is_running:
            return
        now = self.clock.now()
        for row in self._rows:
            cells = self._cells.get(row.run.run_id, {})
            for column in self._shown:
                if not column.live:
                    continue
                cell = column.cell(row, now)
                if cells.get(column.key) != cell.plain:
                    cells[column.key] = cell.plain
                    table.update_cell(row.run.run_id, column.key, cell)

    # -- applying results ------------------------------------------------------

    @on(PageLoaded)
    def _page_loaded(self, message: PageLoaded) -> None:
        if not self.is_running:
            return  # the app is exiting: its widgets are being removed
        if message.generation != self._generation:
            return  # an answer to an older query: the view, filter or search changed since
        self._loading = False
        page = message.page
        if page.error:
            self.notify(page.error, severity="error", title="query failed")
            return
        self._update_view_bar(page)
        if self.daemons != page.daemons or page.lateness not in (None, self.lateness):
            self.daemons = page.daemons
            self.lateness = page.lateness or self.lateness
            self._render_header()
        if page.query.view == "schedules":
            self._show_schedules(page.schedules)
        else:
            self._show_rows(page.rows)
        self._refresh_selected_detail()

    def _update_view_bar(self, page: Page) -> None:
        counts: dict[str, int | None] = {}
        for view in VIEWS:
            if view.key == "schedules":
                counts[view.key] = len(page.schedules)
            else:
                statuses = RunStatus if view.statuses is None else view.statuses
                counts[view.key] = sum(page.counts.get(s, 0) for s in statuses)
        self.query_one(ViewBar).set_state(self.view, counts)
        view = VIEWS_BY_KEY[self.view]
        self._total = counts.get(view.key) or 0

    def _set_columns(self) -> None:
        """A new view: its columns, fitted to the table's width; rows come with the page."""
        table = self.query_one(RunTable)
        table.forget_layout()
        self._row_ids, self._shown, self._hidden = [], [], []
        view = VIEWS_BY_KEY[self.view]
        if view.key != "schedules":
            self._lay_out_runs(view, [])

    def _lay_out_runs(self, view: View, rendered: list[list[Text]]) -> bool:
        """Fit the view's columns to the table (flowctl.tui.fit) for these rows' cells;
        True when the table was rebuilt (its rows must be added again)."""
        table = self.query_one(RunTable)
        labels = [len(c.label) for c in view.columns]
        natural = natural_widths(
            labels, [c.width for c in view.columns], [[c.cell_len for c in r] for r in rendered]
        )
        whole = [i for i, c in enumerate(view.columns) if not c.cut]
        widths = fit(labels, natural, table.room(len(rendered)), whole=whole).widths
        self._shown = [c for c, w in zip(view.columns, widths, strict=True) if w is not None]
        self._hidden = [c.label for c, w in zip(view.columns, widths, strict=True) if w is None]
        return table.lay_out(
            [(c.key, c.label, w) for c, w in zip(view.columns, widths, strict=True) if w]
        )

    def _table_resized(self, table: RunTable) -> None:
        """A new width (terminal resize, zoom): fit the columns again to the same rows."""
        if not self.is_running:
            return
        if self.view == "schedules":
            if self._schedules:
                self._show_schedules(self._schedules)
        else:
            self._show_rows(self._rows)

    def _show_rows(self, rows: list[Row]) -> None:
        """Update cells in place when the same runs are listed in the same columns; rebuild
        when the set or the columns changed."""
        table = self.query_one(RunTable)
        view = VIEWS_BY_KEY[self.view]
        now = self.clock.now()
        selected = self._selected_key()
        old_index, scroll_y = table.cursor_row, table.scroll_y
        ids = [r.run.run_id for r in rows]
        every = {r.run.run_id: [c.cell(r, now) for c in view.columns] for r in rows}
        rebuilt = self._lay_out_runs(view, list(every.values()))
        keep = [view.columns.index(c) for c in self._shown]
        rendered = {run_id: [cells[i] for i in keep] for run_id, cells in every.items()}
        if ids == self._row_ids and not rebuilt:
            for run_id, cells in rendered.items():
                old = self._cells.get(run_id, {})
                for column, cell in zip(self._shown, cells, strict=True):
                    if old.get(column.key) != cell.plain:
                        table.update_cell(run_id, column.key, cell)
        else:
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
            run_id: {c.key: cell.plain for c, cell in zip(self._shown, cells, strict=True)}
            for run_id, cells in rendered.items()
        }
        self._show_list_state(bool(rows))

    def _show_schedules(self, schedules: list[dict[str, Any]]) -> None:
        """Schedules are few: rebuild the table each time, keeping the cursor's row."""
        table = self.query_one(RunTable)
        cursor = table.cursor_row
        self._rows, self._row_ids, self._cells, self._shown = [], [], {}, []
        self._schedules = schedules
        if not self._schedules:
            table.forget_layout()
            self._hidden = []
            self._show_list_state(False)
            return
        fields_ = [f for f in SCHEDULE_FIELDS if any(f in s for s in self._schedules)]
        if "rule" not in fields_:
            fields_ = [f for f in list(self._schedules[0]) if f != "name"][:4]
            fields_.insert(0, "name")
        heads = [name.upper().replace("_", " ") for name in fields_]
        rows = [
            [table_cell(schedule_field(item.get(f)), limit=44) for f in fields_]
            for item in self._schedules
        ]
        labels = [len(h) for h in heads]
        natural = natural_widths(
            labels, [None] * len(heads), [[c.cell_len for c in r] for r in rows]
        )
        # A name may be cut (the card below or beside shows it whole); times and flags not.
        whole = [i for i, f in enumerate(fields_) if f not in ("name", "rule", "target")]
        room = table.room(len(rows))
        widths = fit(labels, natural, room, keep=(), whole=whole, least={0: 24}).widths
        self._hidden = [h for h, w in zip(heads, widths, strict=True) if w is None]
        table.forget_layout()  # few rows: rebuilt every time
        table.lay_out([(f, h, w) for f, h, w in zip(fields_, heads, widths, strict=True) if w])
        keep = [i for i, w in enumerate(widths) if w]
        for i, cells in enumerate(rows):
            table.add_row(*(cells[j] for j in keep), key=f"s{i}")
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
        if self._hidden:  # the pane is too narrow for them: say so (Enter shows the detail)
            hidden = ", ".join(self._hidden)
            listing.border_subtitle = f"{hidden} hidden · {listing.border_subtitle}".rstrip(" ·")
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

    def awaited_signal(self, run: Run) -> str | None:
        """The signal `run` waits for, as its loaded detail (the pending signal checkpoint)
        or the Waiting view's row says; None when it awaits none."""
        detail = self._detail
        if detail is not None and detail.run.run_id == run.run_id:
            for entry in reversed(detail.checkpoints):
                if entry.kind is CallKind.SIGNAL and entry.state is EntryState.PENDING:
                    return entry.name
        return None

    def _refresh_selected_detail(self) -> None:
        if self.view == "schedules":
            self._render_detail()
            selected = self.selected_schedule()
            if selected is not None:
                self._load_schedule(str(selected["name"]))
            return
        run = self.selected_run()
        if run is not None:
            self._load_detail(run.run_id)

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if self.view == "schedules":
            selected = self.selected_schedule()
            if selected is not None:
                self._load_schedule(str(selected["name"]))
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
        if not self.is_running or message.run_id != self._selected_key():
            return
        if message.run_id != self._detail_run_id:
            self.query_one(DetailPane).scroll_home(animate=False)
        self._detail_run_id = message.run_id
        self._detail = message.detail
        self._detail_error = message.error
        self._render_detail()

    def _render_detail(self, text: DetailText | None = None) -> None:
        """Render the selected run's detail into the pane (`text`, when its timer asks)."""
        if not self.is_running:
            return
        if text is None:
            text = self.query_one(DetailText)
        if self.view == "schedules":
            item = self.selected_schedule()
            card = self._schedule_card
            if card is not None and item is not None and card.get("name") == item["name"]:
                item = card  # with its next fires and history, once loaded
            if self._detail_error:
                text.update(Content.styled(self._detail_error, "$error"))
            elif item is not None:
                width = self._detail_width(text)
                text.update(render_schedule(item, width, self.clock.now()))
            else:
                text.update(Content.styled("no schedules", "dim"))
            return
        if self._detail_error:
            text.update(Content.styled(self._detail_error, "$error"))
            return
        if self._detail is None or self._detail_run_id is None:
            text.update(Content.styled("no run selected", "dim"))
            return
        text.update(render_detail(self._detail, self.clock.now(), self._detail_width(text)))

    def _detail_width(self, text: DetailText) -> int:
        """Cells available for one line of detail text (the gutter is reserved in CSS)."""
        pane = text.parent
        if not isinstance(pane, DetailPane):
            return 80
        width = pane.scrollable_content_region.width
        return width if width > 0 else 80

    # -- actions on the selected run or schedule (actions.py, schedule_actions.py) --

    def action_cancel_run(self) -> None:
        self.run_actions.cancel()

    def action_redrive_run(self) -> None:
        self.run_actions.redrive()

    def action_wake_run(self) -> None:
        self.run_actions.wake()

    def action_pause_run(self) -> None:
        """Pause or resume the selected run; in the Schedules view, the selected schedule."""
        if self.view == "schedules":
            self.schedule_actions.toggle_pause()
        else:
            self.run_actions.pause_or_resume()

    def action_trigger_schedule(self) -> None:
        if self.view != "schedules":
            self.notify("t fires a schedule now: open the Schedules view (7)", severity="warning")
            return
        self.schedule_actions.trigger()

    async def action_signal_run(self) -> None:
        await self.run_actions.signal(sent=self._reload)

    def action_copy_id(self) -> None:
        self.run_actions.copy_id()

    @on(ActionDone)
    def _action_done(self, message: ActionDone) -> None:
        if not self.is_running:
            return
        self.notify(
            message.message,
            severity="error" if message.error else "information",
            timeout=8 if message.error else 4,
        )
        self._reload()  # our own writes do not move data_version on our own connection

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
        self.query_one(KeyHints).set_view(key)
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
        if not self.is_running:
            return  # the debounce timer fired while the app exits
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
        self.push_screen(HelpScreen(self.shown_path))
