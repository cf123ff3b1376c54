"""The TUI's actions on the selected run: cancel, redrive, wake, pause/resume, signal, copy.

Each asks first (a ConfirmScreen), then runs one `flowctl.ops` call in a thread worker, as
the CLI calls it (`Acting`); the outcome comes back to the app as an ActionDone message,
which notifies and re-queries the page (our own writes do not move data_version on our
own connection). `RunActions` is composed into `FlowctlApp`: it is given the store, the
clock and how to find the selected run, and touches no widget of the main screen.
"""

from __future__ import annotations

from collections.abc import Callable

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


class Acting:
    """Ask, then act: one ops call in a thread worker of `app` (group "action"), its
    outcome posted to the app as ActionDone. Shared by the run and schedule actions."""

    def __init__(self, app: App[None]) -> None:
        self.app = app

    def confirm(
        self, title: str, question: Content, action: Callable[[], str], failure: str
    ) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.run(action, failure)

        self.app.push_screen(ConfirmScreen(question, title), answered)

    def run(self, action: Callable[[], str], failure: str) -> None:
        """Run one ops call off the UI thread; its outcome comes back as a notification."""

        def act() -> None:
            try:
                message = action()
            except Exception as e:
                self.app.post_message(ActionDone(f"{failure}: {describe_error(e)}", error=True))
            else:
                self.app.post_message(ActionDone(message, error=False))

        self.app.run_worker(act, thread=True, group="action")


class RunActions:
    """The actions on the run under the cursor (`selected`; None: no run selected)."""

    def __init__(
        self,
        acting: Acting,
        store: Store,
        clock: Clock,
        selected: Callable[[], Run | None],
        awaited_signal: Callable[[Run], str | None],
    ) -> None:
        self.acting = acting
        self.app = acting.app
        self.store = store
        self.clock = clock
        self.selected = selected
        self.awaited_signal = awaited_signal

    def _require_run(self) -> Run | None:
        run = self.selected()
        if run is None:
            self.app.notify("select a run first", severity="warning")
        return run

    def _refused(self, run: Run, wanted: tuple[RunStatus, ...], text: str) -> bool:
        """Said and True when `run` is not in one of the `wanted` statuses."""
        if run.status in wanted:
            return False
        self.app.notify(f"{run.run_id} is {run.status}: {text}", severity="warning")
        return True

    def cancel(self) -> None:
        run = self._require_run()
        if run is None:
            return
        if run.status.is_terminal:
            self.app.notify(
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

        self.acting.confirm("Cancel", question("Cancel", run, extra), cancel, "cancel failed")

    def redrive(self) -> None:
        run = self._require_run()
        if run is None or self._refused(
            run,
            (RunStatus.DEAD, RunStatus.CANCELLED),
            "only dead or cancelled runs can be redriven",
        ):
            return

        def redrive() -> str:
            ops.redrive(self.store, run.run_id, clock=self.clock)
            return f"redriven {run.run_id}: queued with a fresh attempt budget"

        extra = (
            "It is queued again with a fresh attempt budget; checkpoints before the failure stand."
        )
        self.acting.confirm("Redrive", question("Redrive", run, extra), redrive, "redrive failed")

    def wake(self) -> None:
        run = self._require_run()
        if run is None or self._refused(
            run,
            (RunStatus.SLEEPING, RunStatus.QUEUED),
            "only sleeping or queued runs can be woken",
        ):
            return

        def wake() -> str:
            ops.wake_now(self.store, run.run_id, clock=self.clock)
            return f"woke {run.run_id}: due now (recorded as an operator action)"

        extra = (
            f"Due at {to_second(run.run_at)}; it becomes due now. The timeline records who"
            " woke it, and the recorded deadline is kept for history."
        )
        self.acting.confirm("Wake now", question("Wake", run, extra), wake, "wake failed")

    def pause_or_resume(self) -> None:
        """Pause the selected run, or resume it when it is paused (or a pause is pending)."""
        run = self._require_run()
        if run is None:
            return
        resuming = run.status is RunStatus.PAUSED or run.pause_requested
        action = Action.RESUME if resuming else Action.PAUSE
        refused = refusal(action, run.run_id, run.status, pause_requested=run.pause_requested)
        if refused is not None:
            self.app.notify(refused, severity="warning")
        elif resuming:
            self._resume(run)
        else:
            self._pause(run)

    def _resume(self, run: Run) -> None:
        def resume() -> str:
            after = ops.resume(self.store, run.run_id, clock=self.clock)
            if after.status is RunStatus.RUNNING:
                return f"resumed {run.run_id}: the pause it was asked for is withdrawn"
            return f"resumed {run.run_id}: {after.status}"

        extra = "It is due at once if its wake time passed while paused, else at its wake."
        self.acting.confirm("Resume", question("Resume", run, extra), resume, "resume failed")

    def _pause(self, run: Run) -> None:
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
        self.acting.confirm("Pause", question("Pause", run, extra), pause, "pause failed")

    async def signal(self, sent: Callable[[], None]) -> None:
        """Open the signal form, and wait until it is mounted before the next key is read:
        keys typed at once after `s` then go to its focused field, in order. `sent` runs
        after a signal was sent."""
        run = self._require_run()
        if run is None:
            return
        if run.status.is_terminal:
            self.app.notify(
                f"{run.run_id} is {run.status}: signals go to queued, running, sleeping or"
                " waiting runs",
                severity="warning",
            )
            return

        def done(name: str | None) -> None:
            if name:
                self.app.notify(f"signal {name!r} sent to {run.run_id}")
                sent()

        form = SignalScreen(self.store, self.clock, run.run_id, self.awaited_signal(run))
        await self.app.push_screen(form, done)

    def copy_id(self) -> None:
        run = self._require_run()
        if run is None:
            return
        self.app.copy_to_clipboard(run.run_id)  # the app's clipboard, and OSC 52 to the terminal
        if self.app.is_headless:  # no terminal at all: nothing outside this process has it
            self.app.notify(
                f"this terminal cannot copy; the run id is {run.run_id}", severity="warning"
            )
        else:  # a terminal never says whether it honoured OSC 52
            self.app.notify(
                f"asked the terminal to copy {run.run_id} (terminals without OSC 52 ignore it)"
            )


def question(verb: str, run: Run, extra: str = "") -> Content:
    """The confirmation's question: the verb, the run, its workflow and status."""
    return Content.assemble(
        f"{verb} run ",
        (run.run_id, "bold"),
        f" ({run.workflow}, {run.status})?",
        (f"\n\n{extra}" if extra else "", "dim"),
    )
