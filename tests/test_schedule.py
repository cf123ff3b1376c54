"""The pure calendar part of schedules: cron/every specs, DST policies, missed fires.

Every expected instant below was worked out by hand from the zone's rules for 2026:
Europe/Paris springs forward 2026-03-29 02:00 -> 03:00 (01:00 UTC) and falls back
2026-10-25 03:00 -> 02:00 (01:00 UTC); America/New_York 2026-03-08 02:00 -> 03:00 (07:00 UTC)
and 2026-11-01 02:00 -> 01:00 (06:00 UTC); Australia/Lord_Howe (30-minute DST) 2026-10-04
02:00 -> 02:30 and 2026-04-05 02:00 -> 01:30; Pacific/Chatham (+12:45/+13:45) 2026-09-27
02:45 -> 03:45 and 2026-04-05 03:45 -> 02:45.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from flowctl.errors import UsageError
from flowctl.schedule.calendar import (
    ScheduleSpec,
    describe,
    due_fires,
    explain,
    fires_between,
    jitter_offset,
    local_zone_name,
    next_fires,
    parse_spec,
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def ats(
    cron: str, after: datetime, count: int, tz: str = "UTC", gap: str = "shift", fold: str = "first"
) -> list[datetime]:
    spec = parse_spec(cron=cron, tz=tz, gap=gap, fold=fold)
    return [f.at for f in next_fires(spec, after, count)]


# ---------------------------------------------------------------- DST: gaps


@pytest.mark.parametrize(
    ("tz", "after", "gap", "expected"),
    [
        # 02:30 does not exist; shift fires at 03:00 local (not the 03:30 naive arithmetic gives)
        (
            "Europe/Paris",
            utc(2026, 3, 28, 12),
            "shift",
            [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)],
        ),
        (
            "Europe/Paris",
            utc(2026, 3, 28, 12),
            "skip",
            [utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)],
        ),
        (
            "America/New_York",
            utc(2026, 3, 7, 12),
            "shift",
            [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)],
        ),
        (
            "America/New_York",
            utc(2026, 3, 7, 12),
            "skip",
            [utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)],
        ),
    ],
)
def test_spring_forward_gap_policies(
    tz: str, after: datetime, gap: str, expected: list[datetime]
) -> None:
    assert ats("30 2 * * *", after, 2, tz=tz, gap=gap) == expected


def test_gap_shift_fire_carries_local_time_and_note() -> None:
    spec = parse_spec(cron="30 2 * * *", tz="Europe/Paris")
    fire = next_fires(spec, utc(2026, 3, 28, 12), 1)[0]
    assert fire.at == utc(2026, 3, 29, 1)
    assert fire.local.isoformat() == "2026-03-29T03:00:00+02:00"
    assert fire.note == "gap: shifted from 02:30 to 03:00"


def test_gap_shift_merges_wall_times_that_land_on_the_same_instant() -> None:
    # 02:00, 02:15, 02:30 and 02:45 all shift to 03:00: one fire, not four
    spec = parse_spec(cron="*/15 2 * * *", tz="Europe/Paris")
    fires = next_fires(spec, utc(2026, 3, 28, 12), 2)
    assert [f.at for f in fires] == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0)]
    assert fires[0].note == "gap: shifted from 02:00 to 03:00 (+3 merged)"


def test_gap_shift_does_not_double_a_listed_wall_time_after_the_gap() -> None:
    # 02:00 and 02:30 shift to 03:00, which the cron also lists
    got = ats("0,30 2,3 * * *", utc(2026, 3, 29, 0), 3, tz="Europe/Paris")
    assert got == [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0)]


def test_gap_skip_keeps_the_other_days() -> None:
    got = ats("*/15 2 * * *", utc(2026, 3, 28, 12), 1, tz="Europe/Paris", gap="skip")
    assert got == [utc(2026, 3, 30, 0)]


# ---------------------------------------------------------------- DST: folds


@pytest.mark.parametrize(
    ("tz", "cron", "after", "fold", "expected"),
    [
        ("Europe/Paris", "30 2 * * *", utc(2026, 10, 24, 12), "first",
         [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
        ("Europe/Paris", "30 2 * * *", utc(2026, 10, 24, 12), "last",
         [utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)]),
        ("Europe/Paris", "30 2 * * *", utc(2026, 10, 24, 12), "both",
         [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)]),
        ("America/New_York", "30 1 * * *", utc(2026, 10, 31, 12), "first",
         [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
        ("America/New_York", "30 1 * * *", utc(2026, 10, 31, 12), "last",
         [utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)]),
        ("America/New_York", "30 1 * * *", utc(2026, 10, 31, 12), "both",
         [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)]),
    ],
)  # fmt: skip
def test_fall_back_fold_policies(
    tz: str, cron: str, after: datetime, fold: str, expected: list[datetime]
) -> None:
    assert ats(cron, after, len(expected), tz=tz, fold=fold) == expected


def test_fold_notes_and_local_offsets() -> None:
    spec = parse_spec(cron="30 1 * * *", tz="America/New_York", fold="both")
    first, second = next_fires(spec, utc(2026, 10, 31, 12), 2)
    assert first.local.isoformat() == "2026-11-01T01:30:00-04:00"
    assert first.note == "fold: first of two 01:30"
    assert second.local.isoformat() == "2026-11-01T01:30:00-05:00"
    assert second.note == "fold: second of two 01:30"


def test_after_inside_the_fold() -> None:
    # `after` is 01:45 EDT, the first pass; the second 01:30 (EST) is still to come
    inside = utc(2026, 11, 1, 5, 45)
    nyc = "America/New_York"
    assert ats("30 1 * * *", inside, 1, tz=nyc, fold="both") == [utc(2026, 11, 1, 6, 30)]
    assert ats("30 1 * * *", inside, 1, tz=nyc, fold="last") == [utc(2026, 11, 1, 6, 30)]
    assert ats("30 1 * * *", inside, 1, tz=nyc, fold="first") == [utc(2026, 11, 2, 6, 30)]


@pytest.mark.parametrize("fold", ["first", "last"])
def test_every_hour_cron_fires_each_elapsed_hour_in_a_fold(fold: str) -> None:
    # 01:00 EDT and 01:00 EST are two real hours: an hourly cron fires in both
    got = ats("0 * * * *", utc(2026, 11, 1, 3, 30), 4, tz="America/New_York", fold=fold)
    assert got == [
        utc(2026, 11, 1, 4),
        utc(2026, 11, 1, 5),
        utc(2026, 11, 1, 6),
        utc(2026, 11, 1, 7),
    ]


def test_every_hour_cron_skips_the_hour_that_did_not_elapse() -> None:
    # 02:30 CET does not exist; shifting it to 03:00 would fire twice within one hour
    got = ats("30 * * * *", utc(2026, 3, 29, 0), 3, tz="Europe/Paris", gap="shift")
    assert got == [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 2, 30)]
    got = ats("*/15 * * * *", utc(2026, 3, 29, 0, 40), 2, tz="Europe/Paris")
    assert got == [utc(2026, 3, 29, 0, 45), utc(2026, 3, 29, 1)]


def test_minutely_cron_across_new_york_fall_back_is_continuous() -> None:
    spec = parse_spec(cron="* * * * *", tz="America/New_York")
    fires = fires_between(spec, utc(2026, 11, 1, 4), utc(2026, 11, 1, 8), limit=1000)
    assert len(fires) == 240
    assert all(b.at - a.at == timedelta(minutes=1) for a, b in pairwise(fires))


# ---------------------------------------------------------------- odd zones


@pytest.mark.parametrize(
    ("cron", "after", "policy", "expected", "local"),
    [
        # 30-minute spring forward: 02:15 does not exist, 02:30 is the first valid instant
        ("15 2 * * *", utc(2026, 10, 2), {},
         [utc(2026, 10, 2, 15, 45), utc(2026, 10, 3, 15, 30), utc(2026, 10, 4, 15, 15)],
         "2026-10-04T02:30:00+11:00"),
        ("15 2 * * *", utc(2026, 10, 2), {"gap": "skip"},
         [utc(2026, 10, 2, 15, 45), utc(2026, 10, 4, 15, 15), utc(2026, 10, 5, 15, 15)],
         "2026-10-05T02:15:00+11:00"),
        # 30-minute fall back: 01:45 happens at +11:00 and again at +10:30
        ("45 1 * * *", utc(2026, 4, 3), {"fold": "first"},
         [utc(2026, 4, 3, 14, 45), utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)],
         "2026-04-05T01:45:00+11:00"),
        ("45 1 * * *", utc(2026, 4, 3), {"fold": "last"},
         [utc(2026, 4, 3, 14, 45), utc(2026, 4, 4, 15, 15), utc(2026, 4, 5, 15, 15)],
         "2026-04-05T01:45:00+10:30"),
        ("45 1 * * *", utc(2026, 4, 3), {"fold": "both"},
         [utc(2026, 4, 3, 14, 45), utc(2026, 4, 4, 14, 45), utc(2026, 4, 4, 15, 15)],
         "2026-04-05T01:45:00+11:00"),
    ],
)  # fmt: skip
def test_lord_howe_half_hour_dst(
    cron: str, after: datetime, policy: dict[str, str], expected: list[datetime], local: str
) -> None:
    spec = parse_spec(cron=cron, tz="Australia/Lord_Howe", **policy)  # type: ignore[arg-type]
    fires = next_fires(spec, after, 3)
    assert [f.at for f in fires] == expected
    assert fires[1].local.isoformat() == local


def test_chatham_quarter_hour_offsets() -> None:
    chatham = "Pacific/Chatham"
    # ordinary day at +12:45: 09:00 local is 20:15 UTC the day before
    assert ats("0 9 * * *", utc(2026, 6, 1), 1, tz=chatham) == [utc(2026, 6, 1, 20, 15)]
    # spring forward 02:45 -> 03:45: 03:00 shifts to 03:45 (+13:45) = 14:00 UTC
    fire = next_fires(parse_spec(cron="0 3 * * *", tz=chatham), utc(2026, 9, 26), 1)[0]
    assert fire.at == utc(2026, 9, 26, 14)
    assert fire.local.isoformat() == "2026-09-27T03:45:00+13:45"
    assert fire.note == "gap: shifted from 03:00 to 03:45"
    # fall back 03:45 -> 02:45: 03:00 happens at +13:45 and again at +12:45
    got = ats("0 3 * * *", utc(2026, 4, 4), 2, tz=chatham, fold="both")
    assert got == [utc(2026, 4, 4, 13, 15), utc(2026, 4, 4, 14, 15)]


# ---------------------------------------------------------------- calendar


def test_feb_29_fires_only_in_leap_years() -> None:
    assert ats("0 0 29 2 *", utc(2026, 1, 1), 2) == [utc(2028, 2, 29), utc(2032, 2, 29)]
    assert ats("0 0 29 2 *", utc(2026, 1, 1), 1, tz="Europe/Paris") == [utc(2028, 2, 28, 23)]


def test_day_31_fires_only_in_31_day_months() -> None:
    got = ats("0 0 31 * *", utc(2026, 1, 1), 8)
    months = [(2026, 1), (2026, 3), (2026, 5), (2026, 7), (2026, 8), (2026, 10), (2026, 12)]
    assert got == [utc(y, m, 31) for y, m in months] + [utc(2027, 1, 31)]


def test_dom_dow_or_rule_when_both_are_restricted() -> None:
    # April 2026: Fridays are 3, 10, 17, 24; the 13th is a Monday. Either field matching fires.
    got = ats("0 0 13 * FRI", utc(2026, 4, 1), 5)
    assert got == [utc(2026, 4, d) for d in (3, 10, 13, 17, 24)]
    # the classic surprise: "first Monday" written this way fires on days 1-7 AND every Monday
    got = ats("0 0 1-7 * MON", utc(2026, 4, 1), 8)
    assert got == [utc(2026, 4, d) for d in (2, 3, 4, 5, 6, 7, 13, 20)]


def test_dom_dow_and_rule_when_a_field_starts_with_star() -> None:
    # */2 starts with '*': both must match, so Mondays with an odd date
    got = ats("0 0 */2 * MON", utc(2026, 4, 1), 3)
    assert got == [utc(2026, 4, 13), utc(2026, 4, 27), utc(2026, 5, 11)]


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@monthly", utc(2026, 5, 1)),
        ("@weekly", utc(2026, 4, 19)),  # the next Sunday after Wednesday 2026-04-15
        ("@daily", utc(2026, 4, 16)),
        ("@midnight", utc(2026, 4, 16)),
        ("@hourly", utc(2026, 4, 15, 11)),
        ("@DAILY", utc(2026, 4, 16)),
    ],
)
def test_aliases(alias: str, expected: datetime) -> None:
    assert ats(alias, utc(2026, 4, 15, 10, 30), 1) == [expected]


def test_alias_is_stored_as_written_and_expanded_for_matching() -> None:
    spec = parse_spec(cron="  @Daily ", tz="UTC")
    assert spec.cron == "@daily"
    assert spec.expression == "0 0 * * *"


def test_day_and_month_names() -> None:
    # Friday 2026-04-17 12:00 UTC; 09:00 Paris is 07:00 UTC in summer
    got = ats("0 9 * * MON-FRI", utc(2026, 4, 17, 12), 3, tz="Europe/Paris")
    assert got == [utc(2026, 4, 20, 7), utc(2026, 4, 21, 7), utc(2026, 4, 22, 7)]
    got = ats("0 0 1 JAN-MAR *", utc(2026, 2, 15), 3)
    assert got == [utc(2026, 3, 1), utc(2027, 1, 1), utc(2027, 2, 1)]
    assert ats("0 0 * * sat,sun", utc(2026, 4, 15), 2) == [utc(2026, 4, 18), utc(2026, 4, 19)]


def test_fires_between_is_start_exclusive_end_inclusive_and_limited() -> None:
    spec = parse_spec(cron="0 * * * *", tz="UTC")
    got = fires_between(spec, utc(2026, 1, 1, 0), utc(2026, 1, 1, 3), limit=10)
    assert [f.at for f in got] == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]
    got = fires_between(spec, utc(2026, 1, 1, 0), utc(2026, 1, 1, 3), limit=2)
    assert [f.at for f in got] == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)]


# ---------------------------------------------------------------- every


def test_every_is_anchored_and_first_fires_one_interval_after_the_anchor() -> None:
    anchor = utc(2026, 1, 1, 10, 0, 7)
    spec = parse_spec(every="15m", tz="UTC", anchor=anchor)
    assert [f.at for f in next_fires(spec, anchor - timedelta(hours=1), 2)] == [
        utc(2026, 1, 1, 10, 15, 7),
        utc(2026, 1, 1, 10, 30, 7),
    ]
    assert [f.at for f in next_fires(spec, utc(2026, 1, 1, 10, 15, 7), 1)] == [
        utc(2026, 1, 1, 10, 30, 7)
    ]
    assert [f.at for f in next_fires(spec, utc(2026, 1, 2, 0, 0, 0), 1)] == [
        utc(2026, 1, 2, 0, 0, 7)
    ]


def test_every_ignores_dst() -> None:
    spec = parse_spec(every="1h", tz="Europe/Paris", anchor=utc(2026, 3, 28, 23, 30))
    fires = next_fires(spec, utc(2026, 3, 29, 0), 3)
    assert [f.at for f in fires] == [utc(2026, 3, 29, h, 30) for h in (0, 1, 2)]
    assert [f.local.isoformat() for f in fires] == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:30:00+02:00",
    ]
    assert all(f.note is None for f in fires)


# ---------------------------------------------------------------- missed fires


def hourly(missed: str = "skip", max_missed: int = 100) -> ScheduleSpec:
    return parse_spec(cron="0 * * * *", tz="UTC", missed=missed, max_missed=max_missed)


CREATED = utc(2026, 1, 1)
LAST = utc(2026, 1, 1, 10)
NOW = utc(2026, 1, 1, 15, 0, 30)  # 11:00-14:00 missed, 15:00 due 30 s ago


@pytest.mark.parametrize(
    ("missed", "max_missed", "enqueue", "skipped"),
    [
        ("skip", 100, [15], [11, 12, 13, 14]),
        ("latest", 100, [14, 15], [11, 12, 13]),
        ("all", 100, [11, 12, 13, 14, 15], []),
        ("all", 2, [13, 14, 15], [11, 12]),
    ],
)
def test_missed_policies(
    missed: str, max_missed: int, enqueue: list[int], skipped: list[int]
) -> None:
    due = due_fires(hourly(missed, max_missed), LAST, CREATED, NOW)
    assert [f.at for f in due.enqueue] == [utc(2026, 1, 1, h) for h in enqueue]
    assert [f.at for f in due.skipped] == [utc(2026, 1, 1, h) for h in skipped]
    assert due.older_skipped is False
    assert due.next_fire is not None and due.next_fire.at == utc(2026, 1, 1, 16)


def test_missed_threshold_is_one_minute_for_slow_schedules() -> None:
    on_time = due_fires(hourly(), LAST, CREATED, utc(2026, 1, 1, 11, 1))
    assert [f.at for f in on_time.enqueue] == [utc(2026, 1, 1, 11)]
    late = due_fires(hourly(), LAST, CREATED, utc(2026, 1, 1, 11, 1) + timedelta(microseconds=1))
    assert late.enqueue == ()
    assert [f.at for f in late.skipped] == [utc(2026, 1, 1, 11)]


def test_missed_threshold_is_the_interval_for_fast_schedules() -> None:
    anchor = utc(2026, 1, 1)
    spec = parse_spec(every="10s", tz="UTC", anchor=anchor)
    due = due_fires(spec, anchor + timedelta(seconds=50), anchor, anchor + timedelta(seconds=75))
    assert [f.at for f in due.enqueue] == [anchor + timedelta(seconds=70)]  # 5 s late
    assert [f.at for f in due.skipped] == [anchor + timedelta(seconds=60)]  # 15 s > 10 s
    assert due.next_fire is not None and due.next_fire.at == anchor + timedelta(seconds=80)


def test_nothing_due_before_the_first_fire_after_creation() -> None:
    created = utc(2026, 1, 1, 10, 20)
    spec = parse_spec(every="15m", tz="UTC", anchor=created)
    due = due_fires(spec, None, created, utc(2026, 1, 1, 10, 34))
    assert (due.enqueue, due.skipped) == ((), ())
    assert due.next_fire is not None and due.next_fire.at == utc(2026, 1, 1, 10, 35)
    due = due_fires(spec, None, created, utc(2026, 1, 1, 10, 35))
    assert [f.at for f in due.enqueue] == [utc(2026, 1, 1, 10, 35)]


@pytest.mark.parametrize("now", [utc(2026, 1, 1, 14, 30), utc(2026, 1, 1, 15)])
def test_clock_jumped_backwards_refires_nothing(now: datetime) -> None:
    last = utc(2026, 1, 1, 15)
    for policy in ("skip", "latest", "all"):
        due = due_fires(hourly(policy), last, CREATED, now)
        assert (due.enqueue, due.skipped, due.older_skipped) == ((), (), False)
        assert due.next_fire is not None and due.next_fire.at == utc(2026, 1, 1, 16)


def test_long_downtime_is_bounded_and_cheap() -> None:
    spec = parse_spec(cron="* * * * *", tz="Europe/Paris", missed="all", max_missed=100)
    now = utc(2026, 1, 1, 0, 0, 30)
    due = due_fires(spec, None, utc(2025, 1, 1), now)  # a year of per-minute fires
    assert len(due.enqueue) == 101  # the 100 most recent missed + the one due now
    assert due.enqueue[0].at == utc(2025, 12, 31, 22, 20)
    assert due.enqueue[-1].at == utc(2026, 1, 1)
    assert len(due.skipped) == 100
    assert due.skipped[-1].at == utc(2025, 12, 31, 22, 19)
    assert due.older_skipped is True


def test_jitter_offset_is_deterministic_and_bounded() -> None:
    spec = parse_spec(cron="0 * * * *", tz="UTC", jitter="5m")
    offsets = [jitter_offset(spec, "nightly", utc(2026, 1, 1, h)) for h in range(24)]
    assert offsets == [jitter_offset(spec, "nightly", utc(2026, 1, 1, h)) for h in range(24)]
    assert all(timedelta(0) <= o < timedelta(minutes=5) for o in offsets)
    assert len(set(offsets)) > 20
    assert jitter_offset(spec, "other", utc(2026, 1, 1)) != offsets[0]
    assert jitter_offset(hourly(), "nightly", utc(2026, 1, 1)) == timedelta(0)


# ---------------------------------------------------------------- explain, describe, JSON


def test_explain_rows_show_policy_effects() -> None:
    spec = parse_spec(cron="30 1 * * *", tz="America/New_York")
    rows = explain(spec, utc(2026, 10, 31, 12), 2)
    assert rows == [
        {
            "at": "2026-11-01T05:30:00.000000Z",
            "local": "2026-11-01T01:30:00.000000-04:00",
            "weekday": "Sunday",
            "fires": True,
            "note": "fold: first of two 01:30",
            "policy": "fold=first",
        },
        {
            "at": "2026-11-01T06:30:00.000000Z",
            "local": "2026-11-01T01:30:00.000000-05:00",
            "weekday": "Sunday",
            "fires": False,
            "note": "fold: second of two 01:30",
            "policy": "fold=first",
        },
        {
            "at": "2026-11-02T06:30:00.000000Z",
            "local": "2026-11-02T01:30:00.000000-05:00",
            "weekday": "Monday",
            "fires": True,
            "note": None,
            "policy": None,
        },
    ]
    json.dumps(rows)  # --json prints these as they are


def test_explain_flags_a_skipped_gap() -> None:
    spec = parse_spec(cron="30 2 * * *", tz="Europe/Paris", gap="skip")
    rows = explain(spec, utc(2026, 3, 28, 12), 1)
    assert [(r["local"], r["fires"], r["note"], r["policy"]) for r in rows] == [
        ("2026-03-29T03:00:00.000000+02:00", False, "gap: skipped 02:30", "gap=skip"),
        ("2026-03-30T02:30:00.000000+02:00", True, None, None),
    ]


def test_describe() -> None:
    assert describe(parse_spec(cron="0 9 * * MON-FRI", tz="Europe/Paris")) == (
        "cron 0 9 * * MON-FRI in Europe/Paris"
    )
    spec = parse_spec(every="15m", tz="Europe/Paris", anchor=utc(2026, 1, 1))
    assert describe(spec) == "every 15m from 2026-01-01T01:00:00+01:00 in Europe/Paris"
    policies = {"gap": "skip", "missed": "all", "max_missed": 20, "overlap": "queue"}
    spec = parse_spec(cron="@daily", tz="UTC", jitter="1h30m", **policies)  # type: ignore[arg-type]
    assert describe(spec) == (
        "cron @daily in UTC; gap=skip, missed=all (max 20), overlap=queue, jitter 1h30m"
    )


ODD_ANCHOR = utc(2026, 1, 1, 0, 0, 7) + timedelta(microseconds=123456)


@pytest.mark.parametrize(
    "spec",
    [
        parse_spec(cron="*/5 9-17 * * MON-FRI", tz="Europe/Paris", fold="both", jitter="30s"),
        parse_spec(every="1h30m", tz="Pacific/Chatham", anchor=ODD_ANCHOR, missed="latest",
                   max_missed=7, overlap="queue"),
    ],
)  # fmt: skip
def test_json_round_trip(spec: ScheduleSpec) -> None:
    assert ScheduleSpec.from_json(spec.to_json()) == spec


def test_defaults() -> None:
    spec = parse_spec(cron="0 0 * * *", tz="UTC")
    policies = (spec.gap, spec.fold, spec.missed, spec.max_missed, spec.overlap, spec.jitter)
    assert policies == ("shift", "first", "skip", 100, "skip", timedelta(0))


def test_local_zone_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "missing")
    assert local_zone_name({"TZ": "Asia/Tokyo"}, missing, missing) == "Asia/Tokyo"
    assert local_zone_name({"TZ": ":America/New_York"}, missing, missing) == "America/New_York"
    zone_file = tmp_path / "usr" / "share" / "zoneinfo" / "Europe" / "Paris"
    zone_file.parent.mkdir(parents=True)
    zone_file.write_bytes(b"TZif")
    link = tmp_path / "localtime"
    link.symlink_to(zone_file)
    assert local_zone_name({"TZ": "Not/AZone"}, str(link), missing) == "Europe/Paris"
    timezone_file = tmp_path / "timezone"
    timezone_file.write_text("Africa/Nairobi\n")
    assert local_zone_name({}, missing, str(timezone_file)) == "Africa/Nairobi"
    assert local_zone_name({}, missing, missing) == "UTC"
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    assert parse_spec(cron="0 0 * * *").tz == "Asia/Kolkata"


# ---------------------------------------------------------------- bad input


DAILY = {"cron": "0 0 * * *"}
EVERY = {"anchor": utc(2026, 1, 1)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "0 25 * * *"}, "invalid cron expression '0 25 * * *': hour field '25' is not"),
        ({"cron": "0 25 * * *"}, "'25' is not valid; use 0-23, a list (1,15), a range (1-5)"),
        ({"cron": "61 * * * *"}, "minute field '61' is not valid; use 0-59"),
        ({"cron": "0 0 32 * *"}, "day-of-month field '32' is not valid; use 1-31"),
        ({"cron": "0 0 30 2 *"}, "day-of-month field '30' is not valid"),
        ({"cron": "0 0 * 13 *"}, "month field '13' is not valid; use 1-12 or JAN-DEC"),
        ({"cron": "0 0 * * MOX"}, "day-of-week field 'MOX' is not valid; use 0-7"),
        ({"cron": "*/0 * * * *"}, "minute field '*/0' is not valid"),
        ({"cron": "0 0 * *"}, "expected 5 fields (minute hour day-of-month month day-of-week)"),
        ({"cron": "0 0 0 * * *"}, "got 6 fields"),
        ({"cron": "   "}, "invalid cron expression '   '"),
        ({"cron": "@reboot"}, "unknown cron alias '@reboot': use @yearly, @annually"),
        ({**DAILY, "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus': use an IANA name"),
        ({**DAILY, "tz": "Europe"}, "unknown time zone 'Europe'"),
        ({**DAILY, "tz": "../etc/passwd"}, "unknown time zone '../etc/passwd'"),
        ({**DAILY, "every": "5m"}, "exactly one of cron or every, got both"),
        ({}, "exactly one of cron or every, got neither"),
        ({**DAILY, "gap": "move"}, "invalid gap policy 'move': use shift or skip"),
        ({**DAILY, "fold": "middle"}, "invalid fold policy 'middle': use first, last or both"),
        ({**DAILY, "missed": "some"}, "invalid missed policy 'some': use skip, latest or all"),
        ({**DAILY, "overlap": "kill"}, "invalid overlap policy 'kill': use allow, skip or queue"),
        ({**DAILY, "max_missed": 0}, "invalid max_missed 0: use a whole number, 1 or more"),
        ({**DAILY, "jitter": timedelta(seconds=-1)}, "invalid jitter"),
        ({**DAILY, "jitter": "soon"}, "invalid duration 'soon'"),
        ({**EVERY, "every": "0s"}, "invalid interval '0s': every must be at least 1s"),
        ({**EVERY, "every": "banana"}, "invalid duration 'banana'"),
        ({"every": "5m"}, "an every schedule needs an anchor"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(kwargs: dict[str, object], message: str) -> None:
    kwargs.setdefault("tz", "UTC")
    with pytest.raises(UsageError) as caught:
        parse_spec(**kwargs)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_corrupt_stored_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="invalid stored schedule"):
        ScheduleSpec.from_json('{"cron": "0 0 * * *"}')


def test_naive_datetimes_are_refused() -> None:
    spec = parse_spec(cron="0 0 * * *", tz="UTC")
    with pytest.raises(ValueError, match="after must be a timezone-aware datetime"):
        next_fires(spec, datetime(2026, 1, 1), 1)
