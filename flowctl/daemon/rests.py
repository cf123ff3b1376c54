"""Short waits spent in memory by the batch runner's handlers (issue 40).

A sleep or a step's retry due within REST_MAX does not unwind its handler: the run rests
(flowctl.store.resting: its pending call journaled, its lease given up, due to any daemon
when that lease would have ended, or REST_MARGIN after the wake if that is later) and its
slot is freed; the handler's greenlet waits here for the wake, then takes the run back
itself (Store.resume_run) and goes on from where it stood. A wake then costs one batched
UPDATE in the round, not a park, a claim, a replay of the journal and a second handler
start.

Durability is unchanged: the pending call is committed before the wait, as a park's is;
if this daemon dies meanwhile, any daemon claims the run when it is due (if it stops, at
once) and its replay goes on from the journal. Only the batch runner on the system clock
rests (its greenlets wait on real time); elsewhere nothing rests.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from greenlet import greenlet

from flowctl.clock import Clock
from flowctl.daemon.slots import Slots
from flowctl.runtime.live import LiveRun
from flowctl.runtime.suspend import Rester

REST_MAX = 2.0  # seconds: a wait due within this is spent in memory
REST_MARGIN = 1.0  # seconds after the wake before another daemon may take a resting run
REST_MOST = 4096  # handlers resting at once in one runner (each holds its greenlet's stack)
# Resting handlers wake on ticks of this many seconds: wakes that come close together (a
# burst of runs that slept alike) share a round, so one COMMIT, not one each. A wake is
# at most one tick late for it.
REST_TICK = 0.005


class Rests(Rester):
    """The resting handlers of one batch runner: a heap of (monotonic due, greenlet).

    Used on the runner's thread only: `rest` from a handler's greenlet (it switches to
    the runner's), `due`, `next_in` and `stop` from the runner's loop, which resumes each
    greenlet they return with True (its wake) or False (the daemon stops)."""

    def __init__(
        self,
        clock: Clock,
        slots: Slots,
        lease: float,
        *,
        switch: Callable[[], object],
        heartbeat: float,
    ) -> None:
        self._clock = clock
        self._slots = slots
        self._lease = timedelta(seconds=lease)
        # A lease let go for a rest is taken back as it stands while this much of it is
        # left: half a lease and two beats, so a beat extends it in time as any other.
        kept = max(lease / 2, 2 * heartbeat)
        self._kept = None if kept >= lease else timedelta(seconds=kept)
        self._switch = switch  # back to the runner; returns what the runner resumes it with
        self._freed = 0  # slots freed by rests since the runner last looked (`take_freed`)
        self._heap: list[tuple[float, int, greenlet]] = []
        self._order = itertools.count()  # ties in due time never compare greenlets
        self._stopping = False
        # Handlers between may_rest and settled (resting, or writing their rest or resume):
        # a closing runner waits for none to be left (wait_settled).
        self._active = 0
        self._settled = threading.Condition()

    # -- a handler's side (runtime.suspend.Rester) --------------------------------

    def may_rest(self, until: datetime) -> datetime | None:
        if self._stopping or len(self._heap) >= REST_MOST:
            return None
        if (until - self._clock.now()).total_seconds() > REST_MAX:
            return None
        with self._settled:
            self._active += 1
        return until + timedelta(seconds=REST_MARGIN)

    def settled(self) -> None:
        with self._settled:
            self._active -= 1
            if not self._active:
                self._settled.notify_all()

    def rest(self, live: LiveRun, until: datetime) -> bool:
        self._slots.release(live.run_id)
        self._freed += 1
        wait = max(0.0, (until - self._clock.now()).total_seconds())
        due = math.ceil((self._clock.monotonic() + wait) / REST_TICK) * REST_TICK
        heapq.heappush(self._heap, (due, next(self._order), greenlet.getcurrent()))
        return bool(self._switch())

    def lease_until(self) -> datetime:
        return self._clock.now() + self._lease

    def keep_from(self) -> datetime | None:
        return None if self._kept is None else self._clock.now() + self._kept

    def back(self, live: LiveRun) -> bool:
        return self._slots.put(live)

    # -- the runner's side ------------------------------------------------------------

    def take_freed(self) -> bool:
        """Whether a rest freed a slot since the last call: unless the round's own claim
        took runs for them, the runner then wakes the daemon's loop once for them all, to
        claim for the slots, as for runs that ended."""
        freed, self._freed = self._freed, 0
        return freed > 0

    def due(self) -> list[greenlet]:
        """The resting handlers whose wake has come, soonest first."""
        now, out = self._clock.monotonic(), []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[2])
        return out

    def next_in(self) -> float | None:
        """Seconds until the next wake (None: nobody rests)."""
        return None if not self._heap else max(0.0, self._heap[0][0] - self._clock.monotonic())

    def stop(self) -> list[greenlet]:
        """The daemon stops: every resting handler, to be resumed with False (it hands its
        run back, due now to any daemon); nobody rests from now on."""
        self._stopping = True
        out = [g for _, _, g in sorted(self._heap)]
        self._heap = []
        return out

    def wait_settled(self, timeout: float) -> None:
        """Until no handler rests or is on its way to (another thread: the daemon's, as
        its runner closes), at most `timeout` seconds."""
        with self._settled:
            self._settled.wait_for(lambda: not self._active, timeout)


__all__ = ["REST_MARGIN", "REST_MAX", "REST_MOST", "REST_TICK", "Rests"]
