"""Where a daemon is in its life (serving, draining, stopped at once, done, waiting out a
database outage) and the one event its loops wait on, shared by the loop, the heartbeat
and the executors."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import DatabaseUnavailable
from flowctl.model import iso
from flowctl.runtime.context import LeaseLost

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05  # seconds: the loops look at data_version and their flags this often
OUTAGE_FIRST_S = 0.25  # the first retry after the database went away waits this long ...
OUTAGE_CAP_S = 5.0  # ... doubling up to this: a restart is noticed within seconds of its end


def outage_wait(tries: int) -> float:
    """Seconds the loop waits before try `tries` + 1 while the database is away: capped
    doubling, so a long outage costs the server one attempt every OUTAGE_CAP_S."""
    return min(OUTAGE_CAP_S, OUTAGE_FIRST_S * (1 << min(tries - 1, 16)))


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
        self.outage = Outage(clock)  # the database away, waited out by the loop

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


class Outage:
    """The database away (a restart, a failover, a lost connection): never a reason to
    exit. The store retries each call briefly and says, once, when the server went away
    and when it is back; an outage that outlasts that is waited out here with capped
    backoff (`wait_out`, saying so once, with the wait) and the loop goes on claiming
    (`over`). Leases held are not counted lost meanwhile: only a claim by another worker,
    after they lapsed, moves the fence (and the first beat after the outage says so)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.since: float | None = None  # monotonic time it was first seen; None: no outage
        self.tries = 0
        self.wait = 0.0  # seconds of the current wait
        # The last outage waited out, as the daemon's registration says it (`status`).
        self.last: dict[str, float | str] = {}

    @property
    def away(self) -> bool:
        return self.since is not None

    def wait_out(self, error: DatabaseUnavailable, life: Lifecycle) -> None:
        """One failed try: say so if it is the first, then wait (a stop cuts it short)."""
        if self.since is None:
            self.since = self.clock.monotonic()
            log.info(
                "still no database (%s): waiting for it, retrying with backoff up to %gs;"
                " nothing is lost",
                error,
                OUTAGE_CAP_S,
            )
        self.tries += 1
        self.wait = outage_wait(self.tries)
        log.debug("database still unavailable (try %d, next in %gs)", self.tries, self.wait)
        life.wait(self.clock.monotonic() + self.wait)

    def over(self) -> float | None:
        """A try got through: how long the loop waited (None if it was not waiting). The
        store has said that the server is back."""
        if self.since is None:
            return None
        away = self.clock.monotonic() - self.since
        self.since, self.tries, self.wait = None, 0, 0.0
        self.last = {
            "outage_waited_s": round(away, 1),
            "outage_ended_at": iso(self.clock.now()) or "",
        }
        log.debug("serving again after waiting %.1fs for the database", away)
        return away
