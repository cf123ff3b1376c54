"""Workflows of benchmarks/fanout.py (started as "benchmarks/fanout_flows.py:NAME")."""

from __future__ import annotations

import asyncio
import time

from flowctl import workflow


async def wait_async(i: int) -> int:
    await asyncio.sleep(0.01)  # a slow API: 10 ms
    return i


def wait_sync(i: int) -> int:
    time.sleep(0.01)
    return i


@workflow
def map_async(ctx, n: int) -> int:
    return len(ctx.map("call", wait_async, list(range(n))))


@workflow
def map_sync(ctx, n: int) -> int:
    return len(ctx.map("call", wait_sync, list(range(n))))


@workflow
def kid(ctx, i: int) -> int:
    return ctx.step("one", lambda: i)


@workflow
def kids(ctx, n: int) -> int:
    inputs = [{"i": i} for i in range(n)]
    return len(ctx.children("benchmarks/fanout_flows.py:kid", inputs))
