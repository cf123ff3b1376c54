"""The daemon: a timer wheel (flowctl.wheel) of the soonest wake times, claims with leases and fences,
heartbeats, crash recovery and graceful drain.

`Daemon.tick()` runs one iteration synchronously (tests drive it with a FakeClock);
`Daemon.run_forever()` is the real loop with a worker pool and a heartbeat thread.
The same class, restricted to one run, is the worker behind `flowctl run --wait`
(flowctl.foreground drives it).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from flowctl.clock import Clock, SystemClock
from flowctl.daemon_watch import Watches
from flowctl.errors import (
    Cancelled,
    DatabaseError,
    DatabaseGoneError,
    DeadlineExceededError,
    DiskFullError,
    ExecutionTimeoutError,
    UsageError,
)
from flowctl.ids import HOST, make_owner, owner_is_dead, proc_start
from flowctl.limits import ROOM_RESERVE
from flowctl.model import JournalEntry, RunStatus, from_us, to_us
from flowctl.retention import RetentionPass
from flowctl.runtime.context import LeaseLost, LiveRun
from flowctl.runtime.engine import Engine, Outcome
from flowctl.schedule.firing import Scheduler
from flowctl.store import Claim, Store
from flowctl.wheel import TimerWheel

if TYPE_CHECKING:
    from flowctl.batch import BatchRunner
    from flowctl.workers.engines import Engines

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05  # data_version is read at least this often
UNWIND_WAIT = 0.5  # after the grace period: time for interrupted handlers to stop, then exit
REAP_EVERY = 1.0  # seconds between checks for dead owners holding leases
WATCH_FILE_EVERY = 1.0  # seconds between checks that the database file is still at its path
FULL_RETRY = 1.0  # seconds between retries while the disk (or the database) is full
IDLE_BEAT = 10.0  # an idle daemon's liveness write (seen_at); ids.REMOTE_STALE is 60 s


class DaemonStopping(LeaseLost):
    """Tells a live handler the daemon is going away: stop and leave the run to be reclaimed.

    A LeaseLost, so the engine abandons the run without writing an outcome: stopping a
    daemon never invents a timeout, deadline or cancellation.
    """

    reason = "daemon stopping"


# ---------------------------------------------------------------------------
# The daemon


@dataclass
class DaemonConfig:
    concurrency: int = 4
    lease: float = 15.0
    heartbeat: float = 1.0
    grace: float = 30.0
    claim_batch: int = 64
    reserve: int = ROOM_RESERVE  # free bytes kept for what is in flight (see _short_of_room)
    workers: int = 1  # processes executing runs, each a whole engine (workers/engines.py)
    batch: bool = True  # on SQLite: greenlets on one thread (flowctl.batch)
    retention: dict[RunStatus, timedelta] = field(default_factory=dict)  # see RetentionPass


class Daemon(Watches):
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
        on_claim: Callable[[Claim], None] | None = None,
        worker_of: int | None = None,
    ) -> None:
        """`worker_of`: the pid of the daemon that started this one as a worker (--workers)."""
        self.store = store
        self.clock = clock
        self.config = config or DaemonConfig()
        for name in ("lease", "heartbeat"):
            if getattr(self.config, name) <= 0:
                raise UsageError(
                    f"{name} must be a positive duration, got {getattr(self.config, name):g}s"
                    f" (--{name} or {name} in flowctl.toml)"
                )
        if self.config.heartbeat >= self.config.lease:
            raise UsageError(
                f"heartbeat ({self.config.heartbeat:g}s) must be shorter than the lease"
                f" ({self.config.lease:g}s), or leases lapse while handlers run"
            )
        if self.config.concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {self.config.concurrency}")
        if self.config.workers < 1:
            raise UsageError(f"workers must be at least 1, got {self.config.workers}")
        if self.config.workers > 1 and only_run_id is None and not isinstance(clock, SystemClock):
            # Worker processes read the system clock: they would not see this one's time.
            raise UsageError(
                f"workers {self.config.workers} needs the system clock (worker processes keep"
                " their own time); give workers 1 to run with an injected clock"
            )
        self.engine = engine or Engine(store, clock)
        self.owner = make_owner()
        self.only_run_id = only_run_id
        self.worker_of = worker_of
        self.on_checkpoint = on_checkpoint
        self.on_outcome = on_outcome
        self.on_claim = on_claim  # told of each claim before its handler runs (foreground)
        self.wheel = TimerWheel()
        self._wheel_lock = threading.Lock()
        self._dirty = False  # our own write may have made a run due: refill the wheel
        self._live: dict[str, LiveRun] = {}
        self._silenced: set[str] = set()  # runs whose lease we no longer extend (lost to another)
        self._lock = threading.Lock()
        self._beat_lock = threading.Lock()  # a heartbeat's write and a release never interleave
        self._wake = threading.Event()
        self.serving = threading.Event()  # set once run_forever's loop is under way
        self._jobs: queue.SimpleQueue[tuple[Claim, LiveRun] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._engines: Engines | None = None  # the other worker processes (--workers N > 1)
        self._runner: BatchRunner | None = None  # greenlets on one thread (flowctl.batch)
        self._stopping = False
        self._solo: str | None = None  # the suspect running alone here, if any
        self._suspects = False  # a suspect is due: claim nothing new until it has run alone
        self._stop_asked: float | None = None  # monotonic time of stop(): the grace counts from it
        self._hard_stop = False
        # Set when run_forever returns, so its heartbeat thread ends with it (on a FakeClock
        # nobody advances time after a test's daemon stops: a timed wait alone never ends).
        self._served = threading.Event()
        self._data_version = -1
        self._refresh, self._refresh_at = getattr(store, "refresh_interval", None), from_us(0)
        self._last_reap = float("-inf")
        self._last_idle_beat = 0.0
        self._retention = RetentionPass(self.config.retention if only_run_id is None else {})
        self._last_file_check = float("-inf")
        self._db_gone = False  # the file was deleted or replaced: write nothing more
        self._full = False  # the last pass failed on a full disk
        self._short = False  # free space is under the reserve: no new run starts
        self._last_room_check = float("-inf")
        self._last_wall: datetime | None = None
        self._last_mono = 0.0
        self._last_boot = 0.0
        self.executed = 0
        # Schedules fire from the daemon, never from a one-run worker (`flowctl run --wait`).
        self.scheduler = Scheduler(store, clock) if only_run_id is None else None
        self._next_fire: datetime | None = None  # soonest schedule fire not yet handled

    # -- the loop body -------------------------------------------------------

    def tick(self) -> int:
        """The serving loop's body: refill the wheel if another process wrote, fire due
        schedules, reap dead owners, claim what the wheel says is due and dispatch it,
        again while slots are free and claims succeed. Returns the runs claimed.

        `run_forever()` is this, repeated, plus waiting. Without a worker pool (tests,
        `flowctl.testing`) claimed runs execute here, synchronously, so one call runs
        everything due at the current time.
        """
        claimed = 0
        with self.store.own_writes():
            while True:
                n = self._pass()
                claimed += n
                if not n or self._free() <= 0:
                    return claimed

    def _pass(self) -> int:
        self._watch_db_file()
        now = self.clock.now()
        self._watch_clock(now)
        dv, stale = self.store.data_version(), self._refresh is not None and now >= self._refresh_at
        if dv != self._data_version or self._dirty or self.wheel.needs_refill() or stale:
            changed = dv != self._data_version
            self._data_version, self._refresh_at = dv, now + timedelta(seconds=self._refresh or 0)
            self._refill()
            if changed and self._live:
                self._pass_cancels()
            if self.scheduler is not None:  # `schedule add/pause/resume` by another process
                self._next_fire = self.scheduler.next_fire()
        if self.scheduler is not None and self._next_fire is not None and self._next_fire <= now:
            self._next_fire = self.scheduler.tick(now)
            self._refill()  # the runs it created are our own writes: data_version is silent
        self._reap_dead_owners()
        self._retention.run(self.store, self.clock)
        if self._dirty:
            self._refill()
        if self._solo is not None:
            return 0  # a suspect runs alone here: nothing else until its handler stops
        if self._short_of_room():
            return 0
        free = self._free()
        due_at = self._next_at()
        now_us = to_us(now)
        due = due_at is not None and due_at <= now_us
        if free == self.config.concurrency and (
            self._suspects or (due and self.store.suspect_due(now))
        ):
            suspect = self._claim_suspect(now)
            if suspect is not None:
                self._solo = suspect.run.run_id
                self._dispatch(suspect)
                return 1
            self._suspects = False
        if self._suspects:
            return 0  # claim nothing new: once what runs has stopped, the suspect runs alone
        if free <= 0 or not due:
            return 0
        asked = min(free, self.config.claim_batch)
        claims = self._claim(now, asked)
        if len(claims) < asked:
            # Everything due at `now` is claimed (or ended, or held as a suspect): drop those
            # entries. A held suspect is remembered here instead.
            with self._wheel_lock:
                self.wheel.pop_due(now_us)
            if self.store.suspect_due(now):
                self._suspects = True
        for claim in claims:
            self._dispatch(claim)
        return len(claims)

    def holds(self, run_id: str) -> bool:
        """True while one of this daemon's workers executes `run_id`: until it lets go, the
        heartbeat keeps extending that run's lease."""
        with self._lock:
            return run_id in self._live

    def _free(self) -> int:
        with self._lock:
            return self.config.concurrency - len(self._live)

    # -- the real loop -------------------------------------------------------

    def run_forever(self, *, until_idle: bool = False, install_signals: bool = False) -> int:
        """Serve until stopped or, with `until_idle`, until nothing is running or due.

        Returns the exit code: 0 after a drain (or idle), 1 after a second stop.
        """
        if install_signals:
            self._install_signals()
        while True:
            try:
                self.store.register_daemon(
                    self.owner,
                    HOST,
                    os.getpid(),
                    proc_start(os.getpid()),
                    self.clock.now(),
                    {
                        "concurrency": self.config.concurrency,
                        "lease": self.config.lease,
                        "workers": self.config.workers,
                        **({"worker_of": self.worker_of} if self.worker_of else {}),
                    },
                )
                break
            except DiskFullError as e:
                self._wait_for_room(e)
                if self._stopping:
                    return 0
        hb = threading.Thread(target=self._heartbeat_loop, name="flowctl-heartbeat", daemon=True)
        if self.config.workers > 1 and self.only_run_id is None:
            hb.start()
            try:
                return self._supervise(until_idle)
            finally:
                self._end(hb)
        # Concurrent workers share one connection: let their commits share one fsync.
        self.store.set_group_commit(self.config.concurrency > 1)
        if hasattr(type(self.store), "take_turns"):  # SQLite: alternate with other daemons
            self.store.take_turns()  # type: ignore[attr-defined]
        if self.batched():
            from flowctl.batch import BatchRunner

            self._runner = BatchRunner(
                self.store,
                self._execute,
                ended=self._wake.set,
                failed=self._runner_failed,
            )
            self._runner.start()
        else:
            for i in range(self.config.concurrency):
                t = threading.Thread(target=self._worker, name=f"flowctl-worker-{i}", daemon=True)
                t.start()
                self._workers.append(t)
        hb.start()
        try:
            with self.store.own_writes():
                return self._serve(until_idle)
        finally:
            self._stopping = True
            for _ in self._workers:
                self._jobs.put(None)
            if self._runner is not None:
                self._runner.close()
            self.store.set_group_commit(False)
            self._end(hb)

    def _end(self, hb: threading.Thread) -> None:
        """The loop is over: the heartbeat ends with it, and the registration goes."""
        self._served.set()
        hb.join(timeout=5)
        try:
            if not self._db_gone:  # never write to a file that is no longer there
                self.store.unregister_daemon(self.owner, self.clock.now())
        except Exception:
            log.exception("could not unregister the daemon")

    def _supervise(self, until_idle: bool) -> int:
        """--workers N: N worker processes execute runs (flowctl.workers.engines); this one
        keeps them going, turns a stop into theirs, and waits for them."""
        from flowctl.workers.engines import Engines

        self._engines = engines = Engines(self, self.config.workers, until_idle=until_idle)
        engines.start()
        self.serving.set()
        gone: DatabaseGoneError | None = None
        try:
            while not self._stopping and not (until_idle and engines.done()):
                self._watch_db_file()  # as each worker does: the same one line, exit 1
                self.clock.wait_until(self._wake, self.clock.monotonic() + POLL_INTERVAL)
                self._wake.clear()
        except DatabaseGoneError as e:
            gone = e
        self._stopping = True
        if self._hard_stop:
            engines.stop()
        engines.close()
        problem = None if gone is not None else self.store.file_replaced()
        if problem is not None:  # a worker saw it first (or could not open the file)
            self._db_gone = True
            gone = self._gone(problem)
        if gone is not None:
            raise gone
        if engines.fatal is not None:
            log.error("%s: stopped", engines.fatal)
        return 1 if self._hard_stop or engines.fatal is not None else 0

    def _serve(self, until_idle: bool) -> int:
        self._reap_dead_owners(force=True)
        drain_deadline: float | None = None
        while True:
            if self._hard_stop:
                self._abandon("the daemon was stopped", until=self.clock.monotonic())
                return 1
            if self._stopping:
                if drain_deadline is None:
                    # From the stop request (stop()), or from now (a signal, seen within a poll).
                    asked = self._stop_asked
                    drain_deadline = (
                        asked if asked is not None else self.clock.monotonic()
                    ) + self.config.grace
                    log.info("draining: %d run(s) still running", len(self._live))
                if not self._live:
                    return 0
                if self.clock.monotonic() >= drain_deadline:
                    log.warning(
                        "grace period of %gs over; %d run(s) left to be reclaimed",
                        self.config.grace,
                        len(self._live),
                    )
                    # Exit within the grace plus UNWIND_WAIT, however late this loop looked.
                    self._abandon("grace period over", until=drain_deadline + UNWIND_WAIT)
                    return 0
                self.clock.wait_until(
                    self._wake, min(self.clock.monotonic() + POLL_INTERVAL, drain_deadline)
                )
                self._wake.clear()
                continue
            try:
                claimed = self.tick()
            except DiskFullError as e:
                self._wait_for_room(e)
                continue
            if self._full:
                self._full = False
                log.warning("the database has room again: serving")
            self.serving.set()  # clocks, data_version and the wheel all read at least once
            if until_idle and not claimed and not self._live and not self._dirty:
                next_at = self._next_at()
                if next_at is None or next_at > to_us(self.clock.now()):
                    return 0
            self._wait_for_work()

    def _wait_for_room(self, error: DiskFullError) -> None:
        """A full disk: say so once, wait, and let the caller retry. Nothing committed is
        lost (the failed transaction rolled back whole), so waiting is all there is to do."""
        if not self._full:
            self._full = True
            log.warning("%s; nothing committed is lost; retrying every %gs", error, FULL_RETRY)
        self.clock.wait(self._wake, FULL_RETRY)
        self._wake.clear()

    def _watch_db_file(self) -> None:
        """Stop serving a database file that is no longer at its path (deleted, or replaced
        by a restore or a copy): every later write would go to the void while new runs wait
        in the file now at the path. A stat, once a second; raises DatabaseGoneError."""
        mono = self.clock.monotonic()
        if mono - self._last_file_check < WATCH_FILE_EVERY:
            return
        self._last_file_check = mono
        problem = self.store.file_replaced()
        if problem is None:
            return
        self._db_gone = True
        self._hard_stop = True  # no heartbeat, release or unregister: they would write to it
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            live.interrupt(DaemonStopping("the database file is gone"))
        raise self._gone(problem)

    @staticmethod
    def _gone(problem: str) -> DatabaseGoneError:
        return DatabaseGoneError(
            f"{problem} while the daemon served it; stopping without writing to it again:"
            " start the daemon again to serve the file now at that path"
        )

    def _wait_for_work(self) -> None:
        """Until the next due time, a schedule fire, a worker finishing (the wake event) or
        the next data_version read, whichever is first."""
        start = self.clock.monotonic()  # first: time that passes before the wait shortens it
        timeout = POLL_INTERVAL
        next_at = self._next_at()
        may_claim = self._free() > 0 and self._solo is None and not (self._suspects or self._short)
        if next_at is not None and may_claim:
            timeout = min(timeout, (next_at - to_us(self.clock.now())) / 1e6)
        if self._next_fire is not None:
            timeout = min(timeout, (self._next_fire - self.clock.now()).total_seconds())
        if timeout > 0:
            self.clock.wait_until(self._wake, start + timeout)
        self._wake.clear()

    def stop(self, *, drain: bool = True) -> None:
        """Drain (stop claiming, let running handlers finish); a second call stops at once."""
        if self._stopping or not drain:
            self._hard_stop = True
        if self._stop_asked is None:
            self._stop_asked = self.clock.monotonic()
        self._stopping = True
        self._wake.set()

    def _install_signals(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            if self._stopping:
                log.warning("second signal: exiting now; running runs will be reclaimed")
                os._exit(128 + signum)
            log.info("signal %s: draining (send again to exit at once)", signum)
            # Only a flag: the loop looks at it within POLL_INTERVAL. (Setting an Event from
            # a signal handler can deadlock on the Event's own lock.)
            self._stopping = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # -- internals ---------------------------------------------------------------

    def _next_at(self) -> int | None:
        with self._wheel_lock:
            return self.wheel.next_at()

    def _refill(self) -> None:
        self._dirty = False
        with self._wheel_lock:
            self.wheel.refill(self.store)

    def _claim(self, now: datetime, limit: int) -> list[Claim]:
        lease_until = now + timedelta(seconds=self.config.lease)
        claims, ended = self.store.claim_due(
            self.owner,
            now,
            lease_until,
            limit,
            run_id=self.only_run_id,
            alone=self.only_run_id is not None,  # a one-run worker runs it alone
        )
        self._ended(ended)
        return claims

    def _claim_suspect(self, now: datetime) -> Claim | None:
        """Claim one suspect to run alone: a crash now is charged to it, and to it only."""
        lease_until = now + timedelta(seconds=self.config.lease)
        claim, ended = self.store.claim_suspect(self.owner, now, lease_until)
        self._ended(ended)
        if claim is not None:
            log.info(
                "run %s: its worker died under it; running it alone (%d crash(es) charged)",
                claim.run.run_id,
                claim.run.crashes,
            )
        return claim

    def _ended(self, ended: list[str]) -> None:
        if ended:
            self._dirty = True  # an ended child may have woken its parent
            if self.on_outcome is not None:
                for rid in ended:
                    run = self.store.get_run(rid)
                    self.on_outcome(Outcome(rid, run.status, error=run.error))

    def _dispatch(self, claim: Claim) -> None:
        run = claim.run
        live = LiveRun(claim.lease, self.clock, run.exec_spent, run.timeout)
        with self._lock:
            self._live[run.run_id] = live
        if self._runner is not None:
            self._runner.submit(claim, live)
        elif self._workers:
            self._jobs.put((claim, live))
        else:  # no worker pool (tests, flowctl.testing): the loop body executes it here
            self._execute(claim, live)

    def _runner_failed(self, error: BaseException) -> None:
        """The batch runner broke (a bug, logged there): its handlers will never end, so
        stop now; the stop hands their runs back for reclaim (_abandon)."""
        self.stop(drain=False)

    def batched(self) -> bool:
        """Whether handlers run as greenlets on one thread (flowctl.batch) rather than on
        `concurrency` threads: on a store whose round of writes can be one COMMIT (SQLite),
        when asked for (`batch`), and not for a one-run worker (`run --wait`)."""
        return (
            self.config.batch
            and self.only_run_id is None
            and self.config.concurrency > 1
            and hasattr(type(self.store), "set_parker")  # the class's: never a proxy's guess
        )

    def _worker(self) -> None:
        with self.store.own_writes():
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                self._execute(*job)

    def _execute(self, claim: Claim, live: LiveRun | None = None) -> Outcome:
        run_id = claim.run.run_id
        if live is None:
            live = LiveRun(claim.lease, self.clock, claim.run.exec_spent, claim.run.timeout)
            with self._lock:
                self._live[run_id] = live
        try:
            if self.on_claim is not None:
                self.on_claim(claim)
            outcome = self.engine.execute(claim, live, on_checkpoint=self.on_checkpoint)
        except DatabaseError as e:  # a full disk, say: one line; the lease lapses, then reclaim
            log.warning("run %s: %s", run_id, e)
            outcome = Outcome(run_id, None, error={"type": type(e).__name__, "message": str(e)})
        except KeyboardInterrupt as e:
            if self.engine.operator_interrupted:
                raise  # the operator's Ctrl-C in a foreground worker: leave the run to a daemon
            log.exception("run %s: engine error", run_id)
            outcome = Outcome(run_id, None, error={"type": type(e).__name__, "message": str(e)})
        except BaseException as e:  # a bug in the engine must not kill the worker thread silently
            log.exception("run %s: engine error", run_id)
            outcome = Outcome(run_id, None, error={"type": type(e).__name__, "message": str(e)})
        finally:
            self._release_slot(run_id)
        return self._settle(claim, live, outcome)

    def _release_slot(self, run_id: str) -> None:
        """The run's handler stopped (here, or in a worker process): its slot is free."""
        with self._lock:
            self._live.pop(run_id, None)
            self._silenced.discard(run_id)
            if self._solo == run_id:
                self._solo = None

    def _settle(self, claim: Claim, live: LiveRun, outcome: Outcome) -> Outcome:
        """After a handler stopped: keep the wheel true and say what happened."""
        self.executed += 1
        if outcome.status is None:
            # Nothing written: the row still holds a lease (ours, lapsing, or another's now).
            # Refill, so our own timer reclaims it when that lease lapses.
            self._dirty = True
            if outcome.error is None:
                self._note_lost(claim, live)
        self._after(claim, outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        if self._runner is None:  # the batch runner wakes the loop once per round instead
            self._wake.set()
        return outcome

    def _after(self, claim: Claim, outcome: Outcome) -> None:
        """Keep the wheel true after our own writes, which data_version does not report."""
        status = outcome.status
        if status is None:
            return
        with self._wheel_lock:
            if outcome.run_at is not None and not status.is_terminal:
                self.wheel.push(outcome.run_at, claim.run.run_id)
            if status.is_terminal and claim.run.parent_run_id is not None:
                self.wheel.push(self.clock.now(), claim.run.parent_run_id)
        if status.is_terminal and claim.run.schedule is not None:
            self._dirty = True  # overlap=queue: its end may have released the next held run
        if status is RunStatus.WAITING and outcome.run_at is None:
            self._dirty = True  # it may have started a child run, due now

    def _note_lost(self, claim: Claim, live: LiveRun) -> None:
        """Our write was refused (or would be): the fence moved on. Say so in the timeline."""
        if isinstance(live.interruption(), DaemonStopping):
            return  # released by _abandon, which writes its own note
        run_id = claim.run.run_id
        try:
            now_run = self.store.get_run(run_id)
            log.warning(
                "run %s: lease lost (our fence %d, now %d held by %s); abandoned",
                run_id,
                claim.lease.fence,
                now_run.fence,
                now_run.lease_owner,
            )
            self.store.add_event(
                run_id,
                "lease lost",
                {
                    "owner": self.owner,
                    "fence": claim.lease.fence,
                    "current_fence": now_run.fence,
                    "noticed_by": "heartbeat" if live.lost else "write",
                    "note": "late write rejected by the fence; the run is another worker's now",
                },
                self.clock.now(),
            )
        except DatabaseError as e:
            log.warning("run %s: could not note the lost lease: %s", run_id, e)
        except Exception:
            log.exception("run %s: could not note the lost lease", run_id)

    def _abandon(self, reason: str, *, until: float) -> None:
        """Interrupt live handlers, let them unwind until monotonic time `until`, then kill
        the commands still running and release every lease held."""
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            live.interrupt(DaemonStopping(reason))
        give_up = until
        while self._live and self.clock.monotonic() < give_up:
            self.clock.wait_until(self._wake, min(self.clock.monotonic() + POLL_INTERVAL, give_up))
            self._wake.clear()
        if self._live:
            # Told at once, but a command that ignores SIGTERM would keep its handler (and
            # this exit) waiting for its SIGKILL: the exit keeps to the grace period instead.
            # A command runs only through flowctl.yamlflow.commands, so if that module was never
            # loaded none runs; looked up, not imported: no import while the daemon stops.
            commands = sys.modules.get("flowctl.yamlflow.commands")
            n = commands.kill_running_commands() if commands is not None else 0
            if n:
                log.warning("killed %d command(s) still running", n)
        held = [live.lease for live in lives]
        # Under the beat lock: a heartbeat that read the leases before they were silenced
        # must not extend them after the release (the run would not be due for the lease).
        with self._beat_lock:
            with self._lock:
                # Handed back: a handler still unwinding here must not extend its lease again.
                self._silenced.update(lease.run_id for lease in held)
            try:
                n = self.store.release_runs(held, self.clock.now(), reason)
            except Exception:
                log.exception("could not release leases")
                return
        if n:
            log.warning("released %d run(s) for another worker to reclaim (%s)", n, reason)

    def _heartbeat_loop(self) -> None:
        with self.store.own_writes():
            self._heartbeats()

    def _heartbeats(self) -> None:
        # An absolute schedule: time passing while a beat is written counts toward the next.
        due = self.clock.monotonic() + self.config.heartbeat
        while not self._hard_stop:
            self.clock.wait_until(self._served, due)
            due = max(due, self.clock.monotonic()) + self.config.heartbeat
            if self._hard_stop or self._served.is_set() or (self._stopping and not self._live):
                return
            try:
                self.heartbeat_once()
            except DatabaseError as e:
                log.warning("heartbeat failed: %s", e)
            except Exception:
                log.exception("heartbeat failed")

    def _pass_cancels(self) -> None:
        """Another process wrote: tell live handlers of cancellations now, not at the next
        heartbeat (a read; the heartbeat would tell them too)."""
        with self._lock:
            held = [rid for rid in self._live if rid not in self._silenced]
        for rid in self.store.pauses_requested(held):
            with self._lock:
                live = self._live.get(rid)
            if live is not None:
                live.request_pause()
        for rid in self.store.cancels_requested(held):
            with self._lock:
                live = self._live.get(rid)
            if live is not None:
                live.interrupt(Cancelled("cancel requested by operator"))

    def heartbeat_once(self) -> None:
        """Extend our leases and pass cancellations, deadlines and timeouts to live handlers."""
        with self._beat_lock:  # the leases read are the leases extended (see _abandon)
            self._beat()

    def _beat(self) -> None:
        with self._lock:
            held = [(rid, live) for rid, live in self._live.items() if rid not in self._silenced]
        now = self.clock.now()
        if not held:
            self._beat_idle(now)
            return
        replies = self.store.heartbeat(
            self.owner,
            [(live.lease, live.spent()) for _, live in held],
            now + timedelta(seconds=self.config.lease),
            now,
            steps={rid: live.step for rid, live in held},
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
            if reply.pause and exc is None:
                live.request_pause()  # not an interrupt: it parks at its next durable call
            if exc is None:
                continue
            live.interrupt(exc)  # type: ignore[arg-type]
            if reply.lost:
                with self._lock:
                    self._silenced.add(reply.run_id)  # another worker's now: nothing to extend
            # Otherwise keep extending the lease: a Python step cannot be interrupted, so the
            # run stays `running` (cancel requested, deadline passed, budget spent) while its
            # handler still runs here, and nobody else may claim it. It ends as told when the
            # handler stops, or, if this daemon dies, at the reclaim (claim_verdict).

    def _beat_idle(self, now: datetime) -> None:
        """An idle daemon still says it is alive (daemons.seen_at) every IDLE_BEAT: on
        another host, where its pid cannot be checked, that is all that shows it live."""
        mono = self.clock.monotonic()
        if self.only_run_id is not None or mono - self._last_idle_beat < IDLE_BEAT:
            return
        self._last_idle_beat = mono
        self.store.heartbeat(self.owner, [], now + timedelta(seconds=self.config.lease), now)

    def _reap_dead_owners(self, *, force: bool = False) -> None:
        """Leases held by a provably dead process (same host, pid gone) lapse now."""
        mono = self.clock.monotonic()
        if not force and mono - self._last_reap < REAP_EVERY:
            return
        self._last_reap = mono
        now = self.clock.now()
        for owner in self.store.running_owners():
            if owner != self.owner and owner_is_dead(owner):
                n = self.store.expire_owner(owner, now)
                if n:
                    log.info("owner %s is gone: %d run(s) reclaimable now", owner, n)
                    self._dirty = True
        if force:
            for d in self.store.daemons():
                if d.owner != self.owner and owner_is_dead(d.owner):
                    self.store.unregister_daemon(d.owner)
