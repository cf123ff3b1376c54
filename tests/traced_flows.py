"""Workflows for test_tracing.py: steps that note the span current while their body runs."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

SEEN: list[tuple[str, int]] = []  # (step, the current span's id) as each body saw it


def note(name: str) -> str:
    SEEN.append((name, trace.get_current_span().get_span_context().span_id))
    return name


def steps_and_sleep(ctx: Any) -> str:
    ctx.step("first", note, "first")
    ctx.sleep("1h")
    return ctx.step("second", note, "second")


def parent_of_one(ctx: Any) -> Any:
    return ctx.step("before", note, "before"), ctx.child("traced_flows:steps_and_sleep")


def note_item(i: int) -> int:
    note(f"items[{i}]")
    return i


async def note_async(i: int) -> int:
    note(f"waits[{i}]")
    return i


def fan_out(ctx: Any) -> Any:
    return ctx.map("items", note_item, [0, 1, 2]), ctx.map("waits", note_async, [0, 1])
