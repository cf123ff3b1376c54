"""The daemon's timer wheel: the soonest wake times in memory, the rest in the database.

Pure: it holds (run_at in microseconds, run_id) pairs and reads only `Store.next_due`, so
it is tested without a daemon. The daemon owns one and guards it with its lock.
"""

from __future__ import annotations

import heapq
from datetime import datetime
from typing import TYPE_CHECKING

from flowctl.model import to_us

if TYPE_CHECKING:
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
