"""Named limits (issue 37, item 2) for every front end: define, list, remove. Each input is
checked here (flowctl.flow.spec) before anything is written; an unknown name is one line
that names the defined ones."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import UsageError
from flowctl.flow.spec import check_name, parse_rate, positive
from flowctl.flow.tokens import LimitSpec
from flowctl.model import iso
from flowctl.store import LimitState, Store


@dataclass(frozen=True)
class LimitInfo:
    """A limit as `limits ls` shows it."""

    state: LimitState

    def to_json(self) -> dict[str, Any]:
        spec, s = self.state.spec, self.state
        return {
            "name": spec.name,
            "concurrency": spec.concurrency,
            "rate": spec.rate,
            "holders": [{"run": r, "index": i, "since": iso(t)} for r, i, t in s.holders],
            "starts_in_window": s.starts,
            "next_free": iso(s.next_free),
        }


def set_limit(store: Store, spec: LimitSpec, *, clock: Clock) -> LimitSpec:
    """Define or change a limit checked by `limit_spec`."""
    rate = None if spec.rate_n is None or spec.period_us is None else (spec.rate_n, spec.period_us)
    return store.set_limit(spec.name, spec.concurrency, rate, clock.now())


def limit_spec(name: str, *, concurrency: object = None, rate: object = None) -> LimitSpec:
    """Limit `name` as given, checked before any database is opened: at most `concurrency`
    steps at once, at most `rate` (`N/PERIOD`, e.g. 100/1m) starts in any window of
    PERIOD; at least one of the two."""
    check_name(name)
    if concurrency is None and rate is None:
        raise UsageError(
            lambda f: f"give {f('concurrency')} N, {f('rate')} N/PERIOD, or both", field="rate"
        )
    limit = None if concurrency is None else positive(concurrency, "concurrency")
    parsed = None if rate is None else parse_rate(str(rate))
    period = None if parsed is None else round(parsed.period.total_seconds() * 1e6)
    return LimitSpec(name, limit, None if parsed is None else parsed.n, period)


def remove_limit(store: Store, name: str) -> None:
    """Remove limit `name`; an unknown name is a UsageError naming the defined ones."""
    if not store.remove_limit(name):
        raise unknown_limit(store, name)


def unknown_limit(store: Store, name: str) -> UsageError:
    defined = ", ".join(store.limit_names()) or "none"
    return UsageError(f"no limit named {name!r}; defined limits: {defined}", field="name")


def list_limits(store: Store, *, clock: Clock) -> list[LimitInfo]:
    return [LimitInfo(s) for s in store.limit_states(clock.now())]


def limit_state(store: Store, name: str, now: datetime) -> LimitState | None:
    found = store.limit_states(now, name)
    return found[0] if found else None
