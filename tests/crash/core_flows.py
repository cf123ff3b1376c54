"""Workflows for the crash tests of the run state machine (poison suspects, drain, crash
loops), started as `tests/crash/core_flows.py:NAME`. Step bodies append one line per side
effect to a file named in the input, so a test counts how often each really ran."""

from __future__ import annotations

import os
import time

from flowctl import workflow


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _work(effects: str, run_id: str, step: str, busy_ms: float) -> str:
    _append(effects, f"{run_id} {step} {os.getpid()}")
    time.sleep(busy_ms / 1000)
    return step


def _kill_the_worker(effects: str, run_id: str) -> None:
    _append(effects, f"{run_id} kill {os.getpid()}")
    os._exit(7)  # as a segfault or the OOM killer would: the whole daemon dies


@workflow
def killer(ctx, effects: str) -> str:
    """Its step kills the daemon that runs it, every time."""
    ctx.step("kill", _kill_the_worker, effects, ctx.run_id)
    return "unreachable"


@workflow
def healthy(ctx, effects: str, busy_ms: float = 300.0) -> str:
    """One step of real work: in flight when a neighbour kills the daemon."""
    ctx.step("work", _work, effects, ctx.run_id, "work", busy_ms)
    return ctx.run_id


@workflow
def steps(ctx, effects: str, n: int = 3, busy_ms: float = 5.0, nap: float = 0.02) -> str:
    """n steps with short durable sleeps between them."""
    for i in range(n):
        ctx.step(f"s{i}", _work, effects, ctx.run_id, f"s{i}", busy_ms)
        if i < n - 1:
            ctx.sleep(nap)
    return ctx.run_id


@workflow
def deaf_command(ctx, pidfile: str) -> dict:
    """A command that ignores SIGTERM, as does the child it starts (SIG_IGN is inherited)."""
    from flowctl.yamlflow.commands import run_command

    script = f"trap '' TERM; sleep 60 & echo $! > \"{pidfile}\"; wait"

    def go() -> dict:
        res = run_command(
            ["sh", "-c", script],
            env=dict(os.environ),
            cwd=None,
            timeout=None,
            should_stop=ctx.interruption,
        )
        return {"exit_code": res.exit_code}

    return ctx.step("command", go)


def _stuck(marker: str) -> str:
    open(marker, "w").close()
    time.sleep(120)  # a body no interrupt reaches: only the process's exit ends it
    return "late"


@workflow
def stuck_step(ctx, marker: str) -> str:
    """A Python step whose body never returns in time: past the grace the daemon must
    still exit, and leave the run to be reclaimed."""
    return ctx.step("stuck", _stuck, marker)
