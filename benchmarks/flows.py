"""Workflows the benchmarks run (targets `benchmarks/flows.py:NAME`)."""

from __future__ import annotations

from flowctl import RetryPolicy, step, workflow
from flowctl.runtime.context import current


def add(a: int, b: int) -> int:
    return a + b


@workflow
def three(ctx, n: int = 0) -> int:
    """The throughput workload: three trivial steps."""
    a = ctx.step("one", add, n, 1)
    b = ctx.step("two", add, a, 1)
    return ctx.step("three", add, b, 1)


@workflow
def many(ctx, n: int = 1000, nap: float = 60.0) -> int:
    """n journaled steps, then a sleep: resuming it replays all n."""
    total = 0
    for i in range(n):
        total = ctx.step(f"s{i}", add, total, 1)
    ctx.sleep(nap)
    return total


@workflow
def sleeper(ctx, at: float) -> int:
    """Sleep until an epoch time, then one step."""
    ctx.sleep_until(at)
    return ctx.step("after", add, 1, 1)


@workflow
def one(ctx, n: int = 0) -> int:
    """The one-step task workload (beside huey's one-step tasks)."""
    return ctx.step("one", add, n, 1)


def burn(a: int, ms: float) -> int:
    """CPU work in the step body (the GIL held throughout), about `ms` milliseconds."""
    import time

    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass
    return a + 1


@workflow
def heavy(ctx, n: int = 0, ms: float = 2.0) -> int:
    """Three steps whose bodies each burn `ms` of CPU: where worker processes pay."""
    a = ctx.step("one", burn, n, ms)
    b = ctx.step("two", burn, a, ms)
    return ctx.step("three", burn, b, ms)


@workflow
def none(ctx, n: int = 0) -> int:
    """No step at all: what a run costs the daemon beside its steps (claim, completion)."""
    return n


@workflow
def nap(ctx, n: int = 0) -> int:
    """The sleeping workload: a step, a durable one-second sleep, a step."""
    a = ctx.step("one", add, n, 1)
    ctx.sleep("1s")
    return ctx.step("two", add, a, 1)


@step(retry=RetryPolicy.make(max_attempts=3, backoff="100ms", jitter=0))
def fail_once(n: int) -> int:
    """Fails on its first try and succeeds on the next, in whichever process each runs,
    with no I/O of its own (a benchmark measures the retry, not the body): a later try
    finds its failed one in the run's journal (call #0 of `retried`), as its replay or
    its resting handler holds it. Reads the context's journal, which is not an API."""
    ctx = current()
    if ctx is None or ctx._journal.get(0) is None:
        raise RuntimeError(f"first try of run {n} fails")
    return n + 1


@workflow
def retried(ctx, n: int = 0) -> int:
    """The retrying workload: one step that fails once, then succeeds after its backoff."""
    return ctx.step("one", fail_once, n)
