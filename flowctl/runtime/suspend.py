"""How a handler stops and how a step body is called: the pieces the replay context and
the fan-out calls (flowctl.runtime.fanout) share, apart from both."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from datetime import datetime
from typing import Any

from flowctl.model import JournalEntry, RunStatus


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
    ) -> None:
        super().__init__(f"suspend: {status} until {run_at}")
        self.status = status
        self.run_at = run_at
        self.entry = entry
        self.event = event


# How a step's body is called: None, directly; the batch runner sets its own, which runs
# a body that may block on another thread while the other handlers go on.
StepCaller = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
step_caller: contextvars.ContextVar[StepCaller | None] = contextvars.ContextVar(
    "flowctl_step_caller", default=None
)


__all__ = ["StepCaller", "Suspend", "step_caller"]
