"""Retry policies: the backoff schedule, jitter bounds, which errors retry, and how step
options attach to a step function without touching its own keyword arguments."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from flowctl import step
from flowctl.errors import DurationError, UsageError
from flowctl.retry import (
    DEFAULT_RUN_RETRY,
    NO_RETRY,
    RetryPolicy,
    StepOptions,
    options_of,
    with_options,
)


def seconds(policy: RetryPolicy, tries: range) -> list[float]:
    return [policy.delay(n).total_seconds() for n in tries]


def test_the_run_default_is_three_attempts_one_second_doubling_to_ten_minutes() -> None:
    assert DEFAULT_RUN_RETRY.max_attempts == 3
    assert seconds(DEFAULT_RUN_RETRY, range(1, 13)) == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600,
    ]  # fmt: skip


def test_a_step_without_options_is_tried_once() -> None:
    assert options_of(lambda: None) == StepOptions(retry=NO_RETRY, timeout=None)
    assert NO_RETRY.max_attempts == 1


def test_make_takes_friendly_durations() -> None:
    policy = RetryPolicy.make(max_attempts=5, backoff="10s", multiplier=3, max_backoff="2m")
    assert (policy.initial, policy.max_backoff) == (timedelta(seconds=10), timedelta(minutes=2))
    assert seconds(policy, range(1, 5)) == [10, 30, 90, 120]


def test_a_constant_backoff_never_grows() -> None:
    assert seconds(RetryPolicy.make(backoff=3, multiplier=1), range(1, 50)) == [3.0] * 49


def test_the_delay_never_overflows_however_many_tries() -> None:
    assert RetryPolicy.make(max_attempts=10_000).delay(5000) == timedelta(minutes=10)


def test_tries_done_below_one_waits_the_initial_backoff() -> None:
    assert RetryPolicy.make(backoff="7s").delay(0) == timedelta(seconds=7)


def test_jitter_spreads_the_wait_within_its_fraction() -> None:
    policy = RetryPolicy.make(backoff="100s", jitter=0.2)
    rng = random.Random(7)
    waits = [policy.delay(1, rng).total_seconds() for _ in range(500)]
    assert min(waits) >= 80
    assert max(waits) <= 120
    assert max(waits) - min(waits) > 30  # it does spread
    again = random.Random(7)
    assert policy.delay(1, again).total_seconds() == waits[0]  # reproducible from the seed


class Transient(Exception):
    pass


class Permanent(Transient):
    pass


@pytest.mark.parametrize(
    ("policy", "exc", "retryable"),
    [
        (RetryPolicy.make(), RuntimeError("x"), True),
        (RetryPolicy.make(non_retryable=(KeyError,)), KeyError("x"), False),
        (RetryPolicy.make(non_retryable=(LookupError,)), KeyError("x"), False),  # subclasses too
        (RetryPolicy.make(retry_on=(Transient,)), Transient("x"), True),
        (RetryPolicy.make(retry_on=(Transient,)), ValueError("x"), False),
        (RetryPolicy.make(retry_on=(Transient,), non_retryable=(Permanent,)), Permanent(), False),
    ],
)
def test_which_errors_are_retried(policy: RetryPolicy, exc: Exception, retryable: bool) -> None:
    assert policy.retryable(exc) is retryable


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1, got 0"),
        ({"multiplier": 0.5}, "backoff multiplier must be at least 1, got 0.5"),
        ({"jitter": 1.5}, "jitter must be a fraction between 0 and 1, got 1.5"),
        ({"jitter": -0.1}, "jitter must be a fraction between 0 and 1, got -0.1"),
    ],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(UsageError) as exc:
        RetryPolicy.make(**kwargs)  # type: ignore[arg-type]
    assert str(exc.value) == message


def test_a_bad_backoff_duration_is_a_duration_error() -> None:
    with pytest.raises(DurationError):
        RetryPolicy.make(backoff="soon")


def test_the_json_form_round_trips_the_schedule() -> None:
    policy = RetryPolicy.make(
        max_attempts=4, backoff="2s", multiplier=3, max_backoff="1m", jitter=0.1
    )
    data = policy.to_json()
    assert data == {
        "max_attempts": 4,
        "backoff": 2.0,
        "multiplier": 3.0,
        "max_backoff": 60.0,
        "jitter": 0.1,
    }
    assert RetryPolicy.from_json(data) == RetryPolicy.make(
        max_attempts=4, backoff=2, multiplier=3, max_backoff=60, jitter=0.1
    )
    assert RetryPolicy.from_json({}) == DEFAULT_RUN_RETRY


def test_the_step_decorator_attaches_options_and_leaves_the_function_alone() -> None:
    policy = RetryPolicy.make(max_attempts=5)

    @step(retry=policy, timeout="30s")
    def send(to: str, retry: int = 0, timeout: str = "kw of its own") -> str:
        return f"{to} {retry} {timeout}"

    assert options_of(send) == StepOptions(retry=policy, timeout=timedelta(seconds=30))
    assert send("ana", retry=2, timeout="mine") == "ana 2 mine"


def test_with_options_overrides_what_a_decorator_set() -> None:
    @step(retry=RetryPolicy.make(max_attempts=5))
    def work() -> None:
        return None

    with_options(work, StepOptions())
    assert options_of(work).retry is NO_RETRY


def test_options_of_ignores_a_foreign_attribute() -> None:
    def work() -> None:
        return None

    work.__flowctl_step__ = "not options"  # type: ignore[attr-defined]
    assert options_of(work) == StepOptions()
