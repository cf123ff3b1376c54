"""Operator input, parsed once for every front end: `-i key=value` and `--input` JSON,
times (`--at`, `--since`, `--deadline`), statuses. Bad input raises a one-line
UsageError/InputError naming the flag and what is accepted; nothing is written.
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


def parse_inputs(pairs: list[str] | None = None, input_json: str | None = None) -> dict[str, Any]:
    """`--input JSON` first, then `-i key=value` (string) and `-i key:=JSON` (typed) on top.

    One name given twice (twice with -i, or in --input and with -i) is refused rather
    than one value silently winning.
    """
    data: dict[str, Any] = {}
    given: set[str] = set()
    if input_json is not None:
        loaded = loads_json(input_json, "--input")
        if not isinstance(loaded, dict):
            raise InputError(
                f"--input must be a JSON object like '{{\"user\": 42}}', got {input_json!r}"
            )
        data.update(loaded)
    for pair in pairs or []:
        if ":=" in pair and (
            pair.find(":=") < pair.find("=") + 1 or "=" not in pair.split(":=")[0]
        ):
            key, _, raw = pair.partition(":=")
            value = loads_json(
                raw,
                f"-i {key.strip()}:=",
                hint=f"; the value after ':=' must be JSON, for a plain string use {key}=VALUE",
            )
        elif "=" in pair:
            key, _, value = pair.partition("=")
        else:
            raise InputError(
                f"-i {pair!r}: use key=value for a string or key:=JSON for a typed value"
            )
        key = key.strip()
        if not key:
            raise InputError(f"-i {pair!r}: the input name before '=' is empty")
        if key in given:
            raise InputError(f"input {key!r} is given twice with -i: give each input once")
        if key in data:
            raise InputError(f"input {key!r} is given in --input and with -i: give each input once")
        given.add(key)
        data[key] = value
    return data


def parse_json_arg(flag: str, text: str) -> Any:
    return loads_json(text, flag)


def parse_time(text: str, clock: Clock, *, flag: str = "--at", tz: str | None = None) -> datetime:
    """An ISO-8601 time ("2026-12-01T09:00:00+01:00", "2026-12-01 09:00" in local time)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"{flag} {text!r} is not a time: use ISO-8601 like 2026-12-01T09:00:00Z or '2026-12-01 09:00'"
        ) from None
    try:
        if value.tzinfo is None:
            from zoneinfo import ZoneInfo  # lazy: `flowctl --help` does not load zone data

            zone = ZoneInfo(tz) if tz else None
            value = value.replace(tzinfo=zone) if zone else value.astimezone()
        return check_time(value, f"{flag} {text!r}")
    except (OverflowError, ValueError, KeyError):
        raise UsageError(
            f"{flag} {text!r} is out of range; use a year between {MIN_YEAR} and {MAX_YEAR}"
        ) from None


def parse_duration_or_time(text: str, clock: Clock, *, flag: str) -> datetime:
    """A duration from now ("15m") or an absolute ISO time."""
    try:
        return clock.now() + parse_duration(text)
    except DurationError:
        pass
    if not _looks_like_time(text):
        raise UsageError(
            f"{flag} {text!r} is neither a duration (15m, 2h, 7d) nor an ISO-8601 time (2026-12-01T09:00Z)"
        )
    return parse_time(text, clock, flag=flag)


def _looks_like_time(text: str) -> bool:
    """ISO-8601 as Python reads it; whether it is in range is parse_time's to say."""
    try:
        datetime.fromisoformat(text.strip())
    except ValueError:
        return False
    return True


def parse_start_at(text: str, clock: Clock) -> datetime:
    """`run --at`: `now`, or an ISO time that has not passed (a past one is a typo, not
    a wish to start at once: say `now` for that)."""
    if text.strip().lower() == "now":
        return clock.now()
    when = parse_time(text, clock, flag="--at")
    if when < clock.now():
        raise UsageError(
            f"--at {text!r} is in the past ({when.isoformat()}); give a later time, or --at now"
        )
    return when


def parse_since(text: str, clock: Clock, *, flag: str = "--since") -> datetime:
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
            f"{flag} {text!r} is neither a duration ago (2h, 7d, '3 days ago') nor an ISO-8601"
            " time (2026-12-01T09:00Z)"
        )
    return parse_time(text, clock, flag=flag)


def parse_statuses(values: list[str] | None) -> list[RunStatus] | None:
    """`--status a --status b,c`; an empty one is refused (it would silently mean "all")."""
    if not values:
        return None
    out = []
    for value in values:
        if not value.strip(" ,"):
            raise UsageError(f"--status is empty: use one of {STATUS_NAMES}, or leave it out")
        for part in value.split(","):
            part = part.strip().lower()
            if not part:
                continue
            try:
                out.append(RunStatus(part))
            except ValueError:
                raise UsageError(f"unknown status {part!r}: use one of {STATUS_NAMES}") from None
    return out or None


def check_workflow_filter(workflow: str | None) -> None:
    """An empty workflow filter is refused: it would silently list every workflow."""
    if workflow is not None and not workflow.strip():
        raise UsageError(
            "--workflow is empty: give a workflow name (see `flowctl workflows`), or leave it out"
        )
