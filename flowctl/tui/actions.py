"""The TUI's actions on the selected run: cancel, redrive, wake, pause/resume, signal, copy.

Each asks first (a ConfirmScreen), then runs one `flowctl.ops` call in a thread worker, as
the CLI calls it; the outcome comes back as an ActionDone message and a notification, and
the page is re-queried (our own writes do not move data_version on our own connection).
`RunActions` is a base of `FlowctlApp`: it needs the app's store, clock, `selected_run`
and `_reload`, and touches no widget of the main screen.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import on, work
from textual.app import App
from textual.content import Content

from flowctl import ops
from flowctl.clock import Clock
from flowctl.model import Run, RunStatus
from flowctl.store import Store
from flowctl.transitions import Action, refusal
from flowctl.tui.messages import ActionDone
from flowctl.tui.render import describe_error, to_second
from flowctl.tui.screens import ConfirmScreen, SignalScreen


class RunActions(App[None]):
    """The run actions of `FlowctlApp` (its base: the app supplies the store and cursor)."""

    store: Store
    clock: Clock
    view: str

    def selected_run(self) -> Run | None:
        raise NotImplementedError

    def toggle_schedule_pause(self) -> None:
        raise NotImplementedError

    def _reload(self) -> None:
        raise NotImplementedError

    def awaited_signal(self, run: Run) -> str | None:
        raise NotImplementedError

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
        if not self.is_running:
            return
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
            f"Due at {to_second(run.run_at)}; it becomes due now. The timeline records who"
            " woke it, and the recorded deadline is kept for history."
        )
        self._confirm("Wake now", self._question("Wake", run, extra), wake, "wake failed")

    def action_pause_run(self) -> None:
        """Pause the selected run, or resume it when it is paused (or a pause is pending);
        in the Schedules view, the selected schedule."""
        if self.view == "schedules":
            self.toggle_schedule_pause()
            return
        run = self._require_run()
        if run is None:
            return
        resuming = run.status is RunStatus.PAUSED or run.pause_requested
        action = Action.RESUME if resuming else Action.PAUSE
        refused = refusal(action, run.run_id, run.status, pause_requested=run.pause_requested)
        if refused is not None:
            self.notify(refused, severity="warning")
            return
        if resuming:

            def act() -> str:
                after = ops.resume(self.store, run.run_id, clock=self.clock)
                if after.status is RunStatus.RUNNING:
                    return f"resumed {run.run_id}: the pause it was asked for is withdrawn"
                return f"resumed {run.run_id}: {after.status}"

            extra = "It is due at once if its wake time passed while paused, else at its wake."
            self._confirm("Resume", self._question("Resume", run, extra), act, "resume failed")
            return

        def pause() -> str:
            after = ops.pause(self.store, run.run_id, clock=self.clock)
            if after.status is RunStatus.RUNNING:
                return f"pause requested: {run.run_id} parks at its next durable call"
            return f"paused {run.run_id}"

        extra = (
            "It is running: it parks at its next durable call (nothing is interrupted)."
            if run.status is RunStatus.RUNNING
            else "It is never claimed while paused; its deadline still runs."
        )
        self._confirm("Pause", self._question("Pause", run, extra), pause, "pause failed")

    async def action_signal_run(self) -> None:
        """Open the signal form, and wait until it is mounted before the next key is read:
        keys typed at once after `s` then go to its focused field, in order."""
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

        form = SignalScreen(self.store, self.clock, run.run_id, self.awaited_signal(run))
        await self.push_screen(form, sent)

    def action_copy_id(self) -> None:
        run = self._require_run()
        if run is None:
            return
        self.copy_to_clipboard(run.run_id)  # the app's own clipboard, and OSC 52 to the terminal
        if self.is_headless:  # no terminal at all: nothing outside this process has it
            self.notify(
                f"this terminal cannot copy; the run id is {run.run_id}", severity="warning"
            )
        else:  # a terminal never says whether it honoured OSC 52
            self.notify(
                f"asked the terminal to copy {run.run_id} (terminals without OSC 52 ignore it)"
            )
