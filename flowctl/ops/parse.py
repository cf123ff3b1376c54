"""Operator input, parsed once for every front end: times ("at", "since", "deadline"),
statuses, one JSON object per line. Bad input raises a one-line UsageError naming the
field and what is accepted; the field is a structured `field`, spelled by the front end
(`--at` in the CLI, "at" over HTTP: errors.UsageError.spelled). Nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flowctl.clock import Clock
from flowctl.durations import parse_duration
from flowctl.errors import DurationError, InputError, UsageError
from flowctl.limits import MAX_YEAR, MIN_YEAR, check_time, loads_json
from flowctl.status import STATUS_NAMES as STATUS_NAMES
from flowctl.status import RunStatus


def parse_input_lines(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """`run --input-file`: one JSON object per line (blank lines skipped), one run each,
    with its line number (1-based, blank lines counted: the number an editor shows).

    InputError naming the line for anything else, so a bad file queues nothing."""
    out: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        value = loads_json(line, f"{source} line {number}")
        if not isinstance(value, dict):
            raise InputError(
                f"{source} line {number}: each line must be a JSON object like"
                f' {{"user": 42}}, got {type(value).__name__}'
            )
        out.append((number, value))
    if not out:
        raise InputError(f"{source} holds no input: give one JSON object per line")
    return out


def parse_json_arg(flag: str, text: str) -> Any:
    return loads_json(text, flag)


def parse_time(text: str, clock: Clock, *, field: str = "at", tz: str | None = None) -> datetime:
    """An ISO-8601 time ("2026-12-01T09:00:00+01:00", "2026-12-01 09:00" in local time, or in
    `tz`), in UTC; UsageError about `field` for anything else or a year out of range."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            lambda f: (
                f"{f(field)} {text!r} is not a time: use ISO-8601 like"
                " 2026-12-01T09:00:00Z or '2026-12-01 09:00'"
            ),
            field=field,
        ) from None
    try:
        if value.tzinfo is None:
            from zoneinfo import ZoneInfo  # lazy: `flowctl --help` does not load zone data

            zone = ZoneInfo(tz) if tz else None
            value = value.replace(tzinfo=zone) if zone else value.astimezone()
        return check_time(value, repr(text))
    except (OverflowError, ValueError, KeyError, UsageError):
        raise UsageError(
            lambda f: (
                f"{f(field)} {text!r} is out of range; use a year between {MIN_YEAR} and {MAX_YEAR}"
            ),
            field=field,
        ) from None


def parse_duration_or_time(text: str, clock: Clock, *, field: str) -> datetime:
    """A duration from now ("15m") or an absolute ISO time."""
    try:
        return clock.now() + parse_duration(text)
    except DurationError:
        pass
    if not _looks_like_time(text):
        raise UsageError(
            lambda f: (
                f"{f(field)} {text!r} is neither a duration (15m, 2h, 7d) nor an ISO-8601"
                " time (2026-12-01T09:00Z)"
            ),
            field=field,
        )
    return parse_time(text, clock, field=field)


def _looks_like_time(text: str) -> bool:
    """ISO-8601 as Python reads it; whether it is in range is parse_time's to say."""
    try:
        datetime.fromisoformat(text.strip())
    except ValueError:
        return False
    return True


def parse_start_at(text: str, clock: Clock) -> datetime:
    """A start time ("at"): `now`, or an ISO time that has not passed (a past one is a
    typo, not a wish to start at once: say `now` for that)."""
    if text.strip().lower() == "now":
        return clock.now()
    when = parse_time(text, clock, field="at")
    if when < clock.now():
        raise UsageError(
            lambda f: (
                f"{f('at')} {text!r} is in the past ({when.isoformat()}); give a later"
                f" time, or {f('at')} now"
            ),
            field="at",
        )
    return when


def parse_since(text: str, clock: Clock, *, field: str = "since") -> datetime:
    """A duration ago ("2h", "2h ago", "3 days") or an ISO time."""
    spoken = text.strip()
    if spoken.lower().endswith(" ago"):
        spoken = spoken[:-4]
    try:
        return clock.now() - parse_duration(spoken)
    except DurationError:
        pass
    if not _looks_like_time(text):
        raise UsageError(
            lambda f: (
                f"{f(field)} {text!r} is neither a duration ago (2h, 7d, '3 days ago')"
                " nor an ISO-8601 time (2026-12-01T09:00Z)"
            ),
            field=field,
        )
    return parse_time(text, clock, field=field)


def parse_statuses(values: list[str] | None) -> list[RunStatus] | None:
    """`status` filters, each one or several with commas; an empty one is refused (it
    would silently mean "all")."""
    if not values:
        return None
    out = []
    for value in values:
        if not value.strip(" ,"):
            raise UsageError(
                lambda f: f"{f('status')} is empty: use one of {STATUS_NAMES}, or leave it out",
                field="status",
            )
        for part in value.split(","):
            part = part.strip().lower()
            if not part:
                continue
            try:
                out.append(RunStatus(part))
            except ValueError:
                raise UsageError(
                    f"unknown status {part!r}: use one of {STATUS_NAMES}", field="status"
                ) from None
    return out or None


def check_workflow_filter(workflow: str | None) -> None:
    """An empty workflow filter is refused: it would silently list every workflow."""
    if workflow is not None and not workflow.strip():
        raise UsageError(
            lambda f: (
                f"{f('workflow')} is empty: give a workflow name (see `flowctl workflows`),"
                " or leave it out"
            ),
            field="workflow",
        )
