"""The main screen's widgets: the tab bar, the key hints, the run list and the detail pane.

Each widget renders what the app hands it and posts messages back; none of them queries
the store. The header line reads the app's own state, so it lives with the app in
`flowctl.tui`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable, Static

from flowctl.tui.render import tab_count
from flowctl.tui.views import VIEWS, View


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

    def _labels(self, names: str, gap: str, tight: int = 0) -> list[tuple[View, str]]:
        """Tab labels; `names` is "full", "short", or "active" (only the current view named).
        `tight` 1: no space between key and name, and no count of 0 but the open view's;
        2: no count but the open view's (an 80-column bar with every view busy)."""
        out = []
        for view in VIEWS:
            n = self.counts.get(view.key)
            if view.optional and not n and view.key != self.active:
                continue
            if names == "full":
                name = f" {view.title}"
            elif names == "short" or view.key == self.active:
                name = f"{'' if tight else ' '}{view.short}"
            else:
                name = ""
            hidden = view.key != self.active and (tight == 2 or (tight == 1 and not n))
            count = "" if n is None or hidden else f" {tab_count(n)}"
            out.append((view, f" {view.number}{name}{count}{gap}"))
        return out

    def render(self) -> Content:
        levels = (
            ("full", " ", 0),
            ("short", " ", 0),
            ("short", "", 0),
            ("short", "", 1),
            ("short", "", 2),
            ("active", " ", 0),
        )
        for names, gap, tight in levels:
            labels = self._labels(names, gap, tight)
            if sum(len(label) for _, label in labels) <= self.size.width:
                break
        parts: list[str | tuple[str, str]] = []
        for view, label in labels:
            click = f"@click=app.show_view('{view.key}')"
            style = "reverse bold" if view.key == self.active else "dim"
            parts.append((label, f"{style} {click}"))
        return Content.assemble(*parts)


class KeyHints(Static):
    """The key reminder line: the keys that act in the current view (a dead run can be
    redriven, not woken); it drops the padding between items on narrow terminals."""

    LEAD = (("?", "help"), ("/", "search"), ("f", "filter"))
    TAIL = (("y", "copy id"), ("q", "quit"))
    ACTIONS: ClassVar[dict[str, tuple[tuple[str, str], ...]]] = {
        "running": (("c", "cancel"), ("s", "signal"), ("p", "pause")),
        "sleeping": (("w", "wake"), ("c", "cancel"), ("s", "signal"), ("p", "pause")),
        "waiting": (("s", "signal"), ("c", "cancel"), ("p", "pause")),
        "queued": (("w", "wake"), ("c", "cancel"), ("p", "pause")),
        "dead": (("r", "redrive"),),
        "completed": (),
        "paused": (("p", "resume"), ("c", "cancel")),
        "cancelled": (("r", "redrive"),),
        "all": (("c", "cancel"), ("r", "redrive"), ("s", "signal"), ("w", "wake"), ("p", "pause")),
    }
    # Schedules have their own actions and no run id to copy.
    SCHEDULE_KEYS = (("?", "help"), ("p", "pause/resume"), ("t", "trigger now"), ("q", "quit"))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.view = VIEWS[0].key

    def set_view(self, key: str) -> None:
        self.view = key
        self.refresh()

    def keys(self) -> tuple[tuple[str, str], ...]:
        """(key, label) pairs shown for the current view."""
        if self.view == "schedules":
            return self.SCHEDULE_KEYS
        return (*self.LEAD, *self.ACTIONS.get(self.view, ()), *self.TAIL)

    def render(self) -> Content:
        keys = self.keys()
        if sum(len(k) + len(label) + 2 for k, label in keys) > self.size.width:
            # `?` lists search and filter too: the keys that act on this view stay
            keys = tuple(k for k in keys if k not in (("/", "search"), ("f", "filter")))
        wide = sum(len(k) + len(label) + 4 for k, label in keys) <= self.size.width
        gap = "  " if wide else " "
        parts: list[str | tuple[str, str]] = []
        for key, label in keys:
            parts.append((f"{gap[:1]}{key}", "bold $accent"))
            parts.append(f" {label}{gap[1:]}")
        return Content.assemble(*parts)


# Tab cycles views from the list and the detail; bound on them, not on the app, so that
# Tab still moves between fields in the signal form.
VIEW_CYCLE_BINDINGS = [
    Binding("tab", "app.cycle_view(1)", "Next view", show=False),
    Binding("shift+tab", "app.cycle_view(-1)", "Previous view", show=False),
]


TICK_SECONDS = 1.0  # how often countdowns and relative times re-render (no database reads)

# Widgets own their timers: a timer stops with the widget that owns it, so nothing touches a
# widget after it was removed (an app-level timer still fires while the app's screens are
# taken down at exit). A tick callback is handed the widget itself, never a query.


class RunTable(DataTable[Text]):
    """The run list, with vim keys on top of the arrows; `on_tick(table)` every second
    re-renders its live cells (countdowns), `on_resize(table)` refits its columns. Every
    column has a set width (flowctl.tui.fit decides it), so what shows never depends on
    when DataTable would have measured auto-width columns."""

    BINDINGS: ClassVar = [
        *VIEW_CYCLE_BINDINGS,
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g,home", "scroll_top", "Top", show=False),
        Binding("G,end", "scroll_bottom", "Bottom", show=False),
    ]

    def __init__(
        self,
        *,
        on_tick: Callable[[RunTable], None],
        on_resize: Callable[[RunTable], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._on_tick = on_tick
        self._refit = on_resize  # the columns are fitted to the width (flowctl.tui.fit)
        self._layout: tuple[tuple[str, str, int], ...] = ()

    def on_mount(self) -> None:
        self.set_interval(TICK_SECONDS, lambda: self._on_tick(self))

    def room(self, rows: int) -> int | None:
        """The cells the columns of `rows` rows may take: the table's width, less the
        vertical scrollbar when the rows (and the header) overflow the table's height (the
        columns are fitted again whenever the rows change); None before the table is laid
        out."""
        width = self.size.width
        if not width:
            return None
        scrolls = rows + self.header_height > self.size.height
        return width - (self.styles.scrollbar_size_vertical if scrolls else 0)

    def lay_out(self, columns: Sequence[tuple[str, str, int]]) -> bool:
        """Show these (key, label, width) columns; rebuilt (rows dropped) only when they
        differ from the columns shown. True when rebuilt: the caller adds the rows again."""
        if tuple(columns) == self._layout:
            return False
        self.clear(columns=True)
        for key, label, width in columns:
            self.add_column(label, key=key, width=width)
        self._layout = tuple(columns)
        return True

    def forget_layout(self) -> None:
        """Drop the columns (a view change): the next lay_out rebuilds whatever it is given."""
        self.clear(columns=True)
        self._layout = ()

    def on_resize(self) -> None:
        self._refit(self)


class DetailText(Static):
    """The detail pane's text; `on_tick(text)` every second re-renders its relative times."""

    def __init__(self, *, on_tick: Callable[[DetailText], None], **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._on_tick = on_tick

    def on_mount(self) -> None:
        self.set_interval(TICK_SECONDS, lambda: self._on_tick(self))


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
