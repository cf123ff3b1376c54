"""Where a daemon is in its life (serving, draining, stopped at once, done) and the one
event its loops wait on, shared by the loop, the heartbeat and the executors."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from flowctl.clock import Clock
from flowctl.runtime.context import LeaseLost

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05  # seconds: the loops look at data_version and their flags this often


class DaemonStopping(LeaseLost):
    """Tells a live handler the daemon is going away: stop and leave the run to be reclaimed.

    A LeaseLost, so the engine abandons the run without writing an outcome: stopping a
    daemon never invents a timeout, deadline or cancellation.
    """

    reason = "daemon stopping"


class Lifecycle:
    """A daemon's stop state. `stopping`: drain (claim nothing new, let handlers finish);
    `hard`: stop at once (a second stop, or the database file gone); `serving` is set once
    the loop is under way, `served` when it has returned (the heartbeat ends with it)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.wake = threading.Event()  # a handler ended, a stop came, ...: look again now
        self.serving = threading.Event()
        # Set when the loop returns, so the heartbeat thread ends with it (on a FakeClock
        # nobody advances time after a test's daemon stops: a timed wait alone never ends).
        self.served = threading.Event()
        self.stopping = False
        self.hard = False
        self.asked: float | None = None  # monotonic time of stop(): the grace counts from it

    def stop(self, *, drain: bool = True) -> None:
        """Drain (stop claiming, let running handlers finish); a second call stops at once."""
        if self.stopping or not drain:
            self.hard = True
        if self.asked is None:
            self.asked = self.clock.monotonic()
        self.stopping = True
        self.wake.set()

    def wait(self, until: float) -> None:
        """Until monotonic time `until` or a wake, whichever is first."""
        self.clock.wait_until(self.wake, until)
        self.wake.clear()

    def install_signals(self) -> None:
        """SIGTERM or SIGINT drains; a second one exits at once (runs are reclaimed)."""

        def handler(signum: int, frame: Any) -> None:
            if self.stopping:
                log.warning("second signal: exiting now; running runs will be reclaimed")
                os._exit(128 + signum)
            log.info("signal %s: draining (send again to exit at once)", signum)
            # Only a flag: the loop looks at it within POLL_INTERVAL. (Setting an Event from
            # a signal handler can deadlock on the Event's own lock.)
            self.stopping = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
