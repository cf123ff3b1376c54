"""A PostgreSQL outage (a restart, a failover, a backend killed, after which the server
resets every session) told apart from every other server error, and ridden out briefly.

An outage is a DatabaseUnavailable: the connection went, or the server refuses new ones
while it starts or stops. Every call through the store retries it for OUTAGE_RETRY_S with
capped backoff (the pool's dead connections discarded first), so a restart of a second
or two is not seen at all; past that the caller gets one line. A daemon waits out longer
ones itself (flowctl.daemon.lifecycle.Outage). A transaction whose connection went while
its COMMIT was under way may have been made: that one is never run again blindly, it is
`unsure` and the caller decides (a daemon leaves the run to its lease and the fence).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from flowctl.errors import DatabaseUnavailable

R = TypeVar("R")

OUTAGE_RETRY_S = 5.0  # how long one call rides out an outage before it fails in one line
FIRST_WAIT_S = 0.05  # the first retry waits this long, doubling each time after ...
CAP_WAIT_S = 1.0  # ... up to this
SETTLE_S = 1.0  # an outage is over once calls have got through for this long, none failing
# admin_shutdown (pg_ctl stop/restart -m fast), crash_shutdown (a backend died and the
# server resets every session), cannot_connect_now (starting up or shutting down).
# too_many_connections (a fleet reconnecting at once), and sessions the server ended for
# idling (idle_in_transaction_session_timeout, idle_session_timeout).
_OUTAGE_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "25P03", "57P05"})
# What libpq says when a server is down or restarting; it gives no SQLSTATE for these.
_TRANSIENT = (
    "refused",
    "starting up",
    "shutting down",
    "not yet accepting connections",
    "in recovery",
    "closed the connection",
    "terminating connection",
    "connection is closed",
    "connection is lost",
    "no connection to the server",
    "could not receive data",
    "could not send data",
    "connection reset",
    "server conn crashed",
    "consuming input failed",
    "sending query failed",
    "timeout expired",
)

log = logging.getLogger(__name__)


def is_outage(error: BaseException) -> bool:
    """Whether a driver error means the server is away for now, not that a statement or a
    login is wrong: a connection exception (SQLSTATE class 08), a shutdown or restart
    (57P01-57P03), a session the server ended, or a lost connection libpq names without a
    SQLSTATE. A password refused or a database missing is not one: retrying would not
    help."""
    state = getattr(error, "sqlstate", None)
    if state:
        return state.startswith("08") or state in _OUTAGE_STATES
    text = str(error).lower()
    return any(phrase in text for phrase in _TRANSIENT)


def retry_wait(attempt: int) -> float:
    """Seconds to wait after failed try `attempt` (1, 2, ...): doubling, capped."""
    return min(CAP_WAIT_S, FIRST_WAIT_S * (1 << min(attempt - 1, 16)))


def ride_out(
    once: Callable[[], R],
    what: str,
    *,
    on_outage: Callable[[], None] = lambda: None,
    budget: float = OUTAGE_RETRY_S,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """`once()`, run again while it raises a DatabaseUnavailable that is not `unsure`, for
    up to `budget` seconds with capped backoff; `on_outage()` after each failure (the
    pool's check: dead connections go). Past the budget, the last error, saying how long
    it was tried."""
    start = monotonic()
    attempt = 0
    while True:
        try:
            return once()
        except DatabaseUnavailable as e:
            if e.unsure:
                raise
            attempt += 1
            wait = retry_wait(attempt)
            if monotonic() - start + wait > budget:
                raise DatabaseUnavailable(f"{e} (retried for {budget:g} s)") from None
            log.debug("%s: %s; try %d in %.2f s", what, e, attempt + 1, wait)
            on_outage()
            sleep(wait)


class Availability:
    """Whether the server answers, shared by every call of one store: the first call to
    meet an outage says so in one line, and once calls have got through for SETTLE_S
    with none failing, one line says how long it lasted, however many calls met it
    meanwhile. (At INFO: a daemon's log shows them; a command's stderr keeps to its one
    line.) A server that resets every session ends them over some milliseconds, so a
    call may get through between two that fail: that is one outage, not two."""

    def __init__(self, where: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self.monotonic = monotonic
        self.since: float | None = None  # when the outage was first met; None: none now
        self.last = 0.0  # when a call last failed
        self.through: float | None = None  # when calls began to get through after that
        self._lock = threading.Lock()

    def lost(self, error: BaseException) -> bool:
        """A call met an outage; True for the first to meet this one."""
        with self._lock:
            self.last = self.monotonic()
            self.through = None
            if self.since is not None:
                return False
            self.since = self.last
        log.info("%s; retrying", error)
        return True

    def answered(self) -> None:
        if self.since is None:  # the common case: no lock, one attribute read
            return
        now = self.monotonic()
        with self._lock:
            since = self.since
            if since is None:
                return
            if self.through is None:
                self.through = now
            if now - self.through < SETTLE_S:
                return
            self.since, back = None, self.through
        log.info("PostgreSQL at %s is back after %.1fs", self.where, back - since)


RECONNECT_FIRST_S = 0.1  # the pool's first reconnect after a failed one waits this ...
RECONNECT_CAP_S = 1.0  # ... doubling up to this (psycopg_pool's own: 1 s, doubling, no cap)


def pool_class() -> Any:
    """psycopg_pool's ConnectionPool, reconnecting within RECONNECT_CAP_S of the server's
    return: its own backoff (1, 2, 4, 8 s ...) can leave a daemon without a connection for
    seconds after a restart of two, long enough for its leases to lapse. Relies on the
    pool's reconnect attempt (AttemptWithBackoff, psycopg_pool 3.2 and later); where that
    is not there, the pool as it is."""
    from psycopg_pool import ConnectionPool

    try:
        from psycopg_pool.base import AttemptWithBackoff
    except ImportError:  # pragma: no cover - another psycopg_pool layout
        return ConnectionPool

    class QuickAttempt(AttemptWithBackoff):
        INITIAL_DELAY = RECONNECT_FIRST_S

        def update_delay(self, now: float) -> None:
            super().update_delay(now)
            self.delay = min(self.delay, RECONNECT_CAP_S)

    class QuickPool(ConnectionPool):
        def _add_connection(self, attempt: Any, growing: bool = False) -> None:
            fresh = QuickAttempt(timeout=self.reconnect_timeout)
            super()._add_connection(attempt or fresh, growing=growing)

    return QuickPool
