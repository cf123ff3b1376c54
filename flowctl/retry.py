"""Retry policies and step options, attached to a step function, never mixed into its kwargs."""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import FunctionType, MethodType
from typing import Any, TypeVar

from flowctl.durations import Duration, parse_duration
from flowctl.errors import UsageError, is_non_retryable

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how fast to try again.

    `max_attempts` counts every try, the first included. The wait before try n+1 is
    initial * multiplier**(n-1), capped at `max_backoff`, then spread by +/- `jitter`
    (a fraction). Exceptions not in `retry_on` fail the step at once (the run's own attempts
    still apply); exceptions listed in `non_retryable`, and NonRetryableError, are final:
    the step is not retried and the run ends `dead` at once.
    """

    max_attempts: int = 3
    initial: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    max_backoff: timedelta = timedelta(minutes=10)
    jitter: float = 0.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    non_retryable: tuple[type[BaseException], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UsageError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.multiplier < 1:
            raise UsageError(f"backoff multiplier must be at least 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise UsageError(f"jitter must be a fraction between 0 and 1, got {self.jitter}")

    @classmethod
    def make(
        cls,
        max_attempts: int = 3,
        backoff: Duration = 1,
        multiplier: float = 2.0,
        max_backoff: Duration = 600,
        jitter: float = 0.0,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> RetryPolicy:
        """Build a policy from friendly values: durations as strings or seconds."""
        return cls(
            max_attempts=max_attempts,
            initial=parse_duration(backoff),
            multiplier=multiplier,
            max_backoff=parse_duration(max_backoff),
            jitter=jitter,
            retry_on=tuple(retry_on),
            non_retryable=tuple(non_retryable),
        )

    def delay(self, tries_done: int, rng: _random.Random | None = None) -> timedelta:
        """The wait after `tries_done` failed tries (1 = after the first)."""
        cap = self.max_backoff.total_seconds()
        try:
            base = min(
                self.initial.total_seconds() * self.multiplier ** max(0, tries_done - 1), cap
            )
        except OverflowError:  # multiplier**n past float range, long after reaching the cap
            base = cap
        if self.jitter:
            spread = base * self.jitter
            base += (rng or _random).uniform(-spread, spread)
        return timedelta(seconds=max(0.0, base))

    def retryable(self, exc: BaseException) -> bool:
        """Whether this policy tries again after `exc`; NonRetryableError never is."""
        if self.final(exc):
            return False
        return isinstance(exc, self.retry_on)

    def final(self, exc: BaseException) -> bool:
        """An error no retry can fix: listed in `non_retryable`, or one flowctl knows is final
        (NonRetryableError, a durable call used wrongly). It ends the run `dead` at once."""
        return is_non_retryable(exc) or isinstance(exc, self.non_retryable)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "backoff": self.initial.total_seconds(),
            "multiplier": self.multiplier,
            "max_backoff": self.max_backoff.total_seconds(),
            "jitter": self.jitter,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetryPolicy:
        return cls.make(
            max_attempts=int(data.get("max_attempts", 3)),
            backoff=data.get("backoff", 1),
            multiplier=float(data.get("multiplier", 2.0)),
            max_backoff=data.get("max_backoff", 600),
            jitter=float(data.get("jitter", 0.0)),
        )


NO_RETRY = RetryPolicy(max_attempts=1)
DEFAULT_RUN_RETRY = RetryPolicy()


@dataclass(frozen=True)
class StepOptions:
    retry: RetryPolicy = NO_RETRY
    timeout: timedelta | None = None  # per try; enforced by command steps, advisory for Python
    limit: str | None = None  # the named limit (flowctl limits set) each start of it takes


_NO_OPTIONS = StepOptions()  # frozen: one shared instance for every undecorated step


def step(
    *, retry: RetryPolicy | None = None, timeout: Duration | None = None, limit: str | None = None
) -> Callable[[F], F]:
    """Attach options to a step function: `@step(retry=RetryPolicy.make(max_attempts=5))`;
    `@step(limit="api")`: each start waits for the named limit (`flowctl limits set api`)."""
    if limit is not None and (not isinstance(limit, str) or not limit):
        raise UsageError(f"@step(limit=...) must be a limit's name, got {limit!r}", field="limit")

    def attach(fn: F) -> F:
        return with_options(
            fn,
            StepOptions(
                retry=retry or NO_RETRY,
                timeout=parse_duration(timeout) if timeout is not None else None,
                limit=limit,
            ),
        )

    return attach


def with_options(fn: F, options: StepOptions) -> F:
    fn.__flowctl_step__ = options  # type: ignore[attr-defined]
    return fn


def options_of(fn: Callable[..., Any]) -> StepOptions:
    # A function's (or method's) own __dict__: getattr of a missing attribute raises (and
    # formats) an AttributeError, once per step of every undecorated function. Any other
    # callable (a decorated class, a partial) is asked as before.
    if isinstance(fn, FunctionType | MethodType):
        opts = fn.__dict__.get("__flowctl_step__")
    else:
        opts = getattr(fn, "__flowctl_step__", None)
    return opts if isinstance(opts, StepOptions) else _NO_OPTIONS


BLOCKING = "__flowctl_blocking__"  # a step body with this attribute true: see blocking()


def blocking(fn: F) -> F:
    """Mark a step body as one that waits (a command, a call of code not known here): the
    daemon's batch runner (flowctl.daemon.batch) always runs it on a thread of its own, never on
    the thread that advances the other handlers."""
    setattr(fn, BLOCKING, True)
    return fn
