"""The run state machine as pure functions: no I/O, no SQL, no clock.

Every store applies what these functions decide and returns what it applied, so two
stores (and the engine, the daemon and the operator front ends) cannot drift apart:

- `ErrorKind`: the one vocabulary for how an attempt or a run ended badly.
- `guard()`: which statuses each operator action accepts, and the one-line refusal.
- `parked_run_at()`: when a parked run is next due (wake, signal timeout, retry, deadline).
- `claim_verdict()`: what claiming a due run does (claim it, or end it here, and why).
- `next_attempt()`: after a failed attempt, retry at T or dead-letter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from flowctl.errors import InvalidStateError
from flowctl.model import RunStatus


class ErrorKind(StrEnum):
    """How an attempt or a run ended badly: the `kind` of every recorded run error."""

    RAISED = "raised"  # the handler (or a step it did not catch) raised
    TIMEOUT = "timeout"  # the attempt used up its execution budget
    DEADLINE = "deadline"  # the run's deadline passed
    CANCELLED = "cancelled"  # an operator cancelled it
    NONDETERMINISM = "nondeterminism"  # replay met a different call than the journal holds
    POISON = "poison"  # it kept killing the worker that ran it
    NON_RETRYABLE = "non_retryable"  # an error no retry can fix
    LOAD = "load"  # the workflow could not be loaded (file gone, import error)

    @property
    def retryable(self) -> bool:
        """Whether a failure of this kind may spend another attempt."""
        return self in _RETRYABLE

    @property
    def label(self) -> str:
        """The timeline event that records a failed attempt of this kind."""
        return _LABELS.get(self, "failed")


_RETRYABLE = frozenset({ErrorKind.RAISED, ErrorKind.TIMEOUT, ErrorKind.LOAD})
_LABELS = {ErrorKind.TIMEOUT: "timed out", ErrorKind.DEADLINE: "deadline exceeded"}


def error_kind(error: dict[str, object] | None) -> ErrorKind:
    """The kind of a recorded error dict; errors recorded before kinds existed were raised."""
    raw = (error or {}).get("kind")
    try:
        return ErrorKind(str(raw)) if raw is not None else ErrorKind.RAISED
    except ValueError:
        return ErrorKind.RAISED


# ---------------------------------------------------------------------------
# Operator guards


class Action(StrEnum):
    """Operator actions that depend on a run's status."""

    SIGNAL = "signal"
    CANCEL = "cancel"
    REDRIVE = "redrive"
    WAKE = "wake"


@dataclass(frozen=True)
class Guard:
    """The statuses an action accepts, and its refusal (`{run_id}` and `{status}` filled in)."""

    accepts: frozenset[RunStatus]
    refusal: str


def _statuses(names: Iterable[RunStatus]) -> frozenset[RunStatus]:
    return frozenset(names)


_NOT_TERMINAL = _statuses(s for s in RunStatus if not s.is_terminal)

GUARDS: dict[Action, Guard] = {
    Action.SIGNAL: Guard(
        _NOT_TERMINAL,
        "run {run_id} is {status}: signals go to queued, running, sleeping or waiting runs",
    ),
    Action.CANCEL: Guard(_NOT_TERMINAL, "run {run_id} is already {status}; nothing to cancel"),
    Action.REDRIVE: Guard(
        _statuses((RunStatus.DEAD, RunStatus.CANCELLED)),
        "run {run_id} is {status}: only dead or cancelled runs can be redriven",
    ),
    Action.WAKE: Guard(
        _statuses((RunStatus.SLEEPING, RunStatus.QUEUED)),
        "run {run_id} is {status}: only sleeping or queued runs can be woken",
    ),
}


def refusal(action: Action, run_id: str, status: RunStatus) -> str | None:
    """The one-line reason `action` is refused for a run in `status`, or None if accepted."""
    g = GUARDS[action]
    if status in g.accepts:
        return None
    return g.refusal.format(run_id=run_id, status=status)


def guard(action: Action, run_id: str, status: RunStatus) -> None:
    """Raise InvalidStateError (one line, exit 1) unless `action` accepts `status`."""
    why = refusal(action, run_id, status)
    if why is not None:
        raise InvalidStateError(why)


# ---------------------------------------------------------------------------
# When a parked run is next due


def parked_run_at(*candidates: datetime | None, deadline: datetime | None) -> datetime | None:
    """The effective `run_at` of a parked run: the earliest of its wake time, signal timeout
    and retry time (whichever apply; None for none), clamped to its deadline.

    A run waiting with no timeout and no deadline has no run_at: only a signal (or a child
    ending) makes it due. The claim at the deadline dead-letters it.
    """
    times = [t for t in (*candidates, deadline) if t is not None]
    return min(times) if times else None
