"""A run's place in a trace, with no OpenTelemetry import: W3C traceparent values parsed
and written, and the ids a run has in its trace.

A run that joins no trace stores nothing: its trace id and its run span's id are derived
from its run id (a hash), so every process that touches the run (the CLI that created
it, each daemon and worker that runs an attempt, `show`) agrees on them without a write.
A run that joins a trace (a caller's `--traceparent`, or its parent run's) stores the
joined traceparent; its trace id is that one's, and its run span is the joined span's
child.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from flowctl.errors import UsageError

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


@dataclass(frozen=True)
class RunTrace:
    """Where a run sits in its trace (hex ids, as W3C writes them)."""

    trace_id: str
    span_id: str  # the run's own span: every attempt's parent
    parent_span_id: str | None  # the joined span (a caller's, a parent run's), if any
    sampled: bool  # the joined span's flag; True when the run joined nothing

    def traceparent(self) -> str:
        """The run span as a W3C traceparent: what a child run joins."""
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse_traceparent(value: str, *, field: str = "traceparent") -> tuple[str, str, bool]:
    """(trace id, span id, sampled) of a W3C traceparent; a UsageError naming `field` when
    `value` is not one (version 00 layout, lower-case hex, ids not all zero)."""
    text = value.strip() if isinstance(value, str) else ""
    m = _TRACEPARENT.match(text)
    if m is None or m.group(1) == "ff" or m.group(2) == _ZERO_TRACE or m.group(3) == _ZERO_SPAN:
        raise UsageError(
            lambda f: (
                f"{f(field)}: {value!r} is not a W3C traceparent; give"
                " 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, e.g."
                " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            ),
            field=field,
        )
    return m.group(2), m.group(3), bool(int(m.group(4), 16) & 1)


def normal_traceparent(value: str | None, *, field: str = "traceparent") -> str | None:
    """`value` checked and written the one way it is stored (None stays None)."""
    if value is None:
        return None
    trace_id, span_id, sampled = parse_traceparent(value, field=field)
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def _derived(run_id: str) -> tuple[str, str]:
    digest = hashlib.blake2b(run_id.encode(), digest_size=24, person=b"flowctl-trace").hexdigest()
    return digest[:32], digest[32:48]


def run_trace(run_id: str, traceparent: str | None) -> RunTrace:
    """The run's trace: derived from its id, or under the traceparent it joined."""
    derived_trace, span_id = _derived(run_id)
    if traceparent is None:
        return RunTrace(derived_trace, span_id, None, True)
    trace_id, parent, sampled = parse_traceparent(traceparent)
    return RunTrace(trace_id, span_id, parent, sampled)
