"""The daemon's loop: claims what the timer wheel says is due (leases and fences), hands
each claim to its executor, keeps the wheel true after its own writes, drains on stop.

`Daemon.tick()` runs one iteration synchronously (tests drive it with a FakeClock);
`Daemon.run_forever()` serves: registered, heartbeating, its executor (threads, greenlets
or worker processes, chosen once) executing what the loop claims (the batch runner also
claims for the slots it freed, in its write round: `claim_in_round`). The same class,
restricted to one run, is the worker behind `flowctl run --wait` (flowctl.daemon.foreground).

Its state is composed, one object per job, each in a module of this package: the wheel
and its refill (`timers`), the runs executing now (`slots`), the `heartbeat`, the
`watches` (clock, free space, the database file, dead owners), the `retention` pass, the
`scheduler`, the stop state (`life`) and the `executor`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from flowctl.clock import Clock, SystemClock
from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.executor import Executor, Greenlets, Inline, Threads, batched
from flowctl.daemon.heartbeat import Heartbeat
from flowctl.daemon.isolation import Isolation
from flowctl.daemon.lifecycle import POLL_INTERVAL, DaemonStopping, Lifecycle
from flowctl.daemon.processes import Processes
from flowctl.daemon.retention import RetentionPass
from flowctl.daemon.slots import Slots
from flowctl.daemon.watches import Watches
from flowctl.daemon.wheel import Refill, Timers, TimerWheel
from flowctl.errors import Cancelled, DatabaseError, DatabaseUnavailable, DiskFullError
from flowctl.ids import HOST, make_owner, proc_start
from flowctl.model import JournalEntry, to_us
from flowctl.runtime.engine import Engine, Outcome
from flowctl.runtime.live import LiveRun
from flowctl.schedule.firing import Scheduler
from flowctl.store import Claim, Store
from flowctl.tracing import flush as flush_traces

log = logging.getLogger(__name__)

UNWIND_WAIT = 0.5  # after the grace period: time for interrupted handlers to stop, then exit


def choose(config: DaemonConfig, *, one_run: bool) -> Executor:
    """The executor a daemon serves with, chosen once from its settings: worker processes
    (`workers` > 1), greenlets (the batch runner, over the store's write round), else
    threads."""
    if config.workers > 1 and not one_run:
        return Processes(config.workers)
    if batched(config, one_run=one_run):
        return Greenlets()
    return Threads(config.concurrency)


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
        on_claim: Callable[[Claim], None] | None = None,
        worker_of: int | None = None,
    ) -> None:
        """`only_run_id`: a one-run worker (`flowctl run --wait`), which fires no schedule,
        prunes nothing and writes no idle liveness. `worker_of`: the pid of the daemon that
        started this one as a worker (--workers). `on_claim` is told of each claim before
        its handler runs, `on_checkpoint` of each checkpoint, `on_outcome` of each end."""
        self.config = config or DaemonConfig()
        one_run = only_run_id is not None
        self.config.check(clock, one_run=one_run)
        self.store, self.clock = store, clock
        store.leave_untold(self.config.untold)
        self.engine = engine or Engine(store, clock)
        self.owner = make_owner()
        self.only_run_id, self.worker_of = only_run_id, worker_of
        self.on_checkpoint, self.on_outcome, self.on_claim = on_checkpoint, on_outcome, on_claim
        self.life = Lifecycle(clock)
        self.timers = Timers(store)
        self.slots = Slots(self.config.concurrency)
        self.heartbeat = Heartbeat(
            store, clock, self.config, self.owner, self.slots, idle_beats=not one_run
        )
        self.watches = Watches.of(store, clock, self.owner, self.config.reserve)
        self.retention = RetentionPass({} if one_run else self.config.retention)
        self.scheduler = None if one_run else Scheduler(store, clock)
        self.executor = choose(self.config, one_run=one_run)
        self._inline = Inline(self.execute)
        self._running: Executor = self._inline  # who executes a claim: the executor, serving
        # Suspects run in worker processes of their own (not beside an injected clock, nor
        # in a worker or one-run daemon: their daemon, or the claimer itself, isolates).
        self.isolation = (
            Isolation(store, clock, self.config, self.life.wake.set, self.slots.holds)
            if not one_run and worker_of is None and isinstance(clock, SystemClock)
            else None
        )
        # A suspect is due and runs alone in this process (_alone_here): claim nothing new
        # until what runs has stopped.
        self._suspects = False
        self.executed = 0

    @property
    def serving(self) -> threading.Event:
        """Set once run_forever's loop is under way (clocks, data_version, the wheel read)."""
        return self.life.serving

    @property
    def wheel(self) -> TimerWheel:
        return self.timers.wheel

    @wheel.setter
    def wheel(self, wheel: TimerWheel) -> None:
        self.timers.wheel = wheel

    # -- the loop body -------------------------------------------------------

    def tick(self) -> int:
        """The serving loop's body: refill the wheel if another process wrote, fire due
        schedules, reap dead owners, claim what the wheel says is due and dispatch it,
        again while slots are free and claims succeed. Returns the runs claimed.

        `run_forever()` is this, repeated, plus waiting. Without an executor serving (tests,
        `flowctl.testing`) claimed runs execute here, synchronously, so one call runs
        everything due at the current time.
        """
        claimed = 0
        with self.store.own_writes():
            while True:
                n = self._pass()
                claimed += n
                if not n or self.slots.free() <= 0:
                    return claimed

    def _pass(self) -> int:
        """One pass: the watches, the wheel kept true, due schedules fired, retention; then
        claims for the free slots, of what is due at `now`."""
        self.watch_file()
        now = self.clock.now()
        if self.watches.clock.look():
            self.timers.dirty = True
        self._refresh(now)
        if self.scheduler is not None and self.scheduler.fire_due_at(now):
            self.timers.refill()  # the runs it created are our own writes: data_version is silent
        self.reap_dead_owners()
        self.retention.run(self.store, self.clock)
        if self.timers.dirty:
            self.timers.refill()
        if self._running is not self._inline:
            self.isolate()
        if self.watches.room.short_of_room():
            return 0
        return self._claim_due(now)

    def _refresh(self, now: datetime) -> None:
        """Refill the wheel if it is stale; if another process wrote, tell live handlers of
        cancels and pauses now, pick up a rotated key, and re-read the schedules (`schedule
        add` elsewhere)."""
        found = self.timers.refresh(now)
        if found is Refill.NONE:
            return
        if found is Refill.THEIRS:
            self.store.reload_keys()  # a key rotation's new key, sealed with ours (issue 42)
        if found is Refill.THEIRS and len(self.slots):
            self._pass_cancels()
        if self.scheduler is not None:
            self.scheduler.reread()

    def _claim_due(self, now: datetime) -> int:
        """Claim and dispatch what is due. Suspects are passed over (held for a claimer that
        runs them alone: an isolated worker, see flowctl.daemon.isolation); with no one to
        isolate them (not serving, or an injected clock), one runs here when nothing else
        does, and nothing is claimed beside it."""
        free = self.slots.free()
        due_at = self.timers.next_at()
        now_us = to_us(now)
        due = due_at is not None and due_at <= now_us
        alone_here = self._alone_here()
        if alone_here:
            if self.slots.solo is not None:
                return 0  # a suspect runs alone here: nothing beside it
            if free == self.config.concurrency and (
                self._suspects or (due and self.store.suspect_due(now))
            ):
                suspect = self._claim_suspect(now)
                if suspect is not None:
                    self.slots.solo = suspect.run.run_id
                    self._dispatch(suspect)
                    return 1
                self._suspects = False
            if self._suspects:
                return 0  # claim nothing new: once what runs has stopped, it runs alone
        if free <= 0 or not due:
            return 0
        asked = self.slots.reserve(min(free, self.config.claim_batch))
        try:
            claims = self.claim(now, asked) if asked else []
            if asked and len(claims) < asked:
                # Everything due at `now` is claimed (or ended, or held as a suspect): drop
                # those entries. A suspect held to run alone here is remembered instead.
                self.timers.pop_due(now_us)
                self._suspects = alone_here and self.store.suspect_due(now)
            for claim in claims:
                self._dispatch(claim)
        finally:
            self.slots.unreserve(asked)
        return len(claims)

    def claim_in_round(self, writes: bool) -> bool:
        """Claim for the slots free now, from the batch runner's thread as it ends a round
        (`writes`: with writes of its own), rather than wake the loop to claim them: the
        claim is that round's last write, in its transaction (or alone, in a round with
        none). While a run of a key is live here, each round with writes claims: the next
        run held behind a key whose run ends in it (issue 37) is claimed in the very
        transaction that released it. A stop, a disk short of room, a one-run claimer or
        a suspect waiting to run alone here leave claiming to the loop. Whether it claimed
        (then the loop need not be woken for the slots freed)."""
        released = self.timers.take_released()
        alone_here = self._alone_here()
        if (
            self.life.stopping
            or self.life.hard
            or self.only_run_id is not None
            or self.watches.room.short
            or (alone_here and (self.slots.solo is not None or self._suspects))
        ):
            self.timers.dirty = released or self.timers.dirty  # the loop claims it
            return False
        now = self.clock.now()
        now_us, due_at = to_us(now), self.timers.next_at()
        # While a run of a key is live here, every round claims: an ending among its writes
        # releases the key's next run, claimed in that same transaction.
        due = (due_at is not None and due_at <= now_us) or (writes and self.slots.keyed())
        asked = self.slots.reserve(self.config.claim_batch) if due or released else 0
        if not asked:
            self.timers.dirty = released or self.timers.dirty  # no slot: the loop, later
            return False
        try:
            claims = self.claim(now, asked)
            if len(claims) < asked:
                self.timers.pop_due(now_us)  # everything due at `now` is claimed
                self._suspects = alone_here and self.store.suspect_due(now)
            self._dispatch_open(claims)
        except Exception as e:  # the loop's next claim meets it too, and says so
            log.debug("claim in the runner's round: %s", e)
            self.timers.dirty = True
            return False
        finally:
            self.slots.unreserve(asked)
        return not self._suspects  # a suspect: the loop wakes, to run it alone

    def _alone_here(self) -> bool:
        """Whether suspects run alone in this process (nobody isolates them): a solo run
        holds the slots, else the next due suspect is claimed first."""
        if self.slots.solo is not None:
            return True
        if self.only_run_id is not None or self.worker_of is not None:
            return False  # the one-run claimer runs it alone; a worker's daemon isolates
        return self.isolation is None or self._running is self._inline

    def holds(self, run_id: str) -> bool:
        """True while one of this daemon's workers executes `run_id`: until it lets go, the
        heartbeat keeps extending that run's lease."""
        return self.slots.holds(run_id)

    def batched(self) -> bool:
        """Whether handlers run as greenlets on one thread (flowctl.daemon.executor.batched)."""
        return batched(self.config, one_run=self.only_run_id is not None)

    # -- serving ---------------------------------------------------------------

    def run_forever(self, *, until_idle: bool = False, install_signals: bool = False) -> int:
        """Serve until stopped or, with `until_idle`, until nothing is running or due.

        Returns the exit code: 0 after a drain (or idle), 1 after a second stop.
        """
        if install_signals:
            self.life.install_signals()
        if not self._register():
            return 0
        beat = threading.Thread(
            target=self.heartbeat.loop, args=(self.life,), name="flowctl-heartbeat", daemon=True
        )
        beat.start()
        try:
            return self.executor.serve(self, until_idle)
        finally:
            self._end(beat)

    def _register(self) -> bool:
        """Say this daemon serves the database (waiting out a full disk); False if it was
        stopped meanwhile."""
        options = {
            "concurrency": self.config.concurrency,
            "lease": self.config.lease,
            "workers": self.config.workers,
            **({"worker_of": self.worker_of} if self.worker_of else {}),
            **self.life.outage.last,  # the last outage it waited out, shown by `status`
        }
        while True:
            try:
                pid = os.getpid()
                self.store.register_daemon(
                    self.owner, HOST, pid, proc_start(pid), self.clock.now(), options
                )
                return True
            except DiskFullError as e:
                self.watches.room.wait_for_room(e, self.life)
                if self.life.stopping:
                    return False
            except DatabaseUnavailable as e:
                self.life.outage.wait_out(e, self.life)
                if self.life.stopping:
                    return False

    def _end(self, beat: threading.Thread) -> None:
        """The loop is over: the heartbeat ends with it, and the registration goes."""
        self.life.served.set()
        beat.join(timeout=5)
        try:
            if not self.watches.file.gone:  # never write to a file that is no longer there
                self.store.unregister_daemon(self.owner, self.clock.now())
        except DatabaseError as e:  # its row lapses; the next daemon or `daemon stop` drops it
            log.warning("could not unregister the daemon: %s", e)
        except Exception:
            log.exception("could not unregister the daemon")

    def serve_loop(self, until_idle: bool, executor: Executor) -> int:
        """The loop in this process, `executor` executing what it claims: tick and wait for
        work until stopped (then drain) or, `until_idle`, until nothing is left."""
        self._running = executor
        self.timers.hand_off = executor.claims_in_round
        self.slots.reopen()
        try:
            self.reap_dead_owners(force=True)
            while not (self.life.stopping or self.life.hard):
                try:
                    claimed = self.tick()
                except DiskFullError as e:
                    self.watches.room.wait_for_room(e, self.life)
                    continue
                except DatabaseUnavailable as e:  # an outage to wait out, never to exit on
                    self.timers.dirty = True  # re-read the wheel once it is back
                    self.life.outage.wait_out(e, self.life)
                    continue
                if self.life.outage.over() is not None:
                    self._register()  # silent that long, it may have been forgotten meanwhile
                self.watches.room.room_again()
                self.life.serving.set()  # clocks, data_version and the wheel all read once
                if until_idle and self._idle(claimed):
                    return 0
                self._wait_for_work()
            return self._drain()
        finally:
            self.life.stopping = True
            self._running = self._inline
            self.timers.hand_off = False
            self.close_isolated(0.0)  # they had the grace too; none is charged now
            flush_traces()  # a draining daemon's spans are exported before it exits

    def _idle(self, claimed: int) -> bool:
        """Nothing was claimed, nothing runs (isolated workers included), nothing is due now."""
        if claimed or len(self.slots) or self.timers.dirty:
            return False
        if self.isolation is not None and self.isolation.busy():
            return False
        next_at = self.timers.next_at()
        return next_at is None or next_at > to_us(self.clock.now())

    def _wait_for_work(self) -> None:
        """Until the next due time, a schedule fire, a worker finishing (the wake event) or
        the next data_version read, whichever is first."""
        start = self.clock.monotonic()  # first: time that passes before the wait shortens it
        timeout = POLL_INTERVAL
        next_at = self.timers.next_at()
        may_claim = (
            self.slots.free() > 0 and self.slots.solo is None and not self.watches.room.short
        )
        if next_at is not None and may_claim:
            timeout = min(timeout, (next_at - to_us(self.clock.now())) / 1e6)
        if self.isolation is not None:
            timeout = min(timeout, self.isolation.next_look() - start)
        next_fire = self.scheduler.next_at if self.scheduler is not None else None
        if next_fire is not None:
            timeout = min(timeout, (next_fire - self.clock.now()).total_seconds())
        if timeout > 0:
            self.clock.wait_until(self.life.wake, start + timeout)
        self.life.wake.clear()

    def _drain(self) -> int:
        """Claim nothing more; let running handlers finish within the grace period (from
        the stop request, or from now for a signal), then hand back what is left. 0, or 1
        after a second stop."""
        deadline: float | None = None
        while True:
            if self.life.hard:
                self._abandon("the daemon was stopped", until=self.clock.monotonic())
                return 1
            if deadline is None:
                asked = self.life.asked
                deadline = (asked if asked is not None else self.clock.monotonic()) + (
                    self.config.grace
                )
                log.info("draining: %d run(s) still running", len(self.slots))
            if not self._isolating() and self.slots.close(if_empty=True):
                return 0
            if self.clock.monotonic() >= deadline:
                log.warning(
                    "grace period of %gs over; %d run(s) left to be reclaimed",
                    self.config.grace,
                    len(self.slots),
                )
                # Exit within the grace plus UNWIND_WAIT, however late this loop looked.
                self._abandon("grace period over", until=deadline + UNWIND_WAIT)
                return 0
            self.life.wait(min(self.clock.monotonic() + POLL_INTERVAL, deadline))

    def _isolating(self) -> bool:
        """Isolated workers still run (a drain waits for them within its grace too; it
        starts no new one)."""
        if self.isolation is None:
            return False
        self.isolation.draining = True
        self.isolation.look()
        return bool(self.isolation.running())

    def isolate(self) -> bool:
        """The reclaim pass (flowctl.daemon.isolation): charge isolated workers that died,
        start one for each due suspect, at its own cadence. True while any runs."""
        if self.isolation is None:
            return False
        self.isolation.look()
        return bool(self.isolation.running()) or self.isolation.waiting > 0

    def close_isolated(self, grace: float) -> None:
        """Isolated workers finish within `grace`, then hand their runs back (or are killed)."""
        if self.isolation is not None:
            self.isolation.close(grace)

    def stop(self, *, drain: bool = True) -> None:
        """Drain (stop claiming, let running handlers finish); a second call stops at once."""
        self.life.stop(drain=drain)

    def watch_file(self, *, now: bool = False) -> None:
        """Raise DatabaseGoneError once the database file is no longer at its path (a stat,
        once a second, or `now`), first stopping at once: no heartbeat, release or
        unregister would write to it again, and live handlers are told to stop."""
        gone = self.watches.file.look(now=now)
        if gone is None:
            return
        self.life.hard = True
        for live in self.slots.lives():
            live.interrupt(DaemonStopping("the database file is gone"))
        raise gone

    # -- claims ------------------------------------------------------------------

    def claim(self, now: datetime, limit: int) -> list[Claim]:
        """Claim up to `limit` due runs (a one-run worker: its run, alone) under new leases."""
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
        """Runs a claim ended instead (deadline passed, poison ...): say so."""
        if ended:
            self.timers.dirty = True  # an ended child may have woken its parent
            if self.on_outcome is not None:
                for rid in ended:
                    run = self.store.get_run(rid)
                    self.on_outcome(Outcome(rid, run.status, error=run.error))

    def reap_dead_owners(self, *, force: bool = False) -> None:
        """Leases held by a provably dead process (same host, pid gone) lapse now."""
        if self.watches.reaper.reap(force=force):
            self.timers.dirty = True

    # -- executing a claim -----------------------------------------------------

    def _dispatch(self, claim: Claim) -> None:
        self._running.submit(claim, self.slots.take(claim, self.clock))

    def _dispatch_open(self, claims: list[Claim]) -> None:
        """Dispatch claims made off the loop's thread; those the daemon's stop (its slots
        closed meanwhile) would miss are handed back here, due now for any daemon."""
        back = []
        for claim in claims:
            live = self.slots.take_open(claim, self.clock)
            if live is None:
                back.append(claim.lease)
            else:
                self._running.submit(claim, live)
        if back:
            self.heartbeat.release(back, "the daemon stopped as they were claimed")

    def execute(self, claim: Claim, live: LiveRun | None = None) -> Outcome:
        """Run one claimed run's handler (its slot taken, or taken here), free the slot,
        and keep the wheel true: what an executor does with each claim."""
        run_id = claim.run.run_id
        if live is None:
            live = self.slots.take(claim, self.clock)
        try:
            if self.on_claim is not None:
                self.on_claim(claim)
            outcome = self.engine.execute(claim, live, on_checkpoint=self.on_checkpoint)
        except DatabaseUnavailable as e:  # the loop says it once for all runs
            log.debug("run %s: %s", run_id, e)
            outcome = _unwritten(run_id, e)
        except DatabaseError as e:  # a full disk, say: one line; the lease lapses, then reclaim
            log.warning("run %s: %s", run_id, e)
            outcome = _unwritten(run_id, e)
        except KeyboardInterrupt as e:
            if self.engine.operator_interrupted:
                raise  # the operator's Ctrl-C in a foreground worker: leave the run to a daemon
            log.exception("run %s: engine error", run_id)
            outcome = _unwritten(run_id, e)
        except BaseException as e:  # a bug in the engine must not kill the worker thread silently
            log.exception("run %s: engine error", run_id)
            outcome = _unwritten(run_id, e)
        finally:
            self.slots.release(run_id)
        return self._settle(claim, live, outcome)

    def _settle(self, claim: Claim, live: LiveRun, outcome: Outcome) -> Outcome:
        """After a handler stopped: keep the wheel true and say what happened."""
        self.executed += 1
        if outcome.status is None:
            # Nothing written: the row still holds a lease (ours, lapsing, or another's now).
            # Refill, so our own timer reclaims it when that lease lapses.
            self.timers.dirty = True
            if outcome.error is None:
                self._note_lost(claim, live)
        else:  # our own writes, which data_version does not report
            self.timers.settled(claim.run, outcome.status, outcome.run_at, self.clock)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        if self._running.wakes_per_run:
            self.life.wake.set()
        return outcome

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
                live.lease.fence,
                now_run.fence,
                now_run.lease_owner,
            )
            self.store.add_event(
                run_id,
                "lease lost",
                {
                    "owner": self.owner,
                    "fence": live.lease.fence,
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
        self.slots.close()  # first: a resting run taken back now is handed back by its handler
        lives = self.slots.lives()
        for live in lives:
            live.interrupt(DaemonStopping(reason))
        while len(self.slots) and self.clock.monotonic() < until:
            self.life.wait(min(self.clock.monotonic() + POLL_INTERVAL, until))
        if len(self.slots):
            # Told at once, but a command that ignores SIGTERM would keep its handler (and
            # this exit) waiting for its SIGKILL: the exit keeps to the grace period instead.
            # A command runs only through flowctl.yamlflow.commands, so if that module was never
            # loaded none runs; looked up, not imported: no import while the daemon stops.
            commands = sys.modules.get("flowctl.yamlflow.commands")
            n = commands.kill_running_commands() if commands is not None else 0
            if n:
                log.warning("killed %d command(s) still running", n)
        try:
            n = self.heartbeat.release([live.lease for live in lives], reason)
        except DatabaseError as e:  # their leases lapse instead: reclaimed then
            log.warning("could not release leases: %s", e)
            return
        except Exception:
            log.exception("could not release leases")
            return
        if n:
            log.warning("released %d run(s) for another worker to reclaim (%s)", n, reason)

    # -- what the store says of live runs -------------------------------------------

    def heartbeat_once(self) -> None:
        """Extend our leases and pass cancellations, deadlines and timeouts to live handlers."""
        self.heartbeat.once()

    def _pass_cancels(self) -> None:
        """Another process wrote: tell live handlers of cancellations now, not at the next
        heartbeat (a read; the heartbeat would tell them too)."""
        held = [rid for rid, _ in self.slots.extended()]
        asked = self.store.interrupts_requested(held)
        for rid in asked.pauses:
            live = self.slots.get(rid)
            if live is not None:
                live.request_pause()
        for rid in asked.cancels:
            live = self.slots.get(rid)
            if live is not None:
                live.interrupt(Cancelled("cancel requested by operator"))


def _unwritten(run_id: str, error: BaseException) -> Outcome:
    """A handler's end that wrote nothing (the engine or the database failed under it)."""
    return Outcome(run_id, None, error={"type": type(error).__name__, "message": str(error)})
