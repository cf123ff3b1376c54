"""Workflows of benchmarks/flow_control.py: the same one-step workflow unlimited, keyed
(one at a time per user) and paced by the named limit `api`."""

import time

from flowctl import step, workflow


def add(a: int, b: int) -> int:
    return a + b


@step(limit="api")
def paced_call(a: int) -> int:
    """When the body began, by its own clock (µs since the epoch)."""
    return int(time.time() * 1e6)


@workflow
def plain(ctx, user: str, n: int = 0) -> int:
    return ctx.step("one", add, n, 1)


@workflow(concurrency={"limit": 1, "key": "${{ input.user }}"})
def keyed(ctx, user: str, n: int = 0) -> int:
    return ctx.step("one", add, n, 1)


@workflow
def paced(ctx, n: int = 0) -> int:
    return ctx.step("call", paced_call, n)
