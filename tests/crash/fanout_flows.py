"""Workflows for tests/crash/test_fanout_kill9.py, started as `tests/crash/fanout_flows.py:NAME`.

A branch body appends one line per run of it to a file named in its item, then works for
a while, so a test counts how often each branch really ran.
"""

from __future__ import annotations

import os
import time

from flowctl import workflow


def branch(item: dict) -> int:
    fd = os.open(item["effects"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{item['run']} {item['k']} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    time.sleep(item["busy_ms"] / 1000)
    return item["k"]


@workflow
def fan(ctx, effects: str, busy_ms: list, limit: int = 6) -> list:
    """One ctx.map of len(busy_ms) branches, then a last step."""
    items = [
        {"effects": effects, "run": ctx.run_id, "k": k, "busy_ms": ms}
        for k, ms in enumerate(busy_ms)
    ]
    out = ctx.map("fan", branch, items, max_concurrency=limit)
    ctx.step("last", lambda: len(out))
    return out


@workflow
def kid(ctx, effects: str, k: int, busy_ms: int) -> int:
    ctx.step("work", branch, {"effects": effects, "run": ctx.run_id, "k": k, "busy_ms": busy_ms})
    return k


@workflow
def kids(ctx, effects: str, busy_ms: list, limit: int = 8) -> list:
    """One ctx.children of len(busy_ms) child runs of `kid`."""
    inputs = [{"effects": effects, "k": k, "busy_ms": ms} for k, ms in enumerate(busy_ms)]
    return ctx.children("tests/crash/fanout_flows.py:kid", inputs, max_concurrency=limit)
