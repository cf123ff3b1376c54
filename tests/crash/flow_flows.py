"""Workflows for the flow-control crash test (issue 37, item 5), started as
`tests/crash/flow_flows.py:NAME`. Each step body appends a `start` and an `end` line with
the wall-clock time and its process id, so the test rebuilds every interval a key or a
named limit was held (a body cut by SIGKILL has no `end`: it ended at the kill)."""

from __future__ import annotations

import os
import time

from flowctl import step, workflow


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _held(effects: str, what: str, run_id: str, busy_ms: float) -> str:
    _append(effects, f"{time.time():.6f} start {what} {run_id} {os.getpid()}")
    time.sleep(busy_ms / 1000)
    _append(effects, f"{time.time():.6f} end {what} {run_id} {os.getpid()}")
    return what


@step(limit="api")
def _call(effects: str, run_id: str, busy_ms: float) -> str:
    return _held(effects, "limit:api", run_id, busy_ms)


@workflow(concurrency={"limit": 1, "key": "${{ input.user }}"})
def per_user(ctx, effects: str, user: str, busy_ms: float = 40.0) -> str:
    """A step under its user's key, a sleep (the key is given back), a step under the
    named limit `api` (concurrency 1 across every run), and a last step under the key."""
    ctx.step("first", _held, effects, f"key:{user}", ctx.run_id, busy_ms)
    ctx.sleep(0.02)
    ctx.step("call", _call, effects, ctx.run_id, busy_ms)
    ctx.step("last", _held, effects, f"key:{user}", ctx.run_id, busy_ms)
    return ctx.run_id
