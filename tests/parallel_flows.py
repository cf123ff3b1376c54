"""Workflows of tests/test_parallel.py (started as "parallel_flows:NAME", cwd tests/).

`CALLS` counts branch bodies by item, `KNOBS` simulates failures and code changes between
replays, `GATES` lets a test hold a branch until it says so.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import Counter
from typing import Any

import flowctl
from flowctl import RetryPolicy

CALLS: Counter[str] = Counter()
KNOBS: dict[str, Any] = {}
GATES: dict[str, threading.Event] = {}
LOCK = threading.Lock()
RUNNING = {"now": 0, "max": 0}


def reset() -> None:
    CALLS.clear()
    KNOBS.clear()
    GATES.clear()
    RUNNING.update(now=0, max=0)
    THREADS.clear()


def _count(key: str) -> None:
    with LOCK:
        CALLS[key] += 1


def double(x: int) -> int:
    _count(f"double:{x}")
    gate = GATES.get(f"double:{x}")
    if gate is not None:
        gate.wait(10)
    if x in KNOBS.get("fail", ()):
        raise ValueError(f"bad item {x}")
    return x * 2


@flowctl.step(retry=RetryPolicy.make(max_attempts=3, backoff="10s"))
def flaky(x: int) -> int:
    _count(f"flaky:{x}")
    if CALLS[f"flaky:{x}"] <= KNOBS.get("flaky_fails", {}).get(x, 0):
        raise ConnectionError(f"flaky {x}")
    return x + 100


def tracked(x: int) -> int:
    with LOCK:
        RUNNING["now"] += 1
        RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    try:
        GATES["tracked"].wait(0.05) if "tracked" in GATES else None
        return x
    finally:
        with LOCK:
            RUNNING["now"] -= 1


THREADS: set[int] = set()


async def slow_async(x: int) -> int:
    _count(f"async:{x}")
    THREADS.add(threading.get_ident())
    with LOCK:
        RUNNING["now"] += 1
        RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    await asyncio.sleep(0.05)
    with LOCK:
        RUNNING["now"] -= 1
    return x * 3


def mapped(ctx: flowctl.Context, items: list[int], limit: int | None = None) -> Any:
    out = ctx.map("double", double, items, max_concurrency=limit)
    return {"out": out, "after": ctx.step("after", lambda: "ok")}


def mapped_flaky(ctx: flowctl.Context, items: list[int]) -> Any:
    return ctx.map("flaky", flaky, items)


def mapped_tracked(ctx: flowctl.Context, items: list[int], limit: int) -> Any:
    return ctx.map("tracked", tracked, items, max_concurrency=limit)


def mapped_async(ctx: flowctl.Context, items: list[int]) -> Any:
    return ctx.map("slow", slow_async, items)


def async_step(ctx: flowctl.Context) -> Any:
    return ctx.step("one", slow_async, 5)


def caught(ctx: flowctl.Context, items: list[int]) -> Any:
    try:
        return ctx.map("double", double, items)
    except flowctl.ParallelError as e:
        return {"failures": e.failures, "message": str(e)}


def not_a_list(ctx: flowctl.Context) -> Any:
    return ctx.map("double", double, KNOBS.get("items", {1, 2}))


def too_many(ctx: flowctl.Context, n: int) -> Any:
    return ctx.map("double", double, list(range(n)))


def branches(ctx: flowctl.Context, a: int, b: int) -> Any:
    calls = [functools.partial(double, a), functools.partial(tracked, b), lambda: slow_async(a)]
    if KNOBS.get("reorder"):
        calls = [calls[1], calls[0], calls[2]]
    return ctx.parallel("pair", calls)


def nested(ctx: flowctl.Context) -> Any:
    return ctx.map("bad", lambda x: ctx.step("inner", double, x), [1])


def mapped_then_sleep(ctx: flowctl.Context, items: list[int]) -> Any:
    out = ctx.map("double", double, KNOBS.get("items", items))
    ctx.sleep("1h")
    return out


def branches_then_sleep(ctx: flowctl.Context, a: int, b: int) -> Any:
    out = branches(ctx, a, b)
    ctx.sleep("1h")
    return out


@flowctl.workflow
def child(ctx: flowctl.Context, n: int, nap: str = "0s") -> Any:
    if nap != "0s":
        ctx.sleep(nap)
    if n in KNOBS.get("child_fail", ()):
        raise flowctl.NonRetryableError(f"child {n} refuses")
    return ctx.step("square", lambda: n * n)


def fan_children(
    ctx: flowctl.Context, ns: list[int], nap: str = "0s", limit: int | None = None
) -> Any:
    out = ctx.children(
        "parallel_flows:child", [{"n": n, "nap": nap} for n in ns], max_concurrency=limit
    )
    return {"out": out, "after": ctx.step("after", lambda: "ok")}


def shout(x: int) -> int:
    print(f"item {x}")
    return x


async def shout_async(x: int) -> int:
    print(f"async item {x}")
    return x


def chatty(ctx: flowctl.Context) -> Any:
    return [ctx.map("shout", shout, [1, 2]), ctx.map("yell", shout_async, [3])]


@flowctl.workflow(max_attempts=1)
def once(ctx: flowctl.Context, items: list[int]) -> Any:
    return ctx.map("double", double, items)


def cancellable(ctx: flowctl.Context, items: list[int]) -> Any:
    return ctx.map("double", double, items, max_concurrency=1)
