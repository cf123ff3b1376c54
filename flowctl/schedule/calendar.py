"""Schedules, the pure calendar part: specs, DST-correct fire times, missed-fire decisions.

No database, no CLI and no wall clock: every function takes `after`/`now` as an aware
datetime, so the daemon, `flowctl schedule explain` and the tests compute the same fires.

Cron expressions are parsed and matched by cronsim, but only on naive LOCAL WALL TIME.
Mapping a wall time to UTC is done here, by explicit per-schedule policy, because that is
where cron and its ports go wrong:

- gap (spring forward, the wall time does not exist): `shift` fires at the first valid
  instant after the gap (02:30 in Paris on 2026-03-29 fires at 03:00 local, 01:00 UTC, not
  the 03:30 that naive zoneinfo arithmetic gives); `skip` drops it. Several wall times
  shifted onto one instant fire once (`*/15 2 * * *` fires once at 03:00).
- fold (fall back, the wall time happens twice): `first`, `last` or `both` occurrences.
- A cron whose hour field covers every hour (`0 * * * *`, `*/15 * * * *`) measures elapsed
  time, so it ignores both policies: it fires in both passes of a repeated hour and not in a
  skipped one, so every hour that actually elapses gets its fires once. Policies apply to
  crons that name hours (`30 1 * * *`, `*/15 2 * * *`).

Day rule (Vixie/Debian cron; cronsim does the same): when neither day-of-month nor
day-of-week starts with `*`, a day matches if EITHER matches (`0 0 13 * FRI` fires on every
13th and on every Friday). When one of them starts with `*` (even `*/2`), both must match
(`0 0 */2 * MON` fires on Mondays with an odd date).

`every` schedules are absolute: anchor + k * every (k >= 1), so DST never moves them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from heapq import heappop, heappush
from itertools import count as counter
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from flowctl.durations import Duration, parse_duration
from flowctl.errors import ScheduleError

GAP_POLICIES = ("shift", "skip")
FOLD_POLICIES = ("first", "last", "both")
MISSED_POLICIES = ("skip", "latest", "all")
OVERLAP_POLICIES = ("allow", "skip", "queue")

# cronsim has no @aliases; these are the Vixie cron meanings.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ACCEPTED = {
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31 (a day that exists in the listed months), L or LW",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 (0 and 7 are Sunday) or SUN-SAT",
}
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ZERO = timedelta(0)
_ONE_MINUTE = timedelta(minutes=1)
# Wall times are scanned from this far before `after`: UTC offsets lie within -12h..+14h,
# so no wall time further back can map to an instant after `after`.
_SLACK = timedelta(hours=26)
_SEARCH_LIMIT = timedelta(days=366 * 60)


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated schedule; build it with parse_spec() or from_json(), never by hand.

    Exactly one of `cron` (as written, aliases kept) and `every` is set; `anchor` (aware
    UTC) is the origin of an `every` schedule and None for cron.

    `overlap` defaults to "skip": a scheduled job (report, backup, sync) is rarely safe to run
    twice at once, `allow` lets slow runs pile up, and `queue` builds an unbounded backlog
    when runs keep outlasting the interval. Skips are recorded in the schedule's history.
    """

    cron: str | None
    every: timedelta | None
    tz: str
    anchor: datetime | None = None
    gap: str = "shift"
    fold: str = "first"
    missed: str = "skip"
    max_missed: int = 100
    overlap: str = "skip"
    jitter: timedelta = _ZERO

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    @property
    def expression(self) -> str | None:
        """The 5-field cron expression with any @alias expanded (what cronsim is given)."""
        if self.cron is None:
            return None
        return ALIASES.get(self.cron, self.cron)

    def to_json(self) -> str:
        """Compact JSON for the schedules table; durations are in seconds."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["every"] = None if self.every is None else self.every.total_seconds()
        data["anchor"] = None if self.anchor is None else self.anchor.isoformat()
        data["jitter"] = self.jitter.total_seconds()
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ScheduleSpec:
        """Rebuild a spec stored with to_json(), re-validating it (tzdata may have changed)."""
        try:
            data = json.loads(text)
            if "tz" not in data:  # never re-resolve a stored zone to this machine's
                raise KeyError("tz")
            if data.get("anchor") is not None:
                data["anchor"] = datetime.fromisoformat(data["anchor"])
            return parse_spec(**data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ScheduleError(f"invalid stored schedule {text!r}: {exc}") from None


@dataclass(frozen=True)
class Fire:
    """One fire: `at` is the aware UTC instant (the idempotency key), `local` the same instant
    in the schedule's zone, `note` says how a DST gap or fold changed it (None if it did not)."""

    at: datetime
    local: datetime
    note: str | None = None


@dataclass(frozen=True)
class DueFires:
    """What the daemon should do now. Fires are oldest first.

    `skipped` lists the missed fires that are not enqueued (at most max_missed, the most
    recent); `older_skipped` is True when even older missed fires exist but were not listed.
    """

    enqueue: tuple[Fire, ...]
    skipped: tuple[Fire, ...]
    older_skipped: bool
    next_fire: Fire | None


# ---------------------------------------------------------------- parsing and validation


def parse_cron(expr: object) -> str:
    """Check a cron expression; return it with single spaces (aliases lower-case).

    cronsim also accepts a 6-field form with seconds; flowctl takes 5 fields only.
    """
    usage = "expected 5 fields (minute hour day-of-month month day-of-week) or an alias"
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError(f"invalid cron expression {expr!r}: {usage} like @daily")
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text.lower() not in ALIASES:
            raise ScheduleError(f"unknown cron alias {text!r}: use {_one_of(tuple(ALIASES))}")
        return text.lower()
    fields = text.split(" ")
    if len(fields) != 5:
        raise ScheduleError(
            f"invalid cron expression {text!r}: {usage} like @daily, got {len(fields)} fields"
        )
    try:
        sim = CronSim(text, datetime(2000, 1, 1))
    except CronSimError as exc:
        name = str(exc).removeprefix("Bad ")
        if name not in _FIELDS:
            raise ScheduleError(f"invalid cron expression {text!r}: {exc}") from None
        raise ScheduleError(
            f"invalid cron expression {text!r}: {name} field {fields[_FIELDS.index(name)]!r}"
            f" is not valid; use {_ACCEPTED[name]}, a list (1,15), a range (1-5)"
            " or a step (*/10)"
        ) from None
    try:
        next(sim)
    except StopIteration:
        raise ScheduleError(f"cron expression {text!r} never fires") from None
    return text


def local_zone_name(
    environ: Mapping[str, str] | None = None,
    localtime: str = "/etc/localtime",
    timezone_file: str = "/etc/timezone",
) -> str:
    """The machine's IANA zone name: $TZ, else the /etc/localtime link, else /etc/timezone,
    else UTC. A name, not a tzinfo, so the schedule keeps meaning the same after a move."""
    env = os.environ if environ is None else environ
    candidates = []
    tz_var = env.get("TZ", "").strip().removeprefix(":")
    if tz_var:
        candidates.append(_key_from_path(tz_var) if tz_var.startswith("/") else tz_var)
    candidates.append(_key_from_path(os.path.realpath(localtime)))
    try:
        with open(timezone_file, encoding="utf-8") as fh:
            candidates.append(fh.readline().strip())
    except OSError:
        pass
    for name in candidates:
        if name and _is_zone(name):
            return name
    return "UTC"


def parse_spec(
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    anchor: datetime | None = None,
    gap: str = "shift",
    fold: str = "first",
    missed: str = "skip",
    max_missed: int = 100,
    overlap: str = "skip",
    jitter: Duration = 0,
) -> ScheduleSpec:
    """Validate everything a user can give and return a ScheduleSpec.

    `tz=None` means the machine's zone, resolved once and stored by name. `anchor` is the
    schedule's creation time; only `every` uses it (cron ignores it).
    """
    if (cron is None) == (every is None):
        got = "both" if cron is not None else "neither"
        raise ScheduleError(f"a schedule needs exactly one of cron or every, got {got}")
    if tz is None:
        zone_name = local_zone_name()
    elif isinstance(tz, str) and _is_zone(tz.strip()):
        zone_name = tz.strip()
    else:
        raise ScheduleError(
            f"unknown time zone {tz!r}: use an IANA name such as Europe/Paris,"
            " America/New_York or UTC"
        )
    cron_text = None
    every_delta = None
    anchor_utc = None
    if cron is not None:
        cron_text = parse_cron(cron)
    else:
        assert every is not None
        every_delta = parse_duration(every)
        if every_delta < timedelta(seconds=1):
            raise ScheduleError(f"invalid interval {every!r}: every must be at least 1s")
        if anchor is None:
            raise ScheduleError("an every schedule needs an anchor (its creation time)")
        anchor_utc = _utc(anchor, "anchor")
    if isinstance(max_missed, bool) or not isinstance(max_missed, int) or max_missed < 1:
        raise ScheduleError(f"invalid max_missed {max_missed!r}: use a whole number, 1 or more")
    jitter_delta = parse_duration(jitter)
    if jitter_delta < _ZERO:
        raise ScheduleError(f"invalid jitter {jitter!r}: use a duration of 0 or more")
    return ScheduleSpec(
        cron=cron_text,
        every=every_delta,
        tz=zone_name,
        anchor=anchor_utc,
        gap=_choice("gap", gap, GAP_POLICIES),
        fold=_choice("fold", fold, FOLD_POLICIES),
        missed=_choice("missed", missed, MISSED_POLICIES),
        max_missed=max_missed,
        overlap=_choice("overlap", overlap, OVERLAP_POLICIES),
        jitter=jitter_delta,
    )


# ---------------------------------------------------------------- fire computation


def next_fires(spec: ScheduleSpec, after: datetime, count: int) -> list[Fire]:
    """The next `count` fires strictly after `after`, in time order."""
    fires: list[Fire] = []
    if count <= 0:
        return fires
    for fire, fired in _events(spec, _utc(after, "after")):
        if fired:
            fires.append(fire)
            if len(fires) >= count:
                break
    return fires


def fires_between(
    spec: ScheduleSpec, start: datetime, end: datetime, limit: int = 1000
) -> list[Fire]:
    """Fires with start < at <= end, in time order, at most `limit` (the earliest)."""
    start, end = _utc(start, "start"), _utc(end, "end")
    fires: list[Fire] = []
    if end <= start or limit <= 0:
        return fires
    for fire, fired in _events(spec, start):
        if fire.at > end:
            break
        if fired:
            fires.append(fire)
            if len(fires) >= limit:
                break
    return fires


def due_fires(
    spec: ScheduleSpec, last_fire: datetime | None, created_at: datetime, now: datetime
) -> DueFires:
    """Decide which fires to enqueue now, after a normal tick or after downtime.

    Fires after max(last_fire, created_at) and <= now are considered. One is missed when it
    is noticed more than min(interval, 1 minute) late (interval: to the following fire).
    Due fires that are not missed are always enqueued; missed ones follow `spec.missed`.
    If the clock went back (now <= last_fire) nothing fires again.
    """
    now = _utc(now, "now")
    since = _utc(created_at, "created_at")
    if last_fire is not None:
        since = max(since, _utc(last_fire, "last_fire"))
    if now <= since:
        return DueFires((), (), False, next(iter(next_fires(spec, since, 1)), None))
    # room for max_missed enqueued + max_missed listed as skipped + the few not yet missed
    recent, older = _recent_fires(spec, since, now, 2 * spec.max_missed + 3)
    following = next(iter(next_fires(spec, now, 1)), None)
    due: list[Fire] = []
    missed: list[Fire] = []
    for i, fire in enumerate(recent):
        if spec.every is not None:
            interval = spec.every
        else:
            later = recent[i + 1] if i + 1 < len(recent) else following
            interval = _ONE_MINUTE if later is None else later.at - fire.at
        late = now - fire.at > min(interval, _ONE_MINUTE)
        (missed if late else due).append(fire)
    if spec.missed == "skip":
        run, skip = [], missed
    elif spec.missed == "latest":
        run, skip = missed[-1:], missed[:-1]
    else:
        run, skip = missed[-spec.max_missed :], missed[: -spec.max_missed]
    if len(skip) > spec.max_missed:
        older, skip = True, skip[-spec.max_missed :]
    enqueue = sorted(run + due, key=lambda f: f.at)
    return DueFires(tuple(enqueue), tuple(skip), older, following)


def jitter_offset(spec: ScheduleSpec, schedule_name: str, fire_at: datetime) -> timedelta:
    """A delay in [0, jitter) derived from (schedule, fire time), so that a daemon that crashes
    and recomputes it gets the same value. It delays the start; the fire time (the
    idempotency key) stays as scheduled."""
    span = spec.jitter // timedelta(microseconds=1)
    if span <= 0:
        return _ZERO
    key = f"{schedule_name}\0{_utc(fire_at, 'fire_at').isoformat(timespec='microseconds')}"
    digest = hashlib.sha256(key.encode()).digest()
    return timedelta(microseconds=int.from_bytes(digest[:8], "big") % span)


def explain(spec: ScheduleSpec, after: datetime, count: int) -> list[dict[str, Any]]:
    """Rows for `flowctl schedule explain`: the next `count` fires, plus rows with
    fires=False where a DST policy drops a wall time, so users see what the policy does."""
    rows: list[dict[str, Any]] = []
    fired_count = 0
    if count <= 0:
        return rows
    expr = spec.expression
    hourly = expr is not None and len(CronSim(expr, datetime(2000, 1, 1)).hours) == 24
    for fire, fired in _events(spec, _utc(after, "after")):
        policy = None
        if fire.note is not None:
            kind = fire.note.split(":")[0]
            if hourly:
                policy = "every-hour cron: fires once per elapsed hour"
            else:
                policy = f"{kind}={spec.gap if kind == 'gap' else spec.fold}"
        rows.append(
            {
                "at": fire.at.astimezone(UTC)
                .isoformat(timespec="microseconds")
                .replace("+00:00", "Z"),
                "local": fire.local.isoformat(timespec="microseconds"),
                "weekday": _WEEKDAYS[fire.local.weekday()],
                "fires": fired,
                "note": fire.note,
                "policy": policy,
            }
        )
        fired_count += fired
        if fired_count >= count:
            break
    return rows


def describe(spec: ScheduleSpec) -> str:
    """One line for `schedule ls/show`: the rule, the zone, and any non-default policy."""
    if spec.cron is not None:
        text = f"cron {spec.cron} in {spec.tz}"
    else:
        assert spec.every is not None and spec.anchor is not None
        start = spec.anchor.astimezone(spec.zone).isoformat(timespec="seconds")
        text = f"every {_compact(spec.every)} from {start} in {spec.tz}"
    extras = []
    if spec.cron is not None and spec.gap != "shift":
        extras.append(f"gap={spec.gap}")
    if spec.cron is not None and spec.fold != "first":
        extras.append(f"fold={spec.fold}")
    if spec.missed != "skip":
        bound = f" (max {spec.max_missed})" if spec.missed == "all" else ""
        extras.append(f"missed={spec.missed}{bound}")
    if spec.overlap != "skip":
        extras.append(f"overlap={spec.overlap}")
    if spec.jitter > _ZERO:
        extras.append(f"jitter {_compact(spec.jitter)}")
    return text + (f"; {', '.join(extras)}" if extras else "")


# ---------------------------------------------------------------- internals


def _events(spec: ScheduleSpec, after: datetime) -> Iterator[tuple[Fire, bool]]:
    """Every fire strictly after `after` in time order, each UTC instant once, paired with
    True; wall times a DST policy drops come paired with False (for explain)."""
    zone = spec.zone
    if spec.every is not None:
        assert spec.anchor is not None
        k = max(1, (after - spec.anchor) // spec.every + 1)
        while True:
            at = spec.anchor + k * spec.every
            yield Fire(at, at.astimezone(zone)), True
            k += 1
    yield from _cron_events(spec, zone, after)


def _cron_events(
    spec: ScheduleSpec, zone: ZoneInfo, after: datetime
) -> Iterator[tuple[Fire, bool]]:
    """Cron fires: cronsim walks naive wall time; each match is mapped to UTC by policy."""
    assert spec.expression is not None
    sim = CronSim(spec.expression, after.astimezone(zone).replace(tzinfo=None) - _SLACK)
    gap, fold = ("skip", "both") if len(sim.hours) == 24 else (spec.gap, spec.fold)
    stop = after + _SEARCH_LIMIT
    # Wall order is not UTC order inside a fold (the second pass comes later), so events
    # wait in a heap until no later wall time can map before them.
    heap: list[tuple[datetime, int]] = []
    pending: dict[int, tuple[Fire, bool]] = {}
    fired_key: dict[datetime, int] = {}
    merged: dict[int, int] = {}
    seq = counter()
    for wall in sim:
        early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        horizon = min(early, late)  # no later wall time maps before this instant
        while heap and heap[0][0] < horizon:
            yield _pop(heap, pending, fired_key)
        if horizon > stop:
            return
        for fire, fired in _map_wall(wall, early, late, zone, gap, fold):
            if fire.at <= after:
                continue
            if fired and fire.at in fired_key:
                key = fired_key[fire.at]
                kept = pending[key][0]
                if fire.note and kept.note and kept.note.startswith("gap: shifted"):
                    merged[key] = merged.get(key, 0) + 1
                    base = kept.note.split(" (+")[0]
                    pending[key] = (replace(kept, note=f"{base} (+{merged[key]} merged)"), True)
                continue
            key = next(seq)
            pending[key] = (fire, fired)
            heappush(heap, (fire.at, key))
            if fired:
                fired_key[fire.at] = key
    while heap:
        yield _pop(heap, pending, fired_key)


def _pop(
    heap: list[tuple[datetime, int]],
    pending: dict[int, tuple[Fire, bool]],
    fired_key: dict[datetime, int],
) -> tuple[Fire, bool]:
    at, key = heappop(heap)
    event = pending.pop(key)
    if event[1]:
        del fired_key[at]
    return event


def _map_wall(
    wall: datetime, early: datetime, late: datetime, zone: ZoneInfo, gap: str, fold: str
) -> list[tuple[Fire, bool]]:
    """Turn one matching wall time into its instant(s), applying the gap and fold policies.

    `early`/`late` are the wall time read with fold=0/1 (PEP 495: fold=0 uses the offset in
    force before a transition). Equal: a normal time. early < late: it happens twice.
    early > late: it does not exist, and the transition lies in (late, early].
    """
    if early == late:
        return [(Fire(early, early.astimezone(zone)), True)]
    label = _hm(wall)
    if early < late:
        first = Fire(early, early.astimezone(zone), f"fold: first of two {label}")
        second = Fire(late, late.astimezone(zone), f"fold: second of two {label}")
        return [(first, fold in ("first", "both")), (second, fold in ("last", "both"))]
    at = _transition(late, early, zone)
    local = at.astimezone(zone)
    if gap == "shift":
        return [(Fire(at, local, f"gap: shifted from {label} to {_hm(local)}"), True)]
    return [(Fire(at, local, f"gap: skipped {label}"), False)]


def _transition(lo: datetime, hi: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in (lo, hi] whose UTC offset differs from lo's: the end of the gap."""
    before = lo.astimezone(zone).utcoffset()
    lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp())
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == before:
            lo_s = mid
        else:
            hi_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


def _recent_fires(
    spec: ScheduleSpec, since: datetime, now: datetime, keep: int
) -> tuple[list[Fire], bool]:
    """The last `keep` fires in (since, now] and whether older ones exist. Widens a look-back
    window from `now` instead of walking from `since`, so a month of downtime with a
    per-minute cron stays cheap."""
    window = timedelta(hours=1) if spec.every is None else spec.every * keep
    while True:
        start = since if now - since <= window else now - window
        fires = fires_between(spec, start, now, limit=sys.maxsize)
        if len(fires) >= keep or start == since:
            break
        window *= 4
    older = len(fires) > keep or (start > since and bool(fires_between(spec, since, start, 1)))
    return fires[-keep:], older


def _choice(kind: str, value: object, allowed: tuple[str, ...]) -> str:
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    raise ScheduleError(f"invalid {kind} policy {value!r}: use {_one_of(allowed)}")


def _one_of(options: tuple[str, ...]) -> str:
    return ", ".join(options[:-1]) + " or " + options[-1]


def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _key_from_path(path: str) -> str:
    return path.split("/zoneinfo/", 1)[1] if "/zoneinfo/" in path else ""


def _utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value.astimezone(UTC)


def _hm(value: datetime) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def _compact(delta: timedelta) -> str:
    """15m, 1h30m, 1d, 1.5s: short, and accepted back by parse_duration."""
    seconds = delta.total_seconds()
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"
