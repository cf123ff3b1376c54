"""The header line: the database's full path, whether a daemon runs on it (since when,
runs held, wake lateness), the active filter and search, and the clock (local time with
the zone, as every time the TUI shows).

It reads what it shows from a `HeaderSource` (the app is one) each time it renders, and
queries nothing itself; `daemon_line` and `short_path` fit its parts to the width.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from textual.content import Content
from textual.widgets import Static

from flowctl.clock import Clock
from flowctl.durations import format_duration
from flowctl.store import Store
from flowctl.tui.render import to_second
from flowctl.tui.views import DaemonUp, WakeLateness
from flowctl.tui.widgets import TICK_SECONDS

WIDE = 100  # from this width the clock shows the date too
PATH_MIN = 20  # cells of the database path kept before the daemon part shortens


class HeaderSource(Protocol):
    """What the header shows, as the app holds it: read each time the header renders."""

    store: Store
    clock: Clock
    shown_path: str
    daemons: list[DaemonUp] | None  # None: not looked at yet
    lateness: WakeLateness | None
    workflow: str | None
    search: str | None


class HeaderLine(Static):
    """The database's full path, whether a daemon runs on it (since when, runs held, wake
    lateness p99), active filter and search on the left; the clock on the right (its own
    timer re-renders it every second)."""

    def __init__(self, source: HeaderSource, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.source = source

    def on_mount(self) -> None:
        self.set_interval(TICK_SECONDS, self.refresh)

    def render(self) -> Content:
        src = self.source
        now = src.clock.now()
        width = self.size.width
        read_only = "  read-only" if src.store.read_only else ""
        fixed = len(" flowctl  ") + len(read_only)
        path_min = min(len(src.shown_path), PATH_MIN)
        # A filter the user set is room taken first: the date, the daemon's wording and the
        # path give way to it, and only a term longer than the rest of the line is cut.
        chosen = filter_text(src.workflow, src.search, width - fixed - path_min - 10)
        compact = len(daemon_line(src.daemons, now, src.lateness, 0)[0])
        spare = width - fixed - path_min - chosen.cell_length - compact - 1
        dated = width >= WIDE and spare >= len(to_second(now)) + 1
        clock = f"{to_second(now) if dated else to_second(now)[11:]} "
        fixed += len(clock) + chosen.cell_length
        daemon = daemon_line(src.daemons, now, src.lateness, width - fixed - path_min - 1)
        path = short_path(src.shown_path, width - fixed - len(daemon[0]) - 1)
        left = Content.assemble(
            (" flowctl ", "bold reverse"), f" {path}", (read_only, "bold $warning"), daemon
        )
        unset = filter_text(src.workflow, src.search, unset=True)
        if unset.cell_length <= width - left.cell_length - chosen.cell_length - len(clock) - 1:
            chosen = Content.assemble(unset, chosen)  # unset ones give way on a narrow screen
        left = Content.assemble(left, chosen)
        pad = max(1, width - left.cell_length - len(clock))
        return Content.assemble(left, " " * pad, (clock, "dim"))


def filter_text(
    workflow: str | None, search: str | None, room: int = 1 << 20, *, unset: bool = False
) -> Content:
    """The header's filters the user set (`unset`: those not set, as `workflow: all`), in
    at most `room` cells: a search term is cut (…) only when the part would not fit."""
    parts: list[tuple[str, str]] = []
    if (workflow is None) is unset:
        parts += [("  workflow: ", "dim"), (workflow or "all", "" if unset else "bold $accent")]
    if (search is None) is unset:
        parts += [("  search: ", "dim"), (search or "—", "" if unset else "bold $accent")]
    over = sum(len(text) for text, _ in parts) - room
    if search and not unset and over > 0:
        parts[-1] = (search[: max(1, len(search) - over - 1)] + "…", parts[-1][1])
    return Content.assemble(*parts)


def late_text(seconds: float) -> str:
    """A wake lateness as an operator reads it: 0.4ms, 37ms, 1.2s, 2m05s."""
    if seconds < 0.01:
        return f"{seconds * 1000:.1f}ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return format_duration(seconds)


def daemon_line(
    daemons: list[DaemonUp] | None,
    now: datetime,
    lateness: WakeLateness | None = None,
    room: int = 1 << 20,
) -> tuple[str, str]:
    """(text, style) of the header's daemon part: who wakes the sleepers (since when, runs
    held, wake lateness p99), or that nothing will; the longest wording that fits `room`
    cells. None: not looked at yet (the first page is loading)."""
    if daemons is None:
        return ("", "")
    if not daemons:
        return ("  no daemon — sleepers will not wake", "bold $warning")
    first = min(daemons, key=lambda d: d.started_at)
    held = sum(d.held for d in daemons)
    runs = f"{held} run" + ("" if held == 1 else "s")
    since = format_duration(max(now - first.started_at, timedelta(0)))
    many = f"{len(daemons)} daemons" if len(daemons) > 1 else "daemon"
    full, medium, compact = "", "", ""
    if lateness is not None and lateness.p99 is None:
        full, medium, compact = ", no wakes in the last hour", ", no wakes 1h", " · p99 —"
    elif lateness is not None and lateness.p99 is not None:
        late = late_text(lateness.p99)
        full, medium, compact = f", wakes p99 {late} late", f", wake p99 {late}", f" · p99 {late}"
    forms = (
        f"  {many} up since {to_second(first.started_at)} ({since}), holding {runs}{full}",
        f"  {many} up {since}, {runs} held{medium}",
        f"  {many} {since} · {runs}{compact}",
    )
    fitting = [f for f in forms if len(f) <= room]
    return (fitting[0] if fitting else forms[-1], "$success")


def short_path(path: str, room: int) -> str:
    """`path` in `room` cells: its end (which names the file) after an ellipsis; never
    less than the file name itself."""
    if len(path) <= room:
        return path
    name = path.rsplit("/", 1)[-1]
    if room <= len(name) + 1:
        return name
    return "…" + path[-(room - 1) :]
