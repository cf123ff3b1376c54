"""The header line: the database's full path, whether a daemon runs on it, the active
filter and search, and the clock. It reads the app's own state (store, clock, daemons,
filters), so it is built for `FlowctlApp` and queries nothing itself. The clock is local
time with the zone, as every time the TUI shows."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from flowctl.tui.render import daemon_line, short_path, to_second
from flowctl.tui.widgets import TICK_SECONDS

WIDE = 100  # from this width the clock shows the date too
PATH_MIN = 20  # cells of the database path kept before the daemon part shortens


class HeaderLine(Static):
    """The database's full path, whether a daemon runs on it (since when, runs held, wake
    lateness p99), active filter and search on the left; the clock on the right (its own
    timer re-renders it every second)."""

    def on_mount(self) -> None:
        self.set_interval(TICK_SECONDS, self.refresh)

    def render(self) -> Content:
        from flowctl.tui.app import FlowctlApp  # the app imports this module

        app = self.app
        if not isinstance(app, FlowctlApp):
            return Content()
        now = app.clock.now()
        read_only = "  read-only" if app.store.read_only else ""
        # The date goes first on a narrow screen: the daemon's state matters more.
        clock = f"{to_second(now) if self.size.width >= WIDE else to_second(now)[11:]} "
        fixed = len(" flowctl  ") + len(read_only) + len(clock)
        path_min = min(len(app.shown_path), PATH_MIN)
        room = self.size.width - fixed - path_min - 1
        daemon = daemon_line(app.daemons, now, app.lateness, room)
        path = short_path(app.shown_path, self.size.width - fixed - len(daemon[0]) - 1)
        left = Content.assemble(
            (" flowctl ", "bold reverse"), f" {path}", (read_only, "bold $warning"), daemon
        )
        filters = Content.assemble(
            ("  workflow: ", "dim"),
            (app.workflow or "all", "bold $accent" if app.workflow else ""),
            ("  search: ", "dim"),
            (app.search or "—", "bold $accent" if app.search else ""),
        )
        room = self.size.width - left.cell_length - len(clock) - 1
        if app.workflow or app.search or room >= filters.cell_length:
            left = Content.assemble(left, filters)  # unset filters give way on a narrow screen
        pad = max(1, self.size.width - left.cell_length - len(clock))
        return Content.assemble(left, " " * pad, (clock, "dim"))
