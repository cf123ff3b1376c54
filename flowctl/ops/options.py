"""A run's start options, resolved and checked once for every front end.

The CLI gives text (`--deadline 2h`), the HTTP API JSON values (`"deadline": 7200`), the
Client and tests Python values (`deadline=timedelta(hours=2)`); `start_options` turns any
of them into one StartOptions, `redrive_options` into the deadline a redriven run gets,
and `check_key` checks an idempotency key. A bad value is
a UsageError whose `field` names it as the API does ("deadline", "max_attempts") and whose
words leave its spelling to the front end (errors.UsageError.spelled): nothing here names
a CLI flag. Nothing here reads or writes the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from flowctl.clock import Clock
from flowctl.durations import parse_duration
from flowctl.errors import DurationError, Spell, UsageError
from flowctl.limits import MAX_COUNT, MAX_KEY
from flowctl.model import Run, local_text
from flowctl.ops.parse import parse_duration_or_time, parse_start_at


@dataclass(frozen=True)
class StartOptions:
    """When a run starts and how long it may take, resolved: absolute times and a budget.
    None is "not given": start now, no deadline, the workflow's own budget and attempts."""

    run_at: datetime | None = None
    deadline: datetime | None = None
    timeout: timedelta | None = None
    max_attempts: int | None = None
    priority: int = 0  # higher first among due runs


def start_options(
    clock: Clock,
    *,
    delay: object = None,
    at: object = None,
    deadline: object = None,
    timeout: object = None,
    max_attempts: object = None,
    priority: object = None,
) -> StartOptions:
    """Each option as a front end gave it (None: not given), resolved and checked:

    `delay` (the field "in"): a duration from now, never negative. `at`: "now" or an ISO
    time that has not passed, or a datetime, taken as given (code that computes a past
    time means "due now"). `deadline`: a duration from now, an ISO time or a datetime, not
    yet passed. `timeout`: a positive duration. `max_attempts`: a whole number from 1 to
    MAX_COUNT. A duration is text (15m), a number of seconds or a timedelta. `priority`: a
    whole number from -MAX_COUNT to MAX_COUNT (default 0; higher first among due runs).
    """
    if delay is not None and at is not None:
        raise UsageError(lambda f: f"give {f('in')} or {f('at')}, not both", field="at")
    return StartOptions(
        run_at=clock.now() + _span(delay, "in") if delay is not None else _start_at(at, clock),
        deadline=None if deadline is None else _deadline(deadline, clock),
        timeout=None if timeout is None else _budget(timeout),
        max_attempts=None if max_attempts is None else _attempts(max_attempts),
        priority=0 if priority is None else _priority(priority),
    )


def _priority(value: object) -> int:
    """A run's priority: a whole number within ±MAX_COUNT."""
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_COUNT:
        raise UsageError(
            lambda f: (
                f"{f('priority')} must be a whole number from -{MAX_COUNT} to"
                f" {MAX_COUNT}, got {value!r}"
            ),
            field="priority",
        )
    return value


@dataclass(frozen=True)
class RedriveOptions:
    """The deadline a redriven run gets: `deadline` (a new one), none (`no_deadline`), or,
    neither given, its own, which must not have passed: a passed deadline is never retried
    on its own (the run would run on with no deadline, or die of it again at once)."""

    deadline: datetime | None = None
    no_deadline: bool = False

    def deadline_for(self, run: Run, now: datetime) -> datetime | None:
        """The run's deadline once redriven; a UsageError when its own has passed and
        neither option says what it is now."""
        if self.no_deadline:
            return None
        if self.deadline is not None:
            return self.deadline
        if run.deadline is not None and run.deadline <= now:
            passed = local_text(run.deadline)
            raise UsageError(
                lambda f: (
                    f"run {run.run_id} is past its deadline ({passed}): give {f('deadline')}"
                    f" with a new one (a time, or a duration from now like 2h) or"
                    f" {f('no_deadline')} to redrive it"
                ),
                field="deadline",
            )
        return run.deadline


def redrive_options(
    clock: Clock, *, deadline: object = None, no_deadline: object = False
) -> RedriveOptions:
    """A redrive's options as a front end gave them, checked: `deadline` as `run`'s (a
    duration from now, an ISO time or a datetime, not yet passed; None: not given),
    `no_deadline` a bool; not both."""
    if not isinstance(no_deadline, bool):
        raise UsageError(
            lambda f: f"{f('no_deadline')} must be true or false, got {no_deadline!r}",
            field="no_deadline",
        )
    if no_deadline and deadline is not None:
        raise UsageError(
            lambda f: f"give {f('deadline')} or {f('no_deadline')}, not both",
            field="no_deadline",
        )
    return RedriveOptions(
        deadline=None if deadline is None else _deadline(deadline, clock), no_deadline=no_deadline
    )


def check_key(key: object, *, field: str = "key", label: str | None = None) -> None:
    """An idempotency key is non-blank text of at most MAX_KEY characters (None: no key).
    `label` names one key of several ("key #2") where the field would be ambiguous."""
    if key is None:
        return

    def name(f: Spell) -> str:
        return label or f(field)

    if not isinstance(key, str):
        raise UsageError(lambda f: f"{name(f)} must be text, got {type(key).__name__}", field=field)
    if not key.strip():
        raise UsageError(
            lambda f: (
                f"{name(f)} must not be empty: give the name this run is known by, e.g. user-42"
            ),
            field=field,
        )
    if len(key) > MAX_KEY:
        raise UsageError(
            lambda f: (
                f"{name(f)} is {len(key):,} characters long: at most {MAX_KEY:,} are accepted"
            ),
            field=field,
        )


def _span(value: object, field: str) -> timedelta:
    """A duration from now (text, seconds or a timedelta); a negative one is refused."""
    if not isinstance(value, str | int | float | timedelta) or isinstance(value, bool):
        raise DurationError(value, field=field)
    try:
        span = parse_duration(value)
    except DurationError as e:
        raise DurationError(e.text, too_long=e.too_long, field=field) from None
    if span < timedelta(0):
        raise UsageError(
            lambda f: (
                f"{f(field)} must not be negative, got {value!r}: give a duration from"
                " now, like 15m or 900"
            ),
            field=field,
        )
    return span


def _start_at(at: object, clock: Clock) -> datetime | None:
    if isinstance(at, str):
        return parse_start_at(at, clock)
    if at is None or isinstance(at, datetime):
        return at
    raise UsageError(
        lambda f: (
            f"{f('at')} must be an ISO-8601 time like 2026-12-01T09:00:00Z, or now;"
            f" got {type(at).__name__}"
        ),
        field="at",
    )


def _deadline(value: object, clock: Clock) -> datetime:
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str):
        at = parse_duration_or_time(value, clock, field="deadline")
    else:
        at = clock.now() + _span(value, "deadline")
    if at <= clock.now():
        shown = local_text(at)
        raise UsageError(
            lambda f: (
                f"{f('deadline')} {shown} is already in the past: give a later time,"
                " or a duration from now like 2h"
            ),
            field="deadline",
        )
    return at


def _budget(value: object) -> timedelta:
    span = _span(value, "timeout")
    if span <= timedelta(0):
        raise UsageError(
            lambda f: f"{f('timeout')} must be a positive duration, got {value!r}",
            field="timeout",
        )
    return span


def _attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise UsageError(
            lambda f: (
                f"{f('max_attempts')} must be a whole number from 1 to {MAX_COUNT:,}, got {value!r}"
            ),
            field="max_attempts",
        )
    return value
