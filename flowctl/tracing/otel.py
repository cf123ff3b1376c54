"""The tracer on OpenTelemetry's SDK (the `[otel]` extra): imported only when the
environment asks for traces (flowctl.tracing.tracer).

Spans: the run's own span (named after its workflow, created to ended, exported when the
run ends), a span per attempt under it (`<workflow> attempt`), and a span per step under
the attempt, current while the step's body runs. A run's span has the id its trace
gives it (ids.run_trace), whichever process exports it, so every attempt of every
daemon, days apart, lands under one span in one trace.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from flowctl.model import Run, RunStatus, to_us
from flowctl.tracing.ids import RunTrace, run_trace

# The ids the next span takes (a run's span: its ids are its trace's, not random).
_forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "flowctl_forced_ids", default=None
)

_WAKES = {
    RunStatus.SLEEPING: "flowctl.sleep",
    RunStatus.WAITING: "flowctl.wait",
    RunStatus.QUEUED: "flowctl.retry",
}


class _Ids(RandomIdGenerator):
    def generate_trace_id(self) -> int:
        forced = _forced.get()
        return super().generate_trace_id() if forced is None else forced[0]

    def generate_span_id(self) -> int:
        forced = _forced.get()
        return super().generate_span_id() if forced is None else forced[1]


def _exporter(name: str) -> SpanExporter:
    """The exporter OTEL_TRACES_EXPORTER names; its own OTEL_EXPORTER_* variables apply."""
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={name!r} is not one of: console, otlp, none")
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    if protocol in ("", "http/protobuf"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    elif protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    else:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not grpc or http/protobuf")
    return OTLPSpanExporter()


def _ns(when: datetime) -> int:
    return to_us(when) * 1000


def _attributes(run: Run) -> dict[str, Any]:
    return {
        "flowctl.run_id": run.run_id,
        "flowctl.workflow": run.workflow,
        "flowctl.attempt": run.attempt,
    }


class _Attempt:
    """One attempt's span (flowctl.tracing.Attempt)."""

    def __init__(self, otel: trace.Tracer, span: trace.Span, run: Run) -> None:
        self._otel = otel
        self._span = span
        self._context = trace.set_span_in_context(span)
        self._run = run

    @contextmanager
    def active(self) -> Iterator[None]:
        """The attempt's span is the current one while the handler runs."""
        token = otel_context.attach(self._context)
        try:
            yield
        finally:
            otel_context.detach(token)

    def step(self, name: str, index: int, tries: int) -> AbstractContextManager[Any]:
        attributes = _attributes(self._run)
        attributes["flowctl.call_index"] = index
        attributes["flowctl.try"] = tries
        return self._otel.start_as_current_span(name, self._context, attributes=attributes)

    def link(self) -> str:
        current = trace.get_current_span().get_span_context()
        if not current.is_valid or current.trace_id != self._span.get_span_context().trace_id:
            current = self._span.get_span_context()
        flags = "01" if current.trace_flags.sampled else "00"
        return f"00-{current.trace_id:032x}-{current.span_id:016x}-{flags}"

    def ended(
        self,
        status: RunStatus | None,
        *,
        run_at: datetime | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        span = self._span
        span.set_attribute("flowctl.outcome", "lease lost" if status is None else str(status))
        if status in _WAKES and run_at is not None:
            span.add_event(_WAKES[status], {"flowctl.wake_at": run_at.isoformat()})
        if error is not None:
            span.set_attribute("flowctl.error.type", str(error.get("type", "")))
            kind = error.get("kind")
            if kind:
                span.set_attribute("flowctl.error.kind", str(kind))
            span.set_status(Status(StatusCode.ERROR, str(error.get("message", ""))[:512]))
        span.end()


class OtelTracer:
    """flowctl.tracing.Tracer on an SDK TracerProvider."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._otel = provider.get_tracer("flowctl")

    @classmethod
    def from_environment(cls, exporter: str, processor: SpanProcessor | None = None) -> OtelTracer:
        """A provider as the OTEL_* variables say: sampler (OTEL_TRACES_SAMPLER), resource
        (OTEL_SERVICE_NAME, default "flowctl"; OTEL_RESOURCE_ATTRIBUTES), batching
        (OTEL_BSP_*), exporter and its endpoint. Spans are flushed at exit."""
        if not os.environ.get("OTEL_SERVICE_NAME"):
            resource = Resource.create({"service.name": "flowctl"})
        else:
            resource = Resource.create()
        return cls.exporting(processor or BatchSpanProcessor(_exporter(exporter)), resource)

    @classmethod
    def exporting(cls, processor: SpanProcessor, resource: Resource | None = None) -> OtelTracer:
        """A tracer whose spans go to `processor` (tests: an in-memory exporter)."""
        provider = TracerProvider(resource=resource or Resource.create(), id_generator=_Ids())
        provider.add_span_processor(processor)
        return cls(provider)

    def _parent(self, where: RunTrace, span_id: str | None) -> otel_context.Context:
        """A context whose span is `span_id` of `where`'s trace (or none: a root)."""
        if span_id is None:
            return otel_context.Context()
        sampled = where.sampled
        if where.parent_span_id is None and span_id == where.span_id:
            sampled = self._sampled(where)
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        remote = SpanContext(int(where.trace_id, 16), int(span_id, 16), True, flags)
        return trace.set_span_in_context(NonRecordingSpan(remote))

    def _sampled(self, where: RunTrace) -> bool:
        """The sampler's decision for a run's root span (the same in every process: it
        depends on the trace id alone for the standard samplers)."""
        result = self._provider.sampler.should_sample(None, int(where.trace_id, 16), "run")
        return result.decision is Decision.RECORD_AND_SAMPLE

    def attempt(self, run: Run, woke_from: RunStatus | None) -> _Attempt:
        where = run_trace(run.run_id, run.traceparent)
        attributes = _attributes(run)
        if woke_from is not None:
            attributes["flowctl.woke_from"] = str(woke_from)
        span = self._otel.start_span(
            f"{run.workflow} attempt", self._parent(where, where.span_id), attributes=attributes
        )
        return _Attempt(self._otel, span, run)

    def run_ended(self, run: Run, status: RunStatus, finished_at: datetime) -> None:
        where = run_trace(run.run_id, run.traceparent)
        attributes = _attributes(run)
        attributes["flowctl.outcome"] = str(status)
        token = _forced.set((int(where.trace_id, 16), int(where.span_id, 16)))
        try:
            span = self._otel.start_span(
                run.workflow,
                self._parent(where, where.parent_span_id),
                attributes=attributes,
                start_time=_ns(run.created_at),
            )
        finally:
            _forced.reset(token)
        if status is not RunStatus.COMPLETED:
            span.set_status(Status(StatusCode.ERROR, str(status)))
        span.end(end_time=max(_ns(finished_at), _ns(run.created_at)))

    def flush(self) -> None:
        self._provider.force_flush()
