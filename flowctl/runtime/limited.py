"""A step's start under a named limit (issue 37, item 2): what the context does with the
store's answer. Taken: the step runs. Not yet: the run suspends, sleeping until the limit
allows it (or a holder gives it back first), holding no worker and no slot; its replay
reaches the same call index again and asks again. Unknown: the run dies at once, the
error naming the limits that are defined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowctl.clock import Clock
from flowctl.errors import UnknownLimitError
from flowctl.model import RunStatus, iso
from flowctl.runtime.suspend import Suspend

if TYPE_CHECKING:
    from flowctl.store import Lease, LimitTake, Store


class _Lost(BaseException):
    """The lease is lost: the run is another worker's now (the context abandons it)."""


LOST = _Lost()  # what `take` returns then


def take(
    store: Store, lease: Lease, limit: str, index: int, step: str, clock: Clock
) -> BaseException | None:
    """Take `limit` for the start of step `step` at call `index`: None when taken, else
    what halts the run: LOST, an UnknownLimitError, or the Suspend that parks it until
    the limit allows the step."""
    took = store.take_limit(lease, limit, index, clock.now())
    if took.lost:
        return LOST
    error = unknown(took, limit, step)
    if error is not None:
        return error
    if took.until is None:
        return None
    return Suspend(RunStatus.SLEEPING, took.until, None, waiting(took, limit, index, step))


def unknown(took: LimitTake, limit: str, step: str) -> UnknownLimitError | None:
    """The error of a step naming a limit that is not defined, or None."""
    if took.unknown is None:
        return None
    defined = ", ".join(took.unknown) or "none (flowctl limits set NAME --rate 10/1s)"
    return UnknownLimitError(
        f"step {step!r} names limit {limit!r}, which is not defined; defined limits: {defined}"
    )


def waiting(took: LimitTake, limit: str, index: int, step: str) -> tuple[str, dict[str, Any]]:
    """The timeline event of a run suspended until the limit allows its step."""
    data = {
        "limit": limit,
        "step": step,
        "index": index,
        "why": took.why,
        "allows": took.spec.describe() if took.spec is not None else "",
        "until": iso(took.until),
    }
    return "waiting for limit", data
