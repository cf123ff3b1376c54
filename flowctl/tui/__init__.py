"""The Textual TUI (`flowctl tui`); the only package that imports Textual.

    flowctl.tui.app       FlowctlApp: key bindings, polling, actions through flowctl.ops
    flowctl.tui.views     the tabs (which runs each one lists) and their row data
    flowctl.tui.render    pure text rendering of runs, timelines and errors
    flowctl.tui.widgets   the table, detail pane, view bar and key hints
    flowctl.tui.screens   modal screens: confirm, filter, signal, help
    flowctl.tui.messages  what the thread workers post back to the app and its screens
    app.tcss              the stylesheet

Imported lazily by `flowctl tui`, so no other command pays for Textual.
"""

from __future__ import annotations

from flowctl.tui.app import FlowctlApp
from flowctl.tui.screens import ConfirmScreen, FilterScreen, HelpScreen, SignalScreen
from flowctl.tui.widgets import RunTable

__all__ = ["ConfirmScreen", "FilterScreen", "FlowctlApp", "HelpScreen", "RunTable", "SignalScreen"]
