"""How flowctl's typed errors become HTTP statuses: one table, one place.

Every refusal is a JSON `{"error": "..."}` with the error's own one-line message; nothing
else ever reaches a client (no traceback, no repr of internals).
"""

from __future__ import annotations

from flowctl.errors import (
    DatabaseError,
    FlowctlError,
    InvalidStateError,
    RunNotFoundError,
    ScheduleNotFoundError,
    UsageError,
)
from flowctl.limits import one_line

MAX_BODY = 1024 * 1024  # 1 MiB: bigger bodies are refused with 413 before they are read whole


class HttpError(Exception):
    """A refusal with its status, raised inside a handler and rendered as `{error}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = one_line(message)


def status_for(error: FlowctlError) -> int:
    """400 bad input, 404 unknown run, 409 an action the run's status refuses, 503 a database
    flowctl cannot use right now; any other FlowctlError is the caller's to fix: 400."""
    if isinstance(error, RunNotFoundError | ScheduleNotFoundError):
        return 404
    if isinstance(error, InvalidStateError):
        return 409
    if isinstance(error, DatabaseError):
        return 503
    if isinstance(error, UsageError):
        return 400
    return 400
