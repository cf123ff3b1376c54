"""The header line: the database's full path, whether a daemon runs on it, the active
filter and search, and the clock. It reads the app's own state (store, clock, daemons,
filters), so it is built for `FlowctlApp` and queries nothing itself."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from flowctl.tui.render import daemon_line, short_path, to_second
from flowctl.tui.widgets import TICK_SECONDS


class HeaderLine(Static):
    """The database's full path, whether a daemon runs on it, active filter and search on
    the left; the clock on the right (its own timer re-renders it every second)."""

    def on_mount(self) -> None:
        self.set_interval(TICK_SECONDS, self.refresh)

    def render(self) -> Content:
        from flowctl.tui.app import FlowctlApp  # the app imports this module

        app = self.app
        if not isinstance(app, FlowctlApp):
            return Content()
        read_only = "  read-only" if getattr(app.store, "read_only", False) else ""
        daemon = daemon_line(app.daemons, app.clock.now())
        clock = f"{to_second(app.clock.now())} UTC "
        path = short_path(app.shown_path, self.size.width - 11 - len(read_only + daemon[0] + clock))
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
