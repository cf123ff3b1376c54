"""The runs a daemon's handlers execute now: one slot of `concurrency` each, what the
heartbeat extends, a stop interrupts and a drain waits for."""

from __future__ import annotations

import threading

from flowctl.clock import Clock
from flowctl.runtime.live import LiveRun
from flowctl.store import Claim


class Slots:
    """Live runs by id, under one lock (the loop, the executors and the heartbeat thread
    all look). A run stays here until its handler stops, whatever it wrote."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._live: dict[str, LiveRun] = {}
        self._silenced: set[str] = set()  # runs whose lease we no longer extend (another's)
        self._lock = threading.Lock()
        self._reserved = 0  # slots a claim in flight counts on (reserve)
        self._keyed: set[str] = set()  # live runs with a concurrency key (issue 37)
        self.solo: str | None = None  # the suspect running alone here, if any
        self.closed = False  # the daemon stops: no resting run comes back (put)

    def take(self, claim: Claim, clock: Clock) -> LiveRun:
        """The claimed run's slot, with the view its engine and heartbeat share."""
        live = LiveRun(claim.lease, clock, claim.run.exec_spent, claim.run.timeout)
        with self._lock:
            self._add(claim, live)
        return live

    def take_open(self, claim: Claim, clock: Clock) -> LiveRun | None:
        """take(), or None once the daemon stops (closed): a claim made on another thread
        than the one that closes (the batch runner's) as the daemon stopped is handed back
        by its claimer, not missed by the hand-back and left to lapse."""
        live = LiveRun(claim.lease, clock, claim.run.exec_spent, claim.run.timeout)
        with self._lock:
            if self.closed:
                return None
            self._add(claim, live)
        return live

    def _add(self, claim: Claim, live: LiveRun) -> None:
        """Under the lock: the run's slot taken."""
        self._live[claim.run.run_id] = live
        if claim.run.flow_key is not None:
            self._keyed.add(claim.run.run_id)

    def put(self, live: LiveRun) -> bool:
        """A run resumed by its resting handler (flowctl.daemon.rests) takes a slot again,
        beyond `concurrency` if none is free: a wake goes before fresh work. False once
        the daemon stops (closed): its handler hands the run back instead."""
        with self._lock:
            if self.closed:
                return False
            self._live[live.run_id] = live
            return True

    def reopen(self) -> None:
        """Served again after a stop (a daemon object run twice, in tests)."""
        with self._lock:
            self.closed = False

    def close(self, *, if_empty: bool = False) -> bool:
        """No resting run takes a slot from now on (the daemon hands back or has drained
        what it holds); `if_empty`: only if no run holds one. Whether it closed."""
        with self._lock:
            if if_empty and self._live:
                return False
            self.closed = True
            return True

    def release(self, run_id: str) -> None:
        """Its handler stopped (here, or in a worker process): the slot is free."""
        with self._lock:
            self._live.pop(run_id, None)
            self._silenced.discard(run_id)
            self._keyed.discard(run_id)
            if self.solo == run_id:
                self.solo = None

    def free(self) -> int:
        with self._lock:
            return self.concurrency - len(self._live) - self._reserved

    def reserve(self, most: int) -> int:
        """Count on up to `most` free slots for a claim about to be made: two claimers of
        one daemon (its loop, its batch runner) never claim the same slot. Give them back
        with `unreserve` once the claims made have taken theirs. Returns how many."""
        with self._lock:
            n = max(0, min(most, self.concurrency - len(self._live) - self._reserved))
            self._reserved += n
            return n

    def unreserve(self, n: int) -> None:
        with self._lock:
            self._reserved -= n

    def keyed(self) -> bool:
        """Whether a run with a concurrency key is live here: its ending gives the key's
        next held run its slot, in the ending's own transaction."""
        with self._lock:
            return bool(self._keyed)

    def holds(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._live

    def get(self, run_id: str) -> LiveRun | None:
        with self._lock:
            return self._live.get(run_id)

    def lives(self) -> list[LiveRun]:
        with self._lock:
            return list(self._live.values())

    def extended(self) -> list[tuple[str, LiveRun]]:
        """The runs whose leases the heartbeat extends: every live one not handed away."""
        with self._lock:
            return [(rid, live) for rid, live in self._live.items() if rid not in self._silenced]

    def silence(self, run_ids: list[str]) -> None:
        """Extend these leases no more: another worker holds them now, or they were released."""
        with self._lock:
            self._silenced.update(run_ids)

    def __len__(self) -> int:
        return len(self._live)
