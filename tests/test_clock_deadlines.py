"""Absolute deadlines on the injected clock: a periodic loop keeps time that passed
while it was busy between waits (the cause of heartbeats missed under load)."""

from __future__ import annotations

import threading

from flowctl.clock import FakeClock, SystemClock


def test_a_fake_deadline_passed_while_busy_returns_at_once() -> None:
    clock = FakeClock()
    due = clock.monotonic() + 1
    clock.advance(1)  # the clock moved before the wait began
    assert clock.wait_until(threading.Event(), due) is False
    assert clock.monotonic() == due


def test_a_fake_deadline_waits_for_the_clock_and_sees_the_event() -> None:
    clock = FakeClock()
    event = threading.Event()
    result: list[bool] = []
    waiter = threading.Thread(
        target=lambda: result.append(clock.wait_until(event, clock.monotonic() + 5))
    )
    waiter.start()
    clock.advance(4)
    waiter.join(0.1)
    assert waiter.is_alive()  # 4 of 5 seconds: still waiting
    event.set()
    waiter.join(5)
    assert result == [True]


def test_a_system_deadline_in_the_past_does_not_wait() -> None:
    clock = SystemClock()
    assert clock.wait_until(threading.Event(), clock.monotonic() - 10) is False
    event = threading.Event()
    event.set()
    assert clock.wait_until(event, clock.monotonic() + 60) is True
