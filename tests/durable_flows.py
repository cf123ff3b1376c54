"""Workflows driven by test_engine.py, test_context.py and the golden journals.

They live in an importable module, started as "durable_flows:NAME" with cwd set to
tests/, not as "tests/test_engine.py:NAME": a file target is imported under a module
name of its own, so a test would count calls on one copy of a module-level dict while
the engine ran another.

`CALLS` counts step bodies (proof that a step ran, or did not), `KNOBS` simulates code
changes and failures between replays, `HOOKS[name]` runs inside step `name` (to move
the fake clock or beat the heart while a handler is live), `SEEN` keeps what a
handler saw on each replay.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import flowctl
from flowctl import RetryPolicy, SignalTimeoutError, ops
from flowctl.clock import Clock
from flowctl.store import Store

TESTS_DIR = str(Path(__file__).resolve().parent)

CALLS: Counter[str] = Counter()
KNOBS: dict[str, Any] = {}
HOOKS: dict[str, Callable[[], None]] = {}
SEEN: dict[str, list[Any]] = {}
CAPTURED: list[Any] = []


def reset() -> None:
    CALLS.clear()
    KNOBS.clear()
    HOOKS.clear()
    SEEN.clear()
    CAPTURED.clear()


def start(
    store: Store, clock: Clock, name: str, input: dict[str, Any] | None = None, **kw: Any
) -> str:
    """Queue a run of the workflow `name` defined in this module; returns its run id."""
    started = ops.start(
        store, f"durable_flows:{name}", input or {}, clock=clock, cwd=TESTS_DIR, **kw
    )
    return started.run.run_id


def calls(store: Store, run_id: str) -> list[tuple[int, str, str, str]]:
    """The journal as (index, kind, name, state) rows: what the run recorded, in order."""
    return [
        (e.call_index, str(e.kind), e.name, str(e.state)) for e in store.journal(run_id).values()
    ]


def events(store: Store, run_id: str) -> list[str]:
    """The timeline's event types, in order."""
    return [e.type for e in store.timeline(run_id)]


def see(key: str, value: Any) -> None:
    SEEN.setdefault(key, []).append(value)


class Rejected(Exception):
    """A user-defined error type, rebuilt on replay from its recorded module path."""


def effect(name: str, value: Any = None) -> Any:
    """A step body with a visible side effect: counts itself, runs its hook, maybe fails.

    KNOBS["fail:NAME"] = n fails the first n calls (True: always); KNOBS["exc:NAME"] is
    the exception type raised (RuntimeError by default).
    """
    CALLS[name] += 1
    hook = HOOKS.get(name)
    if hook is not None:
        hook()
    fail = KNOBS.get(f"fail:{name}")
    if fail is True or (isinstance(fail, int) and CALLS[name] <= fail):
        exc: type[Exception] = KNOBS.get(f"exc:{name}", RuntimeError)
        raise exc(f"{name} failed on call {CALLS[name]}")
    return value


@flowctl.step(retry=RetryPolicy.make(max_attempts=3, backoff="10s"))
def flaky(name: str, value: Any = None) -> Any:
    return effect(name, value)


@flowctl.step(retry=RetryPolicy.make(max_attempts=5, backoff="10s", non_retryable=(KeyError,)))
def picky(name: str, value: Any = None) -> Any:
    return effect(name, value)


# -- workflows ----------------------------------------------------------------


def two_steps(ctx: Any, x: int = 1) -> dict[str, int]:
    a = ctx.step("a", effect, "a", x + 1)
    b = ctx.step("b", effect, "b", a * 10)
    return {"a": a, "b": b}


def sleeper(ctx: Any) -> Any:
    ctx.step("before", effect, "before", 1)
    ctx.sleep(KNOBS.get("sleep", "1h"))
    return ctx.step("after", effect, "after", 2)


def fast_sleeps(ctx: Any, past: str) -> str:
    ctx.sleep(0)
    ctx.sleep(timedelta(seconds=-5))
    ctx.sleep_until(datetime.fromisoformat(past))
    return ctx.step("after", effect, "after", "done")


def sleep_until_epoch(ctx: Any, at: float) -> str:
    ctx.sleep_until(at)
    return ctx.step("after", effect, "after", "woke")


def naive_sleep_until(ctx: Any) -> None:
    ctx.sleep_until(datetime(2026, 4, 1, 9, 0))


def sleep_loop(ctx: Any, n: int) -> int:
    for i in range(n):
        ctx.sleep("1h")
        ctx.step(f"tick {i}", effect, f"tick {i}", i)
    return n


def thirty_days(ctx: Any) -> str:
    ctx.sleep("30d")
    return ctx.step("after", effect, "after", "woke")


def recorder(ctx: Any) -> dict[str, Any]:
    values = {"now": ctx.now().isoformat(), "uuid": ctx.uuid(), "random": ctx.random()}
    see("values", values)
    ctx.sleep("1h")
    return values


def waiter(ctx: Any, timeout: str | None = None, use_default: bool = False) -> Any:
    if use_default:
        payload = ctx.wait_signal("approved", timeout=timeout, default={"by": "nobody"})
    else:
        payload = ctx.wait_signal("approved", timeout=timeout)
    see("payload", payload)
    return ctx.step("after", effect, "after", payload)


def waiter_catches_timeout(ctx: Any) -> str:
    try:
        ctx.wait_signal("approved", timeout="1h")
    except SignalTimeoutError as e:
        return f"caught: {e}"
    return "signalled"


def two_signals(ctx: Any) -> list[Any]:
    return [ctx.wait_signal("approved"), ctx.wait_signal("approved")]


def sleep_then_signal(ctx: Any) -> Any:
    ctx.sleep("1h")
    ctx.step("after sleep", effect, "after sleep", 1)
    return ctx.wait_signal("approved")


def shape_changing(ctx: Any) -> str:
    ctx.step("a", effect, "a", 1)
    shape = KNOBS.get("shape", "step b")
    if shape == "step b":
        ctx.step("b", effect, "b", 2)
    elif shape == "step c":
        ctx.step("c", effect, "c", 2)
    else:
        ctx.sleep("1m")
    ctx.sleep("1h")
    return shape


def versioned(ctx: Any) -> Any:
    ctx.step("a", effect, "a", 1)
    where = KNOBS.get("version_at")
    v = None
    if where == "before sleep":
        v = ctx.version("new-email", 1, 2)
    ctx.sleep("1h")
    if where == "after sleep":
        v = ctx.version("new-email", 1, 2)
    see("version", v)
    ctx.step("b", effect, "b", v)
    return v


def version_twice(ctx: Any) -> list[int]:
    first = ctx.version("change", 1, KNOBS.get("max", 3))
    ctx.sleep("1h")
    second = ctx.version("change", KNOBS.get("min", 1), KNOBS.get("max", 3))
    return [first, second]


def nested(ctx: Any) -> Any:
    def outer() -> str:
        ctx.sleep(1)
        return "never"

    return ctx.step("outer", outer)


def nested_swallowed(ctx: Any) -> str:
    def outer() -> str:
        try:
            ctx.now()
        except Exception:
            pass
        return "ran"

    return ctx.step("outer", outer)


def capture(ctx: Any) -> str:
    CAPTURED.append(ctx)
    return "ok"


def catcher(ctx: Any) -> str:
    try:
        ctx.step("boom", effect, "boom")
        branch = "no error"
    except (ValueError, KeyError, Rejected) as e:
        branch = f"caught {type(e).__name__}: {e}"
    see("branch", branch)
    ctx.sleep("1h")
    return ctx.step("after", effect, "after", branch)


def three_steps(ctx: Any) -> list[str]:
    return [ctx.step(n, effect, n, n.upper()) for n in ("a", "b", "c")]


def catch_then_fail(ctx: Any) -> str:
    ctx.step("a", effect, "a", 1)
    try:
        ctx.step("b", effect, "b", 2)
    except RuntimeError:
        pass
    ctx.step("c", effect, "c", 3)
    ctx.step("d", effect, "d", 4)
    return "done"


def swallow(ctx: Any) -> str:
    try:
        ctx.sleep("1h")
    except Exception:
        return "swallowed"
    return "slept"


def swallow_everything(ctx: Any) -> str:
    try:
        ctx.sleep("1h")
    except BaseException:
        return "swallowed"
    return "slept"


def swallow_nondeterminism(ctx: Any) -> str:
    ctx.step("a", effect, "a", 1)
    try:
        if KNOBS.get("changed"):
            ctx.step("renamed", effect, "renamed", 2)
        else:
            ctx.step("b", effect, "b", 2)
    except Exception:
        pass
    ctx.sleep("1h")
    return "done"


def retrying(ctx: Any) -> Any:
    value = ctx.step("flaky", flaky, "flaky", "ok")
    ctx.sleep("1h")
    return ctx.step("after", effect, "after", value)


def picky_flow(ctx: Any) -> Any:
    return ctx.step("picky", picky, "picky", "ok")


def not_json(ctx: Any) -> Any:
    return ctx.step("obj", effect, "obj", {1, 2})


def not_json_result(ctx: Any) -> Any:
    return {"when": datetime(2026, 1, 1)}


def tuple_result(ctx: Any) -> Any:
    pair = ctx.step("pair", effect, "pair", (1, {2: "two"}))
    see("pair", pair)
    ctx.sleep("1h")
    return pair


def busy(ctx: Any) -> str:
    ctx.step("work", effect, "work", 1)
    ctx.step("more", effect, "more", 2)
    return "done"


def busy_sleeper(ctx: Any) -> str:
    ctx.step("work 1", effect, "work 1", 1)
    ctx.sleep("1d")
    ctx.step("work 2", effect, "work 2", 2)
    ctx.step("work 3", effect, "work 3", 3)
    return "done"


def cooperative(ctx: Any) -> str:
    CAPTURED.append(ctx)

    def work() -> str:
        CALLS["work"] += 1
        HOOKS["work"]()
        see("cancelled", ctx.cancelled)
        ctx.check()
        return "not cancelled"

    return ctx.step("work", work)


def one_step(ctx: Any) -> str:
    ctx.step("work", effect, "work", 1)
    return "done"


def blocking(ctx: Any) -> str:
    """A step whose body names the call that ran it, so a late write would show."""
    result = ctx.step("block", lambda: effect("block", f"call {CALLS['block'] + 1}"))
    ctx.step("after", effect, "after", 2)
    return result


@flowctl.workflow("custom_backoff", max_attempts=2, retry=RetryPolicy.make(backoff="30s"))
def custom_backoff(ctx: Any) -> str:
    return ctx.step("a", effect, "a", 1)


def returns_when_cancelled(ctx: Any) -> str:
    ctx.step("work", effect, "work", 1)
    return "stopped early" if ctx.cancelled else "finished"


def hello_again(ctx: Any, name: str = "world") -> dict[str, str]:
    """The shape of examples/hello.py, for the golden journals."""
    greeting = ctx.step("greet", effect, "greet", f"hello, {name}")
    ctx.sleep("2s")
    loud = ctx.step("shout", effect, "shout", greeting.upper() + "!")
    return {"greeting": greeting, "loud": loud}


def values_and_signal(ctx: Any) -> dict[str, Any]:
    return {
        "now": ctx.now().isoformat(),
        "uuid": ctx.uuid(),
        "random": ctx.random(),
        "signal": ctx.wait_signal("approved"),
    }


def from_thread(ctx: Any) -> list[str]:
    errors: list[str] = []

    def call() -> None:
        try:
            ctx.now()
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    return errors


def parent(ctx: Any) -> Any:
    return ctx.child("durable_flows:two_steps", {"x": 1})


def parent_catches(ctx: Any) -> str:
    try:
        ctx.child("durable_flows:three_steps")
    except RuntimeError as e:
        return f"child failed: {e}"
    return "child completed"
