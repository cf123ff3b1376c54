"""Workflows for the recovery tests (tests/crash/test_isolation.py), started as
`tests/crash/recover_flows.py:NAME`. Step bodies append `RUN STEP PID` to a file named in
the input, so a test can tell which process ran each body."""

from __future__ import annotations

import os
import time

from flowctl import workflow


def _work(path: str, run_id: str, step: str, seconds: float) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{run_id} {step} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    return step


@workflow
def hold(ctx, effects: str, seconds: float) -> str:
    """One long Python step (it dies with its process)."""
    return ctx.step("hold", _work, effects, ctx.run_id, "hold", seconds)


@workflow
def nap(ctx, seconds: float) -> str:
    """A durable sleep: its wake is a timer the daemon must keep."""
    ctx.sleep(seconds)
    return ctx.run_id


@workflow
def wait_go(ctx, seconds: float) -> object:
    """A signal that never comes: its timeout is a timer the daemon must keep."""
    return ctx.wait_signal("go", timeout=seconds, default="timed out")


@workflow
def three(ctx, effects: str, seconds: float = 0.2) -> str:
    """Three steps of work."""
    for i in range(3):
        ctx.step(f"s{i}", _work, effects, ctx.run_id, f"s{i}", seconds)
    return ctx.run_id
