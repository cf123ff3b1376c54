"""Workflows for the crash tests, started as `tests/crash/flows.py:NAME`.

Step bodies append one line per side effect to a file named in the input, so a test
can count how often each body really ran, and by which process, and when.
"""

from __future__ import annotations

import os
import time

from flowctl import workflow


def _append(path: str, line: str) -> None:
    # One write() on an O_APPEND descriptor: lines from several processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def effect(path: str, run_id: str, step: str, busy_ms: float) -> str:
    """A side effect, then some work: a kill can land before, inside or after it."""
    _append(path, f"{run_id} {step} {os.getpid()}")
    time.sleep(busy_ms / 1000)
    return step


def interval(path: str, run_id: str, step: str, busy_ms: float) -> int:
    """Record when this process started and ended the body; return who ran it."""
    _append(path, f"start {run_id} {step} {os.getpid()} {time.time():.6f}")
    time.sleep(busy_ms / 1000)
    _append(path, f"end {run_id} {step} {os.getpid()} {time.time():.6f}")
    return os.getpid()


@workflow
def chain(ctx, effects: str, naps: list[float], busy_ms: float = 30.0) -> str:
    """Steps with durable sleeps between them: s0, sleep, s1, sleep, ... s<len(naps)>."""
    for i, nap in enumerate(naps):
        ctx.step(f"s{i}", effect, effects, ctx.run_id, f"s{i}", busy_ms)
        ctx.sleep(nap)
    last = f"s{len(naps)}"
    ctx.step(last, effect, effects, ctx.run_id, last, busy_ms)
    return ctx.run_id


@workflow
def hop(ctx, effects: str, steps: int = 3, busy_ms: float = 20.0, nap: float = 0.05) -> str:
    """Steps separated by short sleeps, so a run hops between daemons."""
    for i in range(steps):
        ctx.step(f"s{i}", interval, effects, ctx.run_id, f"s{i}", busy_ms)
        ctx.sleep(nap)
    return ctx.run_id


@workflow
def probe(ctx, effects: str, busy_ms: float = 1500.0) -> int:
    """One slow step; its journaled result names the process whose write landed."""
    return ctx.step("slow", interval, effects, ctx.run_id, "slow", busy_ms)


@workflow
def nap(ctx, seconds: float, effects: str = "") -> str:
    ctx.sleep(seconds)
    if effects:
        ctx.step("after", effect, effects, ctx.run_id, "after", 0)
    return ctx.run_id


@workflow
def hold(ctx, effects: str, seconds: float = 30.0) -> str:
    """A long Python step (it dies with its process)."""
    ctx.step("hold", effect, effects, ctx.run_id, "hold", seconds * 1000)
    return ctx.run_id


@workflow
def command(ctx, marker: str, seconds: float = 0.5) -> dict:
    """A step that starts a command; the command writes 'done' only if it is not killed."""
    from flowctl.yamlflow.commands import run_command

    script = f'echo started >> "$M"; sleep {seconds}; echo done >> "$M"'

    def go() -> dict:
        res = run_command(
            ["sh", "-c", script],
            env={**os.environ, "M": marker},
            cwd=None,
            timeout=None,
            should_stop=lambda: None,
        )
        return {"exit_code": res.exit_code}

    return ctx.step("command", go)


@workflow
def stoppable(ctx, pidfile: str, seconds: float = 30.0) -> dict:
    """A step whose command the daemon may stop (should_stop polls ctx.interruption)."""
    from flowctl.yamlflow.commands import run_command

    def go() -> dict:
        res = run_command(
            ["sh", "-c", f'echo $$ > "{pidfile}"; sleep {seconds}'],
            env=dict(os.environ),
            cwd=None,
            timeout=None,
            should_stop=ctx.interruption,
        )
        return {"exit_code": res.exit_code}

    return ctx.step("command", go)
