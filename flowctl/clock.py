"""Time as a parameter. Only this module reads the wall clock.

The engine, daemon, schedules and TUI take a Clock, so tests pass a FakeClock and
a 30-day sleep is tested in milliseconds.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps; for measuring elapsed time."""
        ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait for `event` or `timeout` seconds (on this clock); True if the event is set."""
        ...

    def wait_until(self, event: threading.Event, deadline: float) -> bool:
        """Wait for `event` or until `monotonic()` reaches `deadline`; True if the event is set.

        An absolute deadline keeps a periodic loop on time: a clock that moves while the
        caller is busy between waits is not lost, as it is with a timeout taken afresh."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)

    def wait_until(self, event: threading.Event, deadline: float) -> bool:
        return event.wait(max(0.0, deadline - time.monotonic()))

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def boottime(self) -> float:
        """Like monotonic, but counting time the host spent suspended (Linux CLOCK_BOOTTIME)."""
        clock_id = getattr(time, "CLOCK_BOOTTIME", None)
        return time.clock_gettime(clock_id) if clock_id is not None else time.monotonic()


class FakeClock:
    """A clock that moves only when told to; `advance()` wakes anything waiting on it."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0
        self._suspended = 0.0
        self._cond = threading.Condition()

    def now(self) -> datetime:
        with self._cond:
            return self._now

    def monotonic(self) -> float:
        with self._cond:
            return self._mono

    def advance(self, delta: timedelta | float) -> datetime:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        with self._cond:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds
            self._cond.notify_all()
            return self._now

    def boottime(self) -> float:
        with self._cond:
            return self._mono + self._suspended

    def suspend(self, delta: timedelta | float) -> None:
        """Simulate the host sleeping: wall and boot time move, monotonic time does not."""
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        with self._cond:
            self._now += timedelta(seconds=seconds)
            self._suspended += seconds
            self._cond.notify_all()

    def set(self, when: datetime, *, monotonic_too: bool = True) -> None:
        """Jump the wall clock (e.g. to simulate a clock step); monotonic follows unless told not to."""
        with self._cond:
            delta = (when - self._now).total_seconds()
            self._now = when.astimezone(UTC)
            if monotonic_too and delta > 0:
                self._mono += delta
            self._cond.notify_all()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        with self._cond:
            deadline = None if timeout is None else self._mono + timeout
            return self._wait_locked(event, deadline)

    def wait_until(self, event: threading.Event, deadline: float) -> bool:
        with self._cond:
            return self._wait_locked(event, deadline)

    def _wait_locked(self, event: threading.Event, deadline: float | None) -> bool:
        """Fake time only moves by advance(); real waiting is capped so threads stay responsive."""
        while not event.is_set():
            if deadline is not None and self._mono >= deadline:
                return False
            self._cond.wait(0.01)
        return True

    def sleep(self, seconds: float) -> None:
        self.wait(threading.Event(), seconds)
