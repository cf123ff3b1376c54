"""What flow control a workflow or a limit declares, checked where it is written.

`concurrency: 2` or `{limit: 1, key: "${{ input.user }}"}`; `debounce: {period: 2s,
key: ...}`; a named limit's `--concurrency N` and `--rate N/PERIOD`. Each parse raises a
one-line UsageError naming the field and what is accepted; nothing here touches a store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flowctl.durations import format_duration, parse_duration
from flowctl.errors import DurationError, UsageError
from flowctl.flow.keys import check_template, flow_key, label, render
from flowctl.limits import MAX_COUNT

# Limit names: what `flowctl limits set` accepts and a step names.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


@dataclass(frozen=True)
class Concurrency:
    """At most `limit` runs of the workflow at once, per rendered `key` when given."""

    limit: int
    key: str | None = None  # a template such as "${{ input.user }}"

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "key": self.key}


@dataclass(frozen=True)
class Debounce:
    """Starts with one rendered key within `period` collapse into one run."""

    period: timedelta
    key: str | None = None


@dataclass(frozen=True)
class Rate:
    """At most `n` starts in any window of `period`."""

    n: int
    period: timedelta

    def __str__(self) -> str:
        return f"{self.n}/{format_duration(self.period)}"


def positive(value: Any, field: str) -> int:
    """A limit: a whole number from 1 to MAX_COUNT."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise UsageError(
            f"{field} must be a whole number from 1 to {MAX_COUNT}, got {value!r}", field=field
        )
    return value


def parse_concurrency(value: Any, field: str = "concurrency") -> Concurrency:
    """`2`, or `{limit: 1, key: "${{ input.user }}"}`."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"limit", "key"})
        if unknown:
            raise UsageError(
                f"{field} has unknown field {unknown[0]!r}: give limit and, optionally, key",
                field=field,
            )
        if "limit" not in value:
            raise UsageError(f"{field} needs a limit, like {{limit: 1, key: ...}}", field=field)
        key = value.get("key")
        return Concurrency(positive(value["limit"], f"{field}.limit"), _key(key, f"{field}.key"))
    return Concurrency(positive(value, field))


def parse_debounce(value: Any, field: str = "debounce") -> Debounce:
    """`{period: 2s, key: "${{ input.user }}"}` (key optional: one key for the workflow)."""
    if not isinstance(value, dict) or "period" not in value:
        raise UsageError(
            f'{field} must be a table like {{period: 2s, key: "${{{{ input.user }}}}"}},'
            f" got {value!r}",
            field=field,
        )
    unknown = sorted(set(value) - {"period", "key"})
    if unknown:
        raise UsageError(
            f"{field} has unknown field {unknown[0]!r}: give period and key", field=field
        )
    try:
        period = parse_duration(value["period"])
    except DurationError as e:
        raise UsageError(f"{field}.period: {e}", field=field) from None
    if period <= timedelta(0):
        raise UsageError(f"{field}.period must be positive, got {value['period']!r}", field=field)
    return Debounce(period, _key(value.get("key"), f"{field}.key"))


def _key(key: Any, field: str) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip():
        raise UsageError(
            f'{field} must be text such as "${{{{ input.user }}}}", got {key!r}', field=field
        )
    check_template(key, field)
    return key


def parse_rate(text: str, field: str = "rate") -> Rate:
    """`N/PERIOD`: `100/1m`, `5/s`, `10/2s` (a bare unit is one of it)."""
    n_text, slash, period_text = str(text).strip().partition("/")
    if not slash or not n_text.strip().isdigit():
        raise UsageError(
            f"{field} must be N/PERIOD such as 100/1m or 5/1s, got {text!r}", field=field
        )
    n = positive(int(n_text), f"{field} (N of N/PERIOD)")
    period_text = period_text.strip()
    try:
        period = parse_duration(f"1{period_text}" if period_text.isalpha() else period_text)
    except DurationError:
        raise UsageError(
            f"{field} must be N/PERIOD with a duration such as 1m or 10s, got {text!r}",
            field=field,
        ) from None
    if period <= timedelta(0):
        raise UsageError(f"{field} needs a period above zero, got {text!r}", field=field)
    return Rate(n, period)


def check_name(name: str) -> str:
    """A limit's name: letters, digits, `_`, `.`, `-`, at most 100."""
    if not _NAME.match(name or ""):
        raise UsageError(
            f"limit name must be letters, digits, '_', '.' or '-' (at most 100), got {name!r}",
            field="name",
        )
    return name


def flow_fields(
    workflow: str, concurrency: Concurrency | None, debounce: Debounce | None, input: Any
) -> dict[str, Any]:
    """A new run's flow-control fields (NewRun's flow_key, flow_limit, debounce_key,
    debounce_us), its keys rendered from `input`: InputError if one does not render."""
    out: dict[str, Any] = {}
    if concurrency is not None:
        key = concurrency.key
        value = None if key is None else render(key, input, "concurrency.key")
        per = "" if key is None else label(key)
        out.update(flow_key=flow_key(workflow, value, per), flow_limit=concurrency.limit)
    if debounce is not None:
        value = None if debounce.key is None else render(debounce.key, input, "debounce.key")
        out.update(
            debounce_key=flow_key(workflow, value, "debounce"),
            debounce_us=round(debounce.period.total_seconds() * 1e6),
        )
    return out
