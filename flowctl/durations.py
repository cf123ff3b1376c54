"""Parse and format durations: "500ms", "30 sec", "1h30m", a timedelta, or seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from flowctl.errors import DurationError

_UNITS: dict[str, float] = {}
for _seconds, _names in (
    (0.001, ("ms", "msec", "msecs", "millisecond", "milliseconds")),
    (1, ("s", "sec", "secs", "second", "seconds")),
    (60, ("m", "min", "mins", "minute", "minutes")),
    (3600, ("h", "hr", "hrs", "hour", "hours")),
    (86400, ("d", "day", "days")),
    (604800, ("w", "week", "weeks")),
):
    for _name in _names:
        _UNITS[_name] = _seconds

# ASCII digits only: `\d` and float() also take fullwidth or Arabic-Indic digits.
_PART = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([a-z]+)\s*,?", re.ASCII)
_NUMBER = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*", re.ASCII)

Duration = str | int | float | timedelta

# Ten years. Anything longer is almost surely a unit mistake, and far beyond it
# timedelta overflows; numbers and strings share the limit so "90" and 90 agree.
MAX_SECONDS = 3650 * 86400


# Text durations parsed before, by their text: a workflow names the same few in every run
# (`ctx.sleep("1s")`), parsed once each. Bounded: past it, text is parsed every time.
_PARSED: dict[str, timedelta] = {}
_PARSED_MOST = 1024


def parse_duration(value: Duration) -> timedelta:
    """Turn any accepted duration form into a timedelta (never negative unless given one)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise DurationError(value)
    if isinstance(value, int | float):
        return _as_timedelta(value, value)
    if not isinstance(value, str):
        raise DurationError(value)
    parsed = _PARSED.get(value)
    if parsed is None:
        parsed = _parse_text(value)
        if len(_PARSED) < _PARSED_MOST:
            _PARSED[value] = parsed
    return parsed


def _parse_text(value: str) -> timedelta:
    """A duration given as text: a number of seconds, or parts like 1h30m."""
    text = value.strip().lower()
    if not text:
        raise DurationError(value)
    if _NUMBER.fullmatch(text):
        return _as_timedelta(text, value)
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _PART.match(text, pos)
        if not match or match.group(2) not in _UNITS:
            raise DurationError(value)
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return _as_timedelta(total, value)


def _as_timedelta(amount: str | float, given: object) -> timedelta:
    """Seconds as a timedelta, or a DurationError quoting what the user gave."""
    try:
        seconds = float(amount)
    except OverflowError:
        raise DurationError(given, too_long=True) from None
    if math.isnan(seconds):
        raise DurationError(given)
    if abs(seconds) > MAX_SECONDS:
        raise DurationError(given, too_long=True)
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta | float) -> str:
    """A short human form: 450ms, 42s, 5m03s, 23h59m, 2d03h."""
    seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{sign}{seconds:.0f}s" if seconds >= 10 else f"{sign}{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}d{hours:02d}h"
    if hours:
        return f"{sign}{hours}h{minutes:02d}m"
    return f"{sign}{minutes}m{secs:02d}s"
