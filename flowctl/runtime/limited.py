"""A step's start under a named limit (issue 37, item 2): what the context does with the
store's answer. Taken: the step runs. Not yet: the run suspends, sleeping until the limit
allows it (or a holder gives it back first), holding no worker and no slot; its replay
reaches the same call index again and asks again. Unknown: the run dies at once, the
error naming the limits that are defined.
"""

from __future__ import annotations

from typing import Any

from flowctl.errors import UnknownLimitError
from flowctl.model import iso
from flowctl.store.records import LimitTake


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
