"""When a named limit lets the next step start (issue 37, item 2): pure functions of what
the store read inside the take's transaction, in UTC microseconds.

A rate of N per PERIOD allows a start at t while fewer than N starts lie in (t - PERIOD, t]:
so no window of PERIOD ever holds more than N starts. A concurrency of N allows a start
while fewer than N steps hold the limit; a holder whose run's lease lapsed holds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LimitSpec:
    """A named limit as stored: either bound may be None (not limited by it)."""

    name: str
    concurrency: int | None
    rate_n: int | None
    period_us: int | None

    @property
    def rate(self) -> str | None:
        """`100/1m`: the rate as `flowctl limits set --rate` takes it."""
        if self.rate_n is None or self.period_us is None:
            return None
        return f"{self.rate_n}/{period_text(self.period_us)}"

    def describe(self) -> str:
        """`concurrency 2, 100/1m` (what it allows)."""
        parts = [] if self.concurrency is None else [f"concurrency {self.concurrency}"]
        return ", ".join([*parts, *([self.rate] if self.rate else [])]) or "unlimited"


@dataclass(frozen=True)
class Verdict:
    """Whether a step may start now; if not, when to look again and why."""

    until_us: int | None  # None: it may start now
    why: str = ""  # "concurrency" | "rate"


NOW = Verdict(None)


def rate_wait(starts: Sequence[int], n: int, period_us: int) -> int | None:
    """The first instant a start is allowed, given the starts (ascending) within the last
    period, or None when one is allowed now."""
    if len(starts) < n:
        return None
    return starts[len(starts) - n] + period_us


def decide(spec: LimitSpec, holders: Sequence[int], starts: Sequence[int], now_us: int) -> Verdict:
    """The verdict for one start at now_us: `holders` are the lease ends of the steps that
    hold the limit (each a fallback wake: the holder's lease may lapse), `starts` the
    starts (ascending) in the window ending now."""
    if spec.concurrency is not None and len(holders) >= spec.concurrency:
        return Verdict(max(min(holders), now_us + 1), "concurrency")
    if spec.rate_n is not None and spec.period_us is not None:
        until = rate_wait(starts, spec.rate_n, spec.period_us)
        if until is not None and until > now_us:
            return Verdict(until, "rate")
    return NOW


_UNITS = (("d", 86_400_000_000), ("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000))


def period_text(us: int) -> str:
    """A period in the largest unit that divides it: 1m, 90s, 2h, 250ms."""
    for unit, size in _UNITS:
        if us % size == 0:
            return f"{us // size}{unit}"
    return f"{us / 1000:g}ms"
