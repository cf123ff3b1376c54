"""A run while its handler executes: the view the engine and the heartbeat share (the
lease, the execution time spent, what the heartbeat told the handler)."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING

from flowctl.clock import Clock
from flowctl.errors import Interrupt

if TYPE_CHECKING:
    from flowctl.store import Lease


class LiveRun:
    """The engine's and heartbeat's shared view of one executing run."""

    def __init__(
        self, lease: Lease, clock: Clock, spent_before: float, timeout: float | None
    ) -> None:
        self.lease = lease  # what the heartbeat extends and a release hands back
        self.run_id = lease.run_id
        self._clock = clock
        self._started = clock.monotonic()
        self._spent_before = spent_before
        self.timeout = timeout
        self._interrupt: Interrupt | None = None
        self._pause = False
        # The step the handler is inside ("#3 'charge'", when it began), for `why` and the
        # TUI: one tuple, so the heartbeat thread never reads a label with another's start.
        self.step: tuple[str, datetime] | None = None
        self.lost = False
        self.resting = False  # its handler waits for a wake in memory (rest .. back)
        self._lock = threading.Lock()

    def spent(self) -> float:
        return self._spent_before + (self._clock.monotonic() - self._started)

    def rest(self) -> None:
        """The run rests while its handler waits in memory for a wake: that wait spends no
        execution time, as a parked run's does not."""
        self._spent_before = self.spent()
        self.resting = True

    def back(self, lease: Lease) -> None:
        """Resumed under `lease` after a rest: the budget runs again from now."""
        self.lease = lease
        self._started = self._clock.monotonic()
        self.resting = False

    @property
    def pause_requested(self) -> bool:
        """Told by the heartbeat that an operator paused the run: park at the next durable call."""
        return self._pause

    def request_pause(self) -> None:
        self._pause = True

    def interrupt(self, exc: Interrupt) -> None:
        with self._lock:
            if self._interrupt is None:
                self._interrupt = exc

    def delivered(self) -> Interrupt | None:
        """What the heartbeat told this handler (cancel, deadline, budget, lost lease), if anything.

        Once told, the handler's end is that stop even if it returns normally, so whether a
        cancelled run ends `cancelled` does not depend on when its handler next called ctx.
        """
        with self._lock:
            return self._interrupt

    def interruption(self) -> Interrupt | None:
        if self.timeout is None:
            # No budget to check: the interrupt, if one was delivered, is the whole answer
            # (one attribute read; interrupt() sets it once, under the lock).
            return self._interrupt
        from flowctl.errors import ExecutionTimeoutError

        with self._lock:
            if (
                self._interrupt is None
                and self.timeout is not None
                and self.spent() >= self.timeout
            ):
                self._interrupt = ExecutionTimeoutError(
                    f"execution budget of {self.timeout:g}s used up"
                )
            return self._interrupt


__all__ = ["LiveRun"]
