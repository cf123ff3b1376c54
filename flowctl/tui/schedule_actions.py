"""The TUI's actions on the selected schedule: pause or resume it (p), fire it now (t, asks
first). Each runs the `flowctl.ops.schedules` call the CLI's `flowctl schedule pause /
resume / trigger` runs, in a thread worker (actions.Acting); the outcome is a notification
(ActionDone, handled by the app), and the page is re-queried. `ScheduleActions` is
composed into `FlowctlApp`, as `RunActions` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.content import Content

from flowctl.clock import Clock
from flowctl.ops import schedules as schedule_ops
from flowctl.store import Store
from flowctl.tui.actions import Acting
from flowctl.tui.render import to_minute


class ScheduleActions:
    """The actions on the schedule under the cursor (`selected`, as `schedule show --json`
    gives it; None: no schedule selected)."""

    def __init__(
        self,
        acting: Acting,
        store: Store,
        clock: Clock,
        selected: Callable[[], dict[str, Any] | None],
    ) -> None:
        self.acting = acting
        self.app = acting.app
        self.store = store
        self.clock = clock
        self.selected = selected

    def _require_schedule(self) -> dict[str, Any] | None:
        item = self.selected()
        if item is None:
            self.app.notify("select a schedule first", severity="warning")
        return item

    def toggle_pause(self) -> None:
        """Pause the selected schedule, or resume it from now (fires that fell in the
        pause are not run): no question, it is undone with the same key."""
        item = self._require_schedule()
        if item is None:
            return
        name = str(item["name"])
        if item.get("paused"):

            def resume() -> str:
                info = schedule_ops.resume_schedule(self.store, name, clock=self.clock)
                nxt = info.row.next_fire_at
                when = "no further fire" if nxt is None else f"next fire {to_minute(nxt)}"
                return f"resumed schedule {name}: {when} (fires missed while paused do not run)"

            self.acting.run(resume, f"resume of schedule {name} failed")
            return

        def pause() -> str:
            schedule_ops.pause_schedule(self.store, name, clock=self.clock)
            return f"paused schedule {name}: it fires no run until resumed (p)"

        self.acting.run(pause, f"pause of schedule {name} failed")

    def trigger(self) -> None:
        """Fire the selected schedule now, after asking."""
        item = self._require_schedule()
        if item is None:
            return
        name = str(item["name"])

        def trigger() -> str:
            done = schedule_ops.trigger_schedule(self.store, name, clock=self.clock)
            out = done.outcome
            if done.run is None:
                return f"{name}: no run started: {out.detail}"
            if not out.created:
                return f"{name}: already triggered at this instant: run {done.run.run_id}"
            return f"triggered {name}: run {done.run.run_id} queued"

        question = Content.assemble(
            "Fire schedule ",
            (name, "bold"),
            " now?",
            (
                "\n\nOne run starts now with the schedule's input, recorded as manual in its"
                " history; its overlap policy applies and its calendar does not move.",
                "dim",
            ),
        )
        self.acting.confirm("Trigger", question, trigger, f"trigger of schedule {name} failed")
