"""The daemon: a timer wheel of the soonest wake times, claims with leases and fences,
heartbeats, crash recovery and graceful drain.

`Daemon.tick()` runs one iteration synchronously (tests drive it with a FakeClock);
`Daemon.run_forever()` is the real loop with a worker pool and a heartbeat thread.
The same class, restricted to one run, is the worker behind `flowctl run --wait`.
"""

from __future__ import annotations

import heapq
import logging
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flowctl.clock import Clock
from flowctl.context import LeaseLost, LiveRun
from flowctl.engine import Engine, Outcome
from flowctl.errors import Cancelled, DeadlineExceededError, ExecutionTimeoutError
from flowctl.identity import HOST, make_owner, owner_is_dead, proc_start
from flowctl.model import Claim, JournalEntry, RunStatus, from_us, to_us
from flowctl.store import Store

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05  # data_version is read at least this often
WHEEL_SIZE = 512  # soonest wake times kept in memory; the rest stay in the index
JUMP_THRESHOLD = 2.0  # seconds of disagreement between wall and monotonic time


# ---------------------------------------------------------------------------
# The timer wheel


class TimerWheel:
    """A min-heap of the soonest (run_at, run_id) pairs, refilled from the (status, run_at) index.

    At most `size` entries are in memory; `horizon` is the last time loaded, beyond
    which more may wait in the database. A million sleepers cost rows, not memory.
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
            return  # beyond what we hold; the index will bring it back
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


# ---------------------------------------------------------------------------
# The daemon


@dataclass
class DaemonConfig:
    concurrency: int = 4
    lease: float = 15.0
    heartbeat: float = 1.0
    grace: float = 30.0
    claim_batch: int = 64


class Daemon:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        config: DaemonConfig | None = None,
        *,
        engine: Engine | None = None,
        only_run_id: str | None = None,
        on_checkpoint: Callable[[JournalEntry], None] | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config or DaemonConfig()
        if self.config.heartbeat >= self.config.lease:
            from flowctl.errors import UsageError

            raise UsageError(
                f"heartbeat ({self.config.heartbeat:g}s) must be shorter than the lease"
                f" ({self.config.lease:g}s), or leases lapse while handlers run"
            )
        self.engine = engine or Engine(store, clock)
        self.owner = make_owner()
        self.only_run_id = only_run_id
        self.on_checkpoint = on_checkpoint
        self.on_outcome = on_outcome
        self.wheel = TimerWheel()
        self._live: dict[str, LiveRun] = {}
        self._silenced: set[str] = set()  # interrupted runs whose lease we let lapse
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._hard_stop = False
        self._data_version = -1
        self._last_reap = 0.0
        self._last_wall: datetime | None = None
        self._last_mono = 0.0
        self._last_boot = 0.0
        self.executed = 0

    # -- one iteration, for tests and for the loop ------------------------------

    def tick(self) -> int:
        """Claim every due run and execute them here, synchronously. Returns runs executed."""
        self._reap_dead_owners(force=True)
        done = 0
        while True:
            now = self.clock.now()
            claims = self._claim(now, self.config.concurrency)
            if not claims:
                return done
            for claim in claims:
                self._execute(claim)
                done += 1

    # -- the real loop -------------------------------------------------------

    def run_forever(
        self,
        *,
        until_idle: bool = False,
        stop_when: Callable[[], bool] | None = None,
        install_signals: bool = False,
        pool: ThreadPoolExecutor | None = None,
    ) -> int:
        """Serve until stopped (SIGTERM/SIGINT drain) or idle. Returns the exit code."""
        if install_signals:
            self._install_signals()
        if self.only_run_id is None:
            self.store.register_daemon(
                self.owner,
                HOST,
                os.getpid(),
                proc_start(os.getpid()),
                self.clock.now(),
                {"concurrency": self.config.concurrency, "lease": self.config.lease},
            )
        executor = pool or ThreadPoolExecutor(
            max_workers=self.config.concurrency, thread_name_prefix="flowctl-worker"
        )
        hb = threading.Thread(target=self._heartbeat_loop, name="flowctl-heartbeat", daemon=True)
        hb.start()
        drain_deadline: float | None = None
        try:
            self._reap_dead_owners(force=True)
            self.wheel.refill(self.store)
            self._data_version = self.store.data_version()
            while True:
                if self._hard_stop:
                    return 1
                now = self.clock.now()
                self._watch_clock(now)
                if self._stopping:
                    if drain_deadline is None:
                        drain_deadline = self.clock.monotonic() + self.config.grace
                        log.info("draining: %d run(s) still running", len(self._live))
                    if not self._live:
                        return 0
                    if self.clock.monotonic() >= drain_deadline:
                        log.warning(
                            "grace period over; %d run(s) left to be reclaimed", len(self._live)
                        )
                        return 0
                    self.clock.wait(self._wake, POLL_INTERVAL)
                    self._wake.clear()
                    continue
                if stop_when is not None and stop_when():
                    return 0
                dv = self.store.data_version()
                if dv != self._data_version or self.wheel.needs_refill():
                    self._data_version = dv
                    self.wheel.refill(self.store)
                self._reap_dead_owners()
                free = self.config.concurrency - len(self._live)
                next_at = self.wheel.next_at()
                now_us = to_us(now)
                claimed_any = False
                if free > 0 and next_at is not None and next_at <= now_us:
                    claims = self._claim(now, min(free, self.config.claim_batch))
                    claimed_any = bool(claims)
                    for claim in claims:
                        with self._lock:
                            live = LiveRun(
                                claim.run.run_id,
                                claim.fence,
                                self.clock,
                                claim.run.exec_spent,
                                claim.run.timeout,
                            )
                            self._live[claim.run.run_id] = live
                        executor.submit(self._execute, claim, live)
                    if not claims:
                        self.wheel.pop_due(now_us)
                        self.wheel.refill(self.store)
                if until_idle and not claimed_any and not self._live:
                    next_at = self.wheel.next_at()
                    if next_at is None or next_at > to_us(self.clock.now()):
                        return 0
                timeout = POLL_INTERVAL
                next_at = self.wheel.next_at()
                if next_at is not None and free > 0:
                    timeout = max(0.0, min(timeout, (next_at - to_us(self.clock.now())) / 1e6))
                if claimed_any and len(self._live) < self.config.concurrency:
                    timeout = 0.0
                if timeout > 0:
                    self.clock.wait(self._wake, timeout)
                self._wake.clear()
        finally:
            self._stopping = True
            if not self._hard_stop:
                executor.shutdown(wait=not self._live)
            if self.only_run_id is None:
                try:
                    self.store.unregister_daemon(self.owner)
                except Exception:
                    pass

    def stop(self, *, drain: bool = True) -> None:
        if self._stopping and drain:
            self._hard_stop = True
        self._stopping = True
        if not drain:
            self._hard_stop = True
        self._wake.set()

    def _install_signals(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            if self._stopping:
                log.warning("second signal: exiting now; running runs will be reclaimed")
                os._exit(128 + signum)
            log.info("signal %s: draining (send again to exit at once)", signum)
            self.stop(drain=True)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # -- internals ---------------------------------------------------------------

    def _claim(self, now: datetime, limit: int) -> list[Claim]:
        lease_until = now + timedelta(seconds=self.config.lease)
        claims, ended = self.store.claim_due(
            self.owner, now, lease_until, limit, run_id=self.only_run_id
        )
        if ended and self.on_outcome is not None:
            for rid in ended:
                run = self.store.get_run(rid)
                self.on_outcome(Outcome(rid, run.status, error=run.error))
        return claims

    def _execute(self, claim: Claim, live: LiveRun | None = None) -> Outcome:
        run_id = claim.run.run_id
        if live is None:
            live = LiveRun(run_id, claim.fence, self.clock, claim.run.exec_spent, claim.run.timeout)
            with self._lock:
                self._live[run_id] = live
        try:
            outcome = self.engine.execute(claim, live, on_checkpoint=self.on_checkpoint)
        except BaseException as e:  # a bug in the engine must not kill the worker thread silently
            log.exception("run %s: engine error", run_id)
            outcome = Outcome(run_id, None, error={"type": type(e).__name__, "message": str(e)})
        finally:
            with self._lock:
                self._live.pop(run_id, None)
                self._silenced.discard(run_id)
        self.executed += 1
        if outcome.run_at is not None and outcome.status in (
            RunStatus.SLEEPING,
            RunStatus.WAITING,
            RunStatus.QUEUED,
        ):
            self.wheel.push(outcome.run_at, run_id)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        self._wake.set()
        return outcome

    def _heartbeat_loop(self) -> None:
        stop = threading.Event()
        while not self._hard_stop:
            self.clock.wait(stop, self.config.heartbeat)
            if self._hard_stop:
                return
            if self._stopping and not self._live:
                return
            try:
                self.heartbeat_once()
            except Exception:
                log.exception("heartbeat failed")

    def heartbeat_once(self) -> None:
        """Extend our leases and pass cancellations, deadlines and timeouts to live handlers."""
        with self._lock:
            held = [(rid, live) for rid, live in self._live.items() if rid not in self._silenced]
        if not held:
            return
        now = self.clock.now()
        replies = self.store.heartbeat(
            self.owner,
            [(rid, live.fence, live.spent()) for rid, live in held],
            now + timedelta(seconds=self.config.lease),
            now,
        )
        lives = dict(held)
        for reply in replies:
            live = lives[reply.run_id]
            exc: BaseException | None = None
            if reply.lost:
                live.lost = True
                exc = LeaseLost(reply.run_id)
            elif reply.cancel:
                exc = Cancelled("cancel requested by operator")
            elif reply.deadline:
                exc = DeadlineExceededError("the run's deadline passed")
            elif reply.timeout:
                exc = ExecutionTimeoutError(f"execution budget of {live.timeout:g}s used up")
            if exc is not None:
                live.interrupt(exc)  # type: ignore[arg-type]
                with self._lock:
                    # Stop extending its lease: a handler that ignores the interrupt is cleaned up
                    # by recovery once the lease lapses.
                    self._silenced.add(reply.run_id)

    def _reap_dead_owners(self, *, force: bool = False) -> None:
        mono = self.clock.monotonic()
        if not force and mono - self._last_reap < 1.0:
            return
        self._last_reap = mono
        now = self.clock.now()
        for owner in self.store.running_owners():
            if owner != self.owner and owner_is_dead(owner):
                n = self.store.expire_owner(owner, now)
                if n:
                    log.info("owner %s is gone: %d run(s) reclaimable now", owner, n)
                    self._data_version = -1

    def _watch_clock(self, now: datetime) -> None:
        """Detect wall-clock jumps and host suspend/resume; note them on affected runs."""
        mono = self.clock.monotonic()
        boot = _boottime(self.clock)
        if self._last_wall is None:
            self._last_wall, self._last_mono, self._last_boot = now, mono, boot
            return
        wall_delta = (now - self._last_wall).total_seconds()
        mono_delta = mono - self._last_mono
        boot_delta = boot - self._last_boot
        prev_wall = self._last_wall
        self._last_wall, self._last_mono, self._last_boot = now, mono, boot
        suspended = boot_delta - mono_delta
        jump = wall_delta - boot_delta
        if suspended > JUMP_THRESHOLD:
            self._note_gap("host resumed", prev_wall, now, {"suspended_s": round(suspended, 3)})
        elif abs(jump) > JUMP_THRESHOLD:
            self._note_gap("clock jumped", prev_wall, now, {"jump_s": round(jump, 3)})

    def _note_gap(
        self, type_: str, before: datetime, after: datetime, data: dict[str, Any]
    ) -> None:
        lo, hi = (before, after) if before <= after else (after, before)
        affected = [rid for at, rid in self.store.next_due(10_000) if to_us(lo) <= at <= to_us(hi)][
            :1000
        ]
        data = {**data, "from": before.isoformat(), "to": after.isoformat()}
        log.warning("%s: %s (%d run(s) affected)", type_, data, len(affected))
        if affected:
            self.store.add_events(affected, type_, data, after)


def _boottime(clock: Clock) -> float:
    fn = getattr(clock, "boottime", None)
    return float(fn()) if callable(fn) else clock.monotonic()


def wall(at_us: int) -> datetime:
    return from_us(at_us)


def drive_run(
    store: Store,
    clock: Clock,
    run_id: str,
    config: DaemonConfig | None = None,
    *,
    wait: bool,
    on_checkpoint: Callable[[JournalEntry], None] | None = None,
    engine: Engine | None = None,
    timeout: float | None = None,
) -> Any:
    """Act as a worker for one run (`flowctl run`, `Client.run`) under the usual lease rules.

    Runs it now in this thread; returns when it ends, or — unless `wait` — when it
    suspends. With `wait`, it waits through sleeps (noticing signals and wakes made by
    other processes) and resumes the run itself, unless a daemon gets there first.
    """
    worker = Daemon(
        store,
        clock,
        config or DaemonConfig(concurrency=1),
        engine=engine,
        only_run_id=run_id,
        on_checkpoint=on_checkpoint,
    )
    stop = threading.Event()
    hb = threading.Thread(target=_heartbeat_until, args=(worker, stop), daemon=True)
    hb.start()
    idle = threading.Event()
    give_up = None if timeout is None else clock.monotonic() + timeout
    try:
        while True:
            run = store.get_run(run_id)
            if run.status.is_terminal:
                return run
            now = clock.now()
            due = run.run_at is not None and run.run_at <= now
            if not due:
                if not wait:
                    return run
                if give_up is not None and clock.monotonic() >= give_up:
                    return run
                pause = POLL_INTERVAL
                if run.run_at is not None and run.status is not RunStatus.RUNNING:
                    pause = max(0.0, min(pause, (run.run_at - now).total_seconds()))
                clock.wait(idle, pause)
                continue
            claims = worker._claim(now, 1)
            for claim in claims:
                worker._execute(claim)
            if not claims:
                clock.wait(idle, POLL_INTERVAL)
    finally:
        stop.set()


def _heartbeat_until(worker: Daemon, stop: threading.Event) -> None:
    while not worker.clock.wait(stop, worker.config.heartbeat):
        try:
            worker.heartbeat_once()
        except Exception:
            log.exception("heartbeat failed")
