"""How a handler stops and how a step body is called: the pieces the replay context and
the fan-out calls (flowctl.runtime.fanout) share, apart from both."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from flowctl.model import JournalEntry, RunStatus

if TYPE_CHECKING:
    from flowctl.runtime.live import LiveRun


class Suspend(BaseException):
    """Unwinds a handler back to the engine when a run must wait.

    BaseException, not Exception, so that `except Exception:` in user code cannot
    swallow it and turn a durable sleep into a silent no-op.
    """

    def __init__(
        self,
        status: RunStatus,
        run_at: datetime | None,
        entry: JournalEntry | None,
        event: tuple[str, dict[str, Any]],
        *,
        journaled: bool = False,
    ) -> None:
        super().__init__(f"suspend: {status} until {run_at}")
        self.status = status
        self.run_at = run_at
        self.entry = entry
        self.event = event
        self.journaled = journaled  # `entry` is in the journal as it stands (a replay's)


class Parked(BaseException):
    """Unwinds a handler whose run was left as it must stay by the handler's own call (a
    run resting for another daemon to take, see Rester): the engine writes nothing more
    and reports `status` and `run_at`."""

    def __init__(self, status: RunStatus, run_at: datetime | None) -> None:
        super().__init__(f"parked: {status} until {run_at}")
        self.status = status
        self.run_at = run_at


class Rester(Protocol):
    """Where a short timed suspension (a sleep, a step's retry) may be waited out in
    memory rather than by unwinding, parking and replaying (issue 40): the daemon's batch
    runner. The run rests first, durably (Store.rest_run: its pending call journaled, its
    lease given up, due to others at a margin after the wake); `rest` frees its slot and
    returns at the wake, and the handler takes the run back itself (Store.resume_run)
    and goes on from where it stood."""

    def may_rest(self, until: datetime) -> datetime | None:
        """The margin (when others may take the run) if a wait until `until` may be spent
        here, else None."""

    def rest(self, live: LiveRun, until: datetime) -> bool:
        """Free the run's slot and wait until `until`: True at the wake, False when the
        daemon stops meanwhile (the handler then hands the run back to any daemon)."""

    def settled(self) -> None:
        """Said once after each may_rest that returned a margin, when that handler is done
        resting (taken back, handed back, or it never rested)."""

    def lease_until(self) -> datetime:
        """The end of a lease taken now."""

    def keep_from(self) -> datetime | None:
        """The earliest end of the lease a run let go for its rest that may be taken back
        as it stands at its wake, rather than a new one (no index moves); None: never."""

    def back(self, live: LiveRun) -> bool:
        """The run is resumed under `live.lease`: it takes a slot again. False when the
        daemon stops meanwhile: the handler hands the run back (Store.release_runs)."""


# The batch runner's Rester for the handlers it runs (None elsewhere: nothing rests).
resting: contextvars.ContextVar[Rester | None] = contextvars.ContextVar(
    "flowctl_resting", default=None
)

# How a step's body is called: None, directly; the batch runner sets its own, which runs
# a body that may block on another thread while the other handlers go on.
StepCaller = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
step_caller: contextvars.ContextVar[StepCaller | None] = contextvars.ContextVar(
    "flowctl_step_caller", default=None
)


__all__ = ["Parked", "Rester", "StepCaller", "Suspend", "resting", "step_caller"]
