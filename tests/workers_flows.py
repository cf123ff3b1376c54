"""Workflows for tests/test_workers.py: every kind of durable call, run in worker processes."""

from __future__ import annotations

import os
import random
import time
from typing import Any

from flowctl import workflow


def add(a: int, b: int) -> int:
    return a + b


def shout(text: str) -> dict[str, Any]:
    print(f"step says {text}")
    return {"pid": os.getpid(), "text": text, 1: "int key", "$t": "a dollar key"}


@workflow
def child(ctx: Any, x: int = 0) -> int:
    return ctx.step("double", add, x, x)


@workflow
def everything(ctx: Any, x: int = 1) -> dict[str, Any]:
    a = ctx.step("add", add, x, 1)
    said = ctx.step("shout", shout, "hello")
    ctx.sleep(0.05)
    when = ctx.now()
    ctx.uuid()
    v = ctx.version("change-1", 1, 2)
    ctx.publish("progress", {"a": a})
    doubled = ctx.child("tests/workers_flows.py:child", {"x": a})
    signal = ctx.wait_signal("go", timeout="30s")
    return {
        "a": a,
        "pid": said["pid"],
        "keys": sorted(str(k) for k in said),
        "version": v,
        "doubled": doubled,
        "signal": signal,
        "tz": str(when.tzinfo),
    }


@workflow
def not_json(ctx: Any) -> Any:
    return ctx.step("a set", lambda: {1, 2})


@workflow
def not_json_result(ctx: Any) -> Any:
    return {"when": ctx.now()}


def nap_then_double(x: int) -> int:
    time.sleep(random.uniform(0, 0.02))  # ends at any moment of its parent's park
    return 2 * x


@workflow
def slow_child(ctx: Any, x: int = 0) -> int:
    return ctx.step("double", nap_then_double, x)


@workflow
def parent(ctx: Any, x: int = 0) -> dict[str, Any]:
    """Two children around a signal wait. Any signal sent while it waits for a child wakes
    it for a replay, which may race that child's end in another worker."""
    a = ctx.child("tests/workers_flows.py:slow_child", {"x": x})
    got = ctx.wait_signal("go", timeout="60s")
    b = ctx.child("tests/workers_flows.py:slow_child", {"x": a})
    return {"a": a, "b": b, "got": got}


@workflow(concurrency={"limit": 1, "key": "${{ input.user }}"})
def one_per_user(ctx: Any, user: str, x: int = 0) -> int:
    """One run at a time per user (a concurrency key)."""
    return ctx.step("add", add, x, 1)
