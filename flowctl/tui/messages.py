"""The messages the TUI's thread workers post back to the app and its screens.

A worker reads the store off the event loop and posts one of these; the handler (marked
`@on(...)`) applies it on the loop, so widgets are only touched there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from flowctl import ops
    from flowctl.tui.views import Page


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


class ScheduleLoaded(Message):
    """One schedule as `flowctl schedule show --json` gives it (None and `error` if the
    read failed)."""

    def __init__(self, name: str, item: dict[str, Any] | None, error: str | None) -> None:
        super().__init__()
        self.name = name
        self.item = item
        self.error = error


class SignalSent(Message):
    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class WorkflowNames(Message):
    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names
