"""The TUI's dialogs: confirm before a write, send a signal, filter by workflow, key help.

Each dialog is a modal screen that dismisses with its answer; the app decides what to do
with it. While one is open the main screen's keys are switched off (see
`FlowctlApp.check_action`), so a dialog never acts on a run behind it by accident.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from flowctl import ops
from flowctl.clock import Clock
from flowctl.errors import FlowctlError
from flowctl.store import Store
from flowctl.tui.messages import SignalSent, WorkflowNames
from flowctl.tui.render import describe_error


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


# Keys besides printable ones that a form field acts on, passed on with them.
HANDED_ON = frozenset(
    {"tab", "shift+tab", "enter", "backspace", "delete", "left", "right", "home", "end"}
)


class SignalScreen(ModalScreen[str | None]):
    """Name + JSON payload. Mistakes are shown inline and the form stays open.

    The payload is parsed with the CLI's own `ops.parse_json_arg`, and the name is
    checked by `ops.send_signal` itself (reserved `_` names are refused there), so the
    TUI cannot drift from the CLI's rules. The name the run awaits is the name field's
    value, selected: enter sends it, typing replaces it.
    """

    AUTO_FOCUS = "#signal-name"
    # Tab moves between fields as the key arrives (priority), not once it has bubbled up
    # behind the keys typed after it: `name<tab>payload` typed fast fills both fields.
    BINDINGS: ClassVar = [
        Binding("escape", "cancel", "Cancel", show=False),
        Binding("tab", "app.focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True),
    ]

    def __init__(self, store: Store, clock: Clock, run_id: str, awaited: str | None = None) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.run_id = run_id
        self.awaited = awaited
        self.sent_name = ""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as dialog:
            dialog.border_title = f"Send a signal to {self.run_id}"
            yield Label("Signal name" + (" (the one it waits for)" if self.awaited else ""))
            yield Input(
                self.awaited or "",
                placeholder="signal name, e.g. approved",
                id="signal-name",
                select_on_focus=True,
            )
            yield Label("JSON payload (empty = null)")
            yield Input(placeholder='{"by": "ana"}', id="signal-payload")
            yield Static("", id="signal-error")
            with Horizontal(classes="buttons"):
                yield Button(Content("Send [enter]"), variant="primary", id="send")
                yield Button(Content("Cancel [esc]"), id="cancel")

    def on_mount(self) -> None:
        self.query_one("#signal-name", Input).focus()

    def on_key(self, event: events.Key) -> None:
        """Keys that reach the form itself rather than a field (handed to the screen while
        no field had focus yet) go to the focused field, never dropped: characters and
        backspace edit it, enter sends. The app waits for this form to be mounted before
        it reads the next key (FlowctlApp.action_signal_run), so this is a safety net."""
        focused = self.focused
        if not isinstance(focused, Input):
            return
        if event.is_printable and event.character is not None:
            selection = focused.selection
            if selection.is_empty:
                focused.insert_text_at_cursor(event.character)
            else:
                focused.replace(event.character, *selection)  # the pre-filled name
        elif event.key == "backspace":
            focused.action_delete_left()
        elif event.key == "enter":
            self.submit()
        else:
            return
        event.stop()
        event.prevent_default()

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


# At most 64 cells a line: the overlay fits an 80-column terminal without wrapping, and
# in 24 rows without scrolling.
HELP = """\
[b]Views[/b]      1 Running   2 Sleeping   3 Waiting    4 Queued
           5 Dead      6 Completed  7 Schedules  8 All
           9 Paused    0 Cancelled  tab, shift+tab  cycle
[b]Moving[/b]     j k ↑ ↓   move in the list, or scroll the detail
           g G       first / last row     ← →  scroll sideways
           d         focus the list or the detail
           enter     the detail full-screen (escape returns)
[b]Narrowing[/b]  /         search run ids and input (enter keeps it)
           f         filter by workflow
[b]Runs[/b]       c cancel     r redrive (dead or cancelled)
           w wake now   s signal     p pause / resume
           y copy the run id         (each action asks first)
[b]Schedules[/b]  p pause / resume     t trigger now (asks first)

           ?  this help              q  quit
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
            yield Static(Content.from_markup(HELP.rstrip("\n")))
            yield Static(Content.styled(f"database: {self.db_path}", "dim"))

    def action_close(self) -> None:
        self.dismiss(None)
