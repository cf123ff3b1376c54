"""The heartbeat: extends the leases of the runs a daemon executes, and tells their live
handlers what the store says of them (cancel, pause, deadline, budget, lease lost).

An idle daemon still beats (daemons.seen_at) every IDLE_BEAT, or more often for a short
lease (idle_beat): on another host, where its pid cannot be checked, that is all that
shows it alive, and only while it is seen within its lease (ids.daemon_live).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import timedelta

from flowctl.clock import Clock
from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.lifecycle import Lifecycle
from flowctl.daemon.slots import Slots
from flowctl.errors import (
    Cancelled,
    DatabaseError,
    DatabaseUnavailable,
    DeadlineExceededError,
    ExecutionTimeoutError,
    Interrupt,
)
from flowctl.runtime.context import LeaseLost
from flowctl.runtime.live import LiveRun
from flowctl.store import Lease, Store

log = logging.getLogger(__name__)

IDLE_BEAT = 10.0  # an idle daemon's liveness write (seen_at), at most this often


def idle_beat(lease: float, heartbeat: float) -> float:
    """Seconds between an idle daemon's liveness writes: IDLE_BEAT, or less, so that its
    seen_at is never older than its lease (the beat thread wakes every `heartbeat`)."""
    return min(IDLE_BEAT, (lease - heartbeat) / 2)


class Heartbeat:
    """Beats every `config.heartbeat` seconds on a thread of its own (`loop`), or once
    (`once`: tests, the foreground worker). A beat's write and a release never interleave
    (`release`): a lease read for a beat is a lease extended, never one handed back."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        config: DaemonConfig,
        owner: str,
        slots: Slots,
        *,
        idle_beats: bool,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.owner = owner
        self.slots = slots
        self.idle_beats = idle_beats  # a one-run worker (`run --wait`) is no daemon to show
        self._lock = threading.Lock()
        self._last_idle = 0.0

    def loop(self, life: Lifecycle) -> None:
        """Beat until the daemon's loop has returned (or it stopped with nothing running)."""
        with self.store.own_writes():
            # An absolute schedule: time passing while a beat is written counts toward the next.
            due = self.clock.monotonic() + self.config.heartbeat
            while not life.hard:
                self.clock.wait_until(life.served, due)
                due = max(due, self.clock.monotonic()) + self.config.heartbeat
                if life.hard or life.served.is_set() or (life.stopping and not len(self.slots)):
                    return
                try:
                    self.once()
                except DatabaseUnavailable as e:  # the loop says it once; leases stand
                    log.debug("heartbeat failed: %s", e)
                except DatabaseError as e:
                    log.warning("heartbeat failed: %s", e)
                except Exception:
                    log.exception("heartbeat failed")

    def once(self) -> None:
        """Extend our leases and pass cancellations, deadlines and timeouts to live handlers."""
        with self._lock:  # the leases read are the leases extended (see release)
            self._beat()

    def _beat(self) -> None:
        held = self.slots.extended()
        now = self.clock.now()
        if not held:
            self._beat_idle()
            return
        sent = [(live.lease, live.spent()) for _, live in held]
        replies = self.store.heartbeat(
            self.owner,
            sent,
            now + timedelta(seconds=self.config.lease),
            now,
            steps={rid: live.step for rid, live in held},
        )
        lives = dict(held)
        for reply, (lease, _) in zip(replies, sent, strict=True):
            live = lives[reply.run_id]
            if live.resting or live.lease is not lease:
                continue  # it rests, or rested since (flowctl.daemon.rests): a stale reply
            live.lost = live.lost or reply.lost
            exc = _told(reply.lost, reply.cancel, reply.deadline, reply.timeout, live)
            if exc is None:
                if reply.pause:
                    live.request_pause()  # not an interrupt: it parks at its next durable call
                continue
            live.interrupt(exc)
            if reply.lost:
                self.slots.silence([reply.run_id])  # another worker's now: nothing to extend
            # Otherwise keep extending the lease: a Python step cannot be interrupted, so the
            # run stays `running` (cancel requested, deadline passed, budget spent) while its
            # handler still runs here, and nobody else may claim it. It ends as told when the
            # handler stops, or, if this daemon dies, at the reclaim (claim_verdict).

    def release(self, leases: Sequence[Lease], reason: str) -> int:
        """Hand `leases` back for reclaim, never again to be extended by a beat that read
        them before (the run would not be due for its lease). Returns the runs released."""
        with self._lock:
            self.slots.silence([lease.run_id for lease in leases])
            return self.store.release_runs(leases, self.clock.now(), reason)

    def _beat_idle(self) -> None:
        mono = self.clock.monotonic()
        every = idle_beat(self.config.lease, self.config.heartbeat)
        if not self.idle_beats or mono - self._last_idle < every:
            return
        self._last_idle = mono
        now = self.clock.now()
        self.store.heartbeat(self.owner, [], now + timedelta(seconds=self.config.lease), now)


def _told(
    lost: bool, cancel: bool, deadline: bool, timeout: bool, live: LiveRun
) -> Interrupt | None:
    """What a beat's reply interrupts the handler with, the first that applies."""
    if lost:
        return LeaseLost(live.run_id)
    if cancel:
        return Cancelled("cancel requested by operator")
    if deadline:
        return DeadlineExceededError("the run's deadline passed")
    if timeout:
        return ExecutionTimeoutError(f"execution budget of {live.timeout:g}s used up")
    return None
