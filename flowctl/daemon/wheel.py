"""The daemon's timer wheel: the soonest wake times in memory, the rest in the database.

`TimerWheel` is pure: it holds (run_at in microseconds, run_id) pairs and reads only
`Store.next_due`, so it is tested without a daemon. `Timers` is the daemon's, kept true:
when to refill it, and what an own write pushes onto it.
"""

from __future__ import annotations

import heapq
import threading
from datetime import datetime, timedelta
from enum import Enum

from flowctl.clock import Clock
from flowctl.model import Run, RunStatus, from_us, to_us
from flowctl.store import Store

WHEEL_SIZE = 512  # soonest wake times kept in memory; the rest stay in the index


class TimerWheel:
    """A min-heap of the soonest (run_at, run_id) pairs, refilled from the (status, run_at) index.

    At most `size` entries are loaded at a time; `horizon` is the last time loaded,
    beyond which more may wait in the database. A million sleepers cost rows, not
    memory. Not thread-safe: the daemon guards it with a lock.
    """

    def __init__(self, size: int = WHEEL_SIZE) -> None:
        self.size = size
        self._heap: list[tuple[int, str]] = []
        self.horizon: int | None = None  # None: everything claimable is in memory

    def refill(self, store: Store) -> None:
        rows = store.next_due(self.size)
        self._heap = list(rows)
        heapq.heapify(self._heap)
        self.horizon = rows[-1][0] if len(rows) >= self.size else None

    def push(self, at: datetime, run_id: str) -> None:
        at_us = to_us(at)
        if self.horizon is not None and at_us > self.horizon:
            return  # beyond what we hold; the index brings it back at the next refill
        heapq.heappush(self._heap, (at_us, run_id))

    def next_at(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_us: int) -> int:
        n = 0
        while self._heap and self._heap[0][0] <= now_us:
            heapq.heappop(self._heap)
            n += 1
        return n

    def needs_refill(self) -> bool:
        return not self._heap and self.horizon is not None

    def __len__(self) -> int:
        return len(self._heap)


class Refill(Enum):
    """What a look at the store found (Timers.refresh)."""

    NONE = 0  # nothing says the wheel is stale
    OURS = 1  # our own write, a dry wheel or the refresh interval: refilled
    THEIRS = 2  # another process wrote (data_version moved): refilled


class Timers:
    """The daemon's wheel, kept true, under a lock (executors push after their writes).

    Refilled from the store's index when another process wrote (data_version), when an
    own write may have made a run due (`dirty`: our own commits do not move data_version),
    when it ran dry with more in the index, and on a store that asks for it every refresh
    interval (PostgreSQL, where data_version cannot see other hosts).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.wheel = TimerWheel()
        self.dirty = False  # our own write may have made a run due: refill
        # The batch runner claims in its round (Daemon.claim_in_round): a run of a key
        # that ended sets `released` for that claim rather than waking the loop's.
        self.hand_off = False
        self._released = False
        self._lock = threading.Lock()
        self._data_version = -1
        self._refresh, self._refresh_at = store.refresh_interval, from_us(0)

    def refresh(self, now: datetime) -> Refill:
        """Refill if anything says the wheel is stale; says what it found."""
        dv = self.store.data_version()
        stale = self._refresh is not None and now >= self._refresh_at
        if not (dv != self._data_version or self.dirty or self.wheel.needs_refill() or stale):
            return Refill.NONE
        changed = dv != self._data_version
        self._data_version, self._refresh_at = dv, now + timedelta(seconds=self._refresh or 0)
        self.refill()
        return Refill.THEIRS if changed else Refill.OURS

    def refill(self) -> None:
        self.dirty = False
        with self._lock:
            self.wheel.refill(self.store)

    def next_at(self) -> int | None:
        with self._lock:
            return self.wheel.next_at()

    def pop_due(self, now_us: int) -> None:
        with self._lock:
            self.wheel.pop_due(now_us)

    def take_released(self) -> bool:
        """Whether a run of a key ended since the last look (hand_off): the key's next
        held run is due now."""
        with self._lock:
            released, self._released = self._released, False
            return released

    def settled(self, run: Run, status: RunStatus, run_at: datetime | None, clock: Clock) -> None:
        """After our own write left `run` in `status` (due at the store's `run_at`): push
        what it made due, or mark the wheel for a refill where the store knows more."""
        with self._lock:
            if run_at is not None and not status.is_terminal:
                self.wheel.push(run_at, run.run_id)
            if status.is_terminal and run.parent_run_id is not None:
                self.wheel.push(clock.now(), run.parent_run_id)
            if run.flow_key is not None:
                # It left `running`: the next run held behind its key is due now (the
                # store's trigger made it so); a claim now finds it, no refill needed.
                if self.hand_off:
                    self._released = True
                else:
                    self.wheel.push(clock.now(), run.run_id)
        if status.is_terminal and run.schedule is not None:
            self.dirty = True  # overlap=queue: its end may have released the next held run
        if status is RunStatus.WAITING and run_at is None:
            self.dirty = True  # it may have started a child run, due now
