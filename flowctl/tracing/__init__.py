"""Traces: OpenTelemetry spans for runs, attempts and steps, off unless asked for.

Asked for by the standard environment only (OTEL_TRACES_EXPORTER=console|otlp, or an
OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, which implies otlp; OTEL_SDK_DISABLED=true turns it
off). Without them `tracer()` is None and nothing of OpenTelemetry is imported: the
engine's only cost is that None check. With them and without the `[otel]` extra, one
warning line says what to install, and nothing is exported.
"""

from __future__ import annotations

import logging
import os
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from flowctl.model import Run, RunStatus
from flowctl.tracing.ids import RunTrace, normal_traceparent, parse_traceparent, run_trace

__all__ = [
    "Attempt",
    "RunTrace",
    "Tracer",
    "flush",
    "normal_traceparent",
    "parse_traceparent",
    "run_trace",
    "tracer",
    "wanted",
]

log = logging.getLogger(__name__)


class Attempt(Protocol):
    """One attempt's span, open while the handler runs."""

    def active(self) -> AbstractContextManager[None]:
        """The attempt's span is the current one while the handler runs."""
        ...

    def step(self, name: str, index: int, tries: int) -> AbstractContextManager[Any]:
        """The step's span, current while its body runs (instrumented clients join it)."""
        ...

    def link(self) -> str:
        """The W3C traceparent a child run started now joins (the current span's)."""
        ...

    def ended(
        self,
        status: RunStatus | None,
        *,
        run_at: datetime | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Close the span with how the attempt ended (None: the lease was lost)."""
        ...


class Tracer(Protocol):
    """What the engine asks of traces."""

    def attempt(self, run: Run, woke_from: RunStatus | None) -> Attempt:
        """Open the span of the attempt that is starting on `run`."""
        ...

    def run_ended(self, run: Run, status: RunStatus, finished_at: datetime) -> None:
        """Export the run's own span (created to its end), every attempt's parent."""
        ...

    def flush(self) -> None:
        """Export what is buffered (a draining daemon, a finished foreground run)."""
        ...


_NOT_YET: Any = object()
_tracer: Tracer | None = _NOT_YET


def wanted(environ: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    """The exporter the environment asks for ("console", "otlp"), or None: traces off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    name = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if name:
        return None if name == "none" else name
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return None


def tracer() -> Tracer | None:
    """This process's tracer, made on first use from the environment; None: traces off."""
    global _tracer
    if _tracer is _NOT_YET:
        _tracer = _made(wanted())
    return _tracer


def _made(exporter: str | None) -> Tracer | None:
    if exporter is None:
        return None
    try:
        from flowctl.tracing.otel import OtelTracer
    except ImportError:
        log.warning(
            "OTEL_* asks for traces but OpenTelemetry is not installed: pip install"
            " 'flowctl-runner[otel]'; no traces are exported"
        )
        return None
    try:
        return OtelTracer.from_environment(exporter)
    except ValueError as e:
        log.warning("traces are off: %s", e)
        return None


def install(made: Tracer | None) -> None:
    """Use `made` as this process's tracer (tests: an in-memory exporter)."""
    global _tracer
    _tracer = made


def flush() -> None:
    """Export what this process's tracer holds, if it was made."""
    if _tracer is not _NOT_YET and _tracer is not None:
        _tracer.flush()
