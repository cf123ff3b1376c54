"""Workflows for test_nonretryable.py: each makes one mistake no retry can fix.

Started as "nonretryable_flows:NAME" with cwd set to tests/ (see durable_flows.py for why
not as a file target). `CALLS` counts step bodies, so a test can tell a retry happened.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime
from typing import Any

import flowctl
from flowctl import NonRetryableError, RetryPolicy

CALLS: Counter[str] = Counter()
RETRY_FIVE = RetryPolicy.make(max_attempts=5, backoff="10s")


class CardDeclined(NonRetryableError):
    """A user's own final error."""


def count(name: str, value: Any = None) -> Any:
    CALLS[name] += 1
    return value


def naive_sleep_until(ctx: Any) -> None:
    ctx.step("before", count, "before", 1)
    ctx.sleep_until(datetime(2030, 1, 1, 9, 0))  # no tzinfo


def bad_duration(ctx: Any) -> None:
    ctx.step("before", count, "before", 1)
    ctx.sleep("5 minuts")


def bad_signal_timeout(ctx: Any) -> None:
    ctx.wait_signal("approved", timeout="3 dais")


def durable_call_in_step(ctx: Any) -> None:
    def nested() -> Any:
        CALLS["nested"] += 1
        return ctx.now()

    ctx.step("nested", nested)


def durable_call_from_a_thread(ctx: Any) -> None:
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            ctx.now()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    raise errors[0]


@flowctl.step(retry=RETRY_FIVE)
def returns_a_datetime() -> Any:
    CALLS["when"] += 1
    return datetime(2030, 1, 1)


def step_result_not_json(ctx: Any) -> None:
    ctx.step("when", returns_a_datetime)


def result_not_json(ctx: Any) -> Any:
    return {"at": datetime(2030, 1, 1)}


def nondeterministic(ctx: Any) -> None:
    ctx.step("first" if CALLS["runs"] == 0 else "renamed", count, "step", 1)
    CALLS["runs"] += 1
    ctx.sleep("1h")


def takes_user(ctx: Any, user: str) -> str:
    CALLS["takes_user"] += 1
    return user


def raises_non_retryable(ctx: Any) -> None:
    ctx.step("before", count, "before", 1)
    raise NonRetryableError("order 7 does not exist")


@flowctl.step(retry=RETRY_FIVE)
def charge() -> None:
    CALLS["charge"] += 1
    raise CardDeclined("card declined")


def step_raises_non_retryable(ctx: Any) -> None:
    ctx.step("charge", charge)


def catches_non_retryable(ctx: Any) -> str:
    try:
        ctx.step("charge", charge)
    except CardDeclined:
        ctx.sleep("1h")  # a replay re-raises the recorded error: still caught
        return "refunded"
    return "charged"


@flowctl.step(retry=RetryPolicy.make(max_attempts=5, backoff="10s", non_retryable=(KeyError,)))
def lookup() -> None:
    CALLS["lookup"] += 1
    raise KeyError("sku-9")


def listed_non_retryable(ctx: Any) -> None:
    ctx.step("lookup", lookup)


@flowctl.step(retry=RetryPolicy.make(max_attempts=2, backoff="10s"))
def flaky() -> None:
    CALLS["flaky"] += 1
    raise RuntimeError("connection reset")


def retryable(ctx: Any) -> None:
    ctx.step("flaky", flaky)
