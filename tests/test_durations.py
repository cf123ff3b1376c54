"""Every duration form DESIGN.md accepts, and the exact error for the ones it does not."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowctl.durations import format_duration, parse_duration
from flowctl.errors import DurationError, UsageError

ACCEPTED_FORMS = (
    "use seconds (90), a unit (500ms, 30s, 5m, 2h, 7d), words (30 sec, 5 minutes, 2 hours,"
    " 7 days), or a compound (1h30m)"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the forms DESIGN.md lists, in its order
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("30 sec", timedelta(seconds=30)),
        ("30 seconds", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("5 min", timedelta(minutes=5)),
        ("5 minutes", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("2 hr", timedelta(hours=2)),
        ("2 hours", timedelta(hours=2)),
        ("7d", timedelta(days=7)),
        ("7 day", timedelta(days=7)),
        ("7 days", timedelta(days=7)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        # what a user would also expect to work
        ("1 second", timedelta(seconds=1)),
        ("1 minute", timedelta(minutes=1)),
        ("1 hour", timedelta(hours=1)),
        ("2 hrs", timedelta(hours=2)),
        ("10 mins", timedelta(minutes=10)),
        ("2 secs", timedelta(seconds=2)),
        ("250 msec", timedelta(milliseconds=250)),
        ("1 millisecond", timedelta(milliseconds=1)),
        ("2w", timedelta(weeks=2)),
        ("1 week", timedelta(weeks=1)),
        ("1d12h30m15s", timedelta(days=1, hours=12, minutes=30, seconds=15)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("1 hour, 30 minutes", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("  30S  ", timedelta(seconds=30)),
        ("5 M", timedelta(minutes=5)),
        ("90", timedelta(seconds=90)),
        ("2.25", timedelta(seconds=2.25)),
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        ("3650d", timedelta(days=3650)),
    ],
)
def test_accepted_strings(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (90, timedelta(seconds=90)),
        (0.5, timedelta(milliseconds=500)),
        (0, timedelta(0)),
        (-5, timedelta(seconds=-5)),  # a sleep of d <= 0 returns at once
        (timedelta(days=400), timedelta(days=400)),
        (timedelta(days=5000), timedelta(days=5000)),  # a timedelta is taken as given
    ],
)
def test_accepted_numbers_and_timedeltas(value: float | timedelta, expected: timedelta) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("", "''"),
        ("   ", "'   '"),
        ("soon", "'soon'"),
        ("5 parsecs", "'5 parsecs'"),
        ("5mm", "'5mm'"),
        ("1h30", "'1h30'"),  # a number without its unit inside a compound
        ("h", "'h'"),
        ("-5s", "'-5s'"),
        ("1e3", "'1e3'"),
        ("1.", "'1.'"),
        ("inf", "'inf'"),
        ("nan", "'nan'"),
        (float("nan"), "nan"),
        (True, "True"),
        (None, "None"),
        ([30], "[30]"),
    ],
)
def test_rejected_values_quote_the_input_and_list_the_forms(value: object, shown: str) -> None:
    with pytest.raises(DurationError) as exc:
        parse_duration(value)  # type: ignore[arg-type]
    assert str(exc.value) == f"invalid duration {shown}: {ACCEPTED_FORMS}"
    assert exc.value.text == value or value != value  # nan is not equal to itself


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("3651d", "'3651d'"),  # over ten years: a unit mistake
        ("99999999999999999999", "'99999999999999999999'"),
        (10**20, "100000000000000000000"),
        (10**400, None),  # float() overflows
        (float("inf"), "inf"),
    ],
)
def test_durations_over_ten_years_name_the_limit(value: object, shown: str | None) -> None:
    with pytest.raises(DurationError) as exc:
        parse_duration(value)  # type: ignore[arg-type]
    assert exc.value.too_long
    message = str(exc.value)
    if shown is not None:
        assert message.startswith(f"duration {shown} is longer than the limit of 10 years")
    assert "3650d" in message and "invalid duration" not in message
    assert "\n" not in message


def test_a_duration_error_is_a_usage_error_and_a_value_error() -> None:
    with pytest.raises(DurationError) as exc:
        parse_duration("soon")
    assert isinstance(exc.value, UsageError)
    assert isinstance(exc.value, ValueError)
    assert exc.value.exit_code == 2


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(milliseconds=450), "450ms"),
        (timedelta(0), "0ms"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(seconds=42), "42s"),
        (timedelta(minutes=5, seconds=3), "5m03s"),
        (timedelta(hours=23, minutes=59, seconds=59), "23h59m"),
        (timedelta(days=2, hours=3, minutes=30), "2d03h"),
        (timedelta(days=30), "30d00h"),
        (-timedelta(minutes=5), "-5m00s"),
        (90.0, "1m30s"),
    ],
)
def test_format_duration(delta: timedelta | float, text: str) -> None:
    assert format_duration(delta) == text
