"""flowctl: durable workflows on one machine, all state in one SQLite file.

The public names are loaded on first use (PEP 562 `__getattr__`): `import flowctl`, which
every `flowctl` command pays for, imports nothing else, so `flowctl --help` does not load
the engine (tests/test_startup_imports.py keeps it so).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowctl.client import Client
    from flowctl.errors import (
        Cancelled,
        CommandFailedError,
        DeadlineExceededError,
        ExecutionTimeoutError,
        FlowctlError,
        NonDeterminismError,
        NonRetryableError,
        ParallelError,
        SignalTimeoutError,
        StepFailedError,
    )
    from flowctl.retry import RetryPolicy, step
    from flowctl.runtime.context import Context
    from flowctl.workflow import workflow

__version__ = "0.1.0"

# public name -> the module that defines it
_WHERE: dict[str, str] = {
    "Client": "flowctl.client",
    "Context": "flowctl.runtime.context",
    "RetryPolicy": "flowctl.retry",
    "step": "flowctl.retry",
    "workflow": "flowctl.workflow",
    **{
        name: "flowctl.errors"
        for name in (
            "Cancelled",
            "CommandFailedError",
            "DeadlineExceededError",
            "ExecutionTimeoutError",
            "FlowctlError",
            "NonDeterminismError",
            "NonRetryableError",
            "ParallelError",
            "SignalTimeoutError",
            "StepFailedError",
        )
    },
}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'flowctl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(ModuleType):
    """`flowctl.workflow` is the decorator, as it was when it was imported eagerly: once
    the submodule flowctl/workflow.py loads, the import system sets the attribute to the
    module; this keeps the function there instead (`import flowctl.workflow as m` still
    gives the module, through sys.modules)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "workflow" and isinstance(value, ModuleType):
            value = value.workflow
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
    "ParallelError",
    "RetryPolicy",
    "SignalTimeoutError",
    "StepFailedError",
    "__version__",
    "step",
    "workflow",
]
