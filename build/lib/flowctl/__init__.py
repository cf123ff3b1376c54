"""flowctl: durable workflows on one machine, all state in one SQLite file."""

from flowctl.context import Context
from flowctl.errors import (
    Cancelled,
    CommandFailedError,
    DeadlineExceededError,
    ExecutionTimeoutError,
    FlowctlError,
    NonDeterminismError,
    NonRetryableError,
    SignalTimeoutError,
    StepFailedError,
)
from flowctl.retry import RetryPolicy, step
from flowctl.workflow import workflow

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Client pulls in the engine and daemon; load it only when asked for.
    if name == "Client":
        from flowctl.client import Client

        return Client
    raise AttributeError(name)


__all__ = [
    "Cancelled",
    "Client",
    "CommandFailedError",
    "Context",
    "DeadlineExceededError",
    "ExecutionTimeoutError",
    "FlowctlError",
    "NonDeterminismError",
    "NonRetryableError",
    "RetryPolicy",
    "SignalTimeoutError",
    "StepFailedError",
    "__version__",
    "step",
    "workflow",
]
