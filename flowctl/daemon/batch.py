"""The batch runner: many handlers advanced by one thread, their writes committed together.

Each claimed run's handler runs in a greenlet on the runner's thread, inside the
store's write round for that thread (Store.write_round, flowctl.store.round). A store
write (a checkpoint, a suspension, an ending) is queued in the round and parks its
greenlet; the runner resumes every ready greenlet in turn until each has parked on a
write (or waits on the pool, or ended), then commits the round: one transaction that
runs every queued write, one COMMIT and one fsync, and the writers are ready again. So
a checkpoint costs its statements and a few greenlet switches, not a thread hand-off, a
fight for the GIL and the store lock, and a condition wait (issue 14).

Durability is unchanged: a write returns to its handler only after the COMMIT that
holds it, so every checkpoint is on disk before the step after it runs. The store's
write lock is held only while the round's statements run, not while handlers run their
Python: a second daemon on the same file writes its round meanwhile (the two take turns
on a lock file, see SqliteDatabase.take_turns), so two daemons use two cores. A write
waits for its round at most ROUND_MAX plus one step body.

A step body that blocks (sleeps, waits on the network, runs a command) would hold up
every handler on the thread, so bodies are placed by what they did before
(`Placement`): one not seen yet, one seen to take long, and YAML's commands and calls
run on a thread of a pool while the greenlet waits and the others go on; one seen to
return quickly runs inline. Code of the handler itself (outside steps) always runs
inline: it is meant to be quick and deterministic.

Wakes come first (issue 40): a resting handler whose wake has come (flowctl.daemon.rests)
is resumed before every other ready handler, at the start of a round and between two
handlers of one, so under fresh work it waits for one handler's turn, not a whole round.
A claimed wake (a sleeper, a waiter, a retry or a start put off, `Claim.wakes`) starts
before fresh claims and the handlers the last round parked.
"""

from __future__ import annotations

import collections
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

# Imported here, not in each method: an import statement in a function runs (and looks
# the module up) on every call, three times per run on the runner's hot path. This
# module is itself imported only by a daemon that runs the batch runner.
from greenlet import getcurrent, greenlet

from flowctl.clock import Clock
from flowctl.daemon.rests import Rests
from flowctl.daemon.slots import Slots
from flowctl.retry import BLOCKING
from flowctl.runtime.suspend import resting, step_caller

if TYPE_CHECKING:
    from flowctl.runtime.live import LiveRun
    from flowctl.store import Claim, Store
    from flowctl.store.round import WriteRound

log = logging.getLogger(__name__)

ROUND_MAX = 0.005  # seconds a round's writes may wait for their COMMIT while bodies run
INLINE_UNDER = 0.002  # a body that took less than this on the pool runs inline from then on
SLOW_INLINE = 0.02  # an inline body that took longer than this goes back to the pool for good
KNOWN_MAX = 4096  # function objects remembered (closures made per call are new objects)
RELEASE_WAIT = 5.0  # seconds a closing runner is given to hand resting runs back


def _key(fn: Callable[..., Any]) -> Hashable | None:
    """What a body's timings are kept under: its code (a closure made anew per call is the
    same code), else the callable itself; None for one that cannot be a key."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        return code  # type: ignore[no-any-return]
    try:
        hash(fn)
    except TypeError:
        return None
    return fn


class Placement:
    """Where step bodies run: a pure record of how long each took, by its code.

    Unknown or marked blocking: the pool. Quick on the pool (under INLINE_UNDER): inline
    from then on. Slow inline once (over SLOW_INLINE): the pool for good, since a body
    that blocked once may block again and holds up every handler while it does.
    """

    def __init__(self) -> None:
        self._inline: dict[Hashable, bool] = {}  # by _key: decided, True for inline
        # The same answers by the function object itself, for the next call of the same
        # function: one dict probe, where _key and the BLOCKING look-up each raise (and
        # format) an AttributeError for a plain function.
        self._known: dict[Any, bool] = {}

    def inline(self, fn: Callable[..., Any]) -> bool:
        try:
            known = self._known.get(fn)
        except TypeError:  # not hashable: never a key
            return False
        if known is not None:
            return known
        key = _key(fn)
        return key is not None and self._inline.get(key, False) and not getattr(fn, BLOCKING, False)

    def observed(self, fn: Callable[..., Any], seconds: float, *, inline: bool) -> None:
        if inline and seconds < SLOW_INLINE:
            return  # inline and quick: nothing changes
        key = _key(fn)
        if key is None or getattr(fn, BLOCKING, False):
            return
        if inline:
            self._inline[key] = False
            self._known.clear()  # closures of that code were known by their objects too
            log.info(
                "step body %s took %.0f ms inline: it runs on a thread from now on",
                getattr(fn, "__qualname__", fn),
                seconds * 1000,
            )
        elif key not in self._inline and seconds < INLINE_UNDER:
            self._inline[key] = True
        if fn in self._known or len(self._known) < KNOWN_MAX:
            self._known[fn] = self._inline.get(key, False)


class _Pool:
    """Threads for step bodies, started as needed, each job on a thread free at once: at
    most one per handler, since a handler waits for its body. Not a ThreadPoolExecutor: its threads are joined at interpreter exit, so a
    body still stuck after the grace period would keep `flowctl daemon` from exiting."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._free = 0  # threads waiting for a job that no submit has counted on yet
        self._closed = False

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = not self._free
            if not spawn:
                self._free -= 1
        if spawn:
            threading.Thread(target=self._serve, name="flowctl-step", daemon=True).start()
        self._jobs.put(job)

    def close(self) -> None:
        """Idle threads end now, busy ones after their body; a body sent later (a handler
        still unwinding) gets a thread of its own, which ends after it."""
        with self._lock:
            self._closed = True
            idle, self._free = self._free, 0
        for _ in range(idle):
            self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            with self._lock:
                if self._closed:
                    return
                self._free += 1


class BatchRunner:
    """One thread of greenlets executing the daemon's claims (see the module docstring).

    `execute(claim, live)` is the daemon's whole handling of one claim (engine, slot,
    wheel); it runs in the claim's greenlet. `ended()` is called once after a round in
    which handlers ended (the daemon's loop then claims for the slots freed), not once
    per handler: a wake per run cost the loop a pass and the runner the GIL each time.
    `claim(writes)`, called as each round ends (`writes`: it has writes of its own), is the
    daemon's claim for the freed slots as that round's last write (Daemon.claim_in_round);
    when it claimed, the loop is not woken at all.
    `failed(error)` is called if the runner itself breaks (a bug): the daemon then stops
    and hands its runs back, rather than extend leases of handlers that will never end.
    The store's write round is the runner's only tie to the store: the runner says when
    (commit), the store says what SQL.
    """

    hold_warn = 1.0  # seconds one handler may hold the thread before that is logged

    def __init__(
        self,
        store: Store,
        execute: Callable[[Claim, LiveRun], object],
        *,
        ended: Callable[[], None],
        failed: Callable[[BaseException], None],
        claim: Callable[[bool], bool] | None = None,
    ) -> None:
        self._store = store
        self._execute = execute
        self._ended = ended
        self._claim = claim
        self._failed = failed
        self._events: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._ready: list[tuple[greenlet, Any]] = []
        self._parked: list[greenlet] = []
        self._writes: WriteRound | None = None  # this thread's round, while serving
        self._closing = False
        self._pool = _Pool()
        self.placement = Placement()
        self._main: greenlet | None = None
        # Each live handler's greenlet, with its workflow (for warnings): how many are
        # alive is its length; a greenlet leaves it once it has ended (_round).
        self._workflows: dict[greenlet, str] = {}
        self._warned: set[str] = set()
        self.rests: Rests | None = None  # short waits spent here (allow_rests)
        self._thread = threading.Thread(target=self._serve, name="flowctl-runner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, claim: Claim, live: LiveRun) -> None:
        self._events.put(("run", claim, live))

    def close(self) -> None:
        """Stop once the handlers still running have stopped (the daemon interrupts them).
        Handlers resting hand their runs back first (due now, for any daemon): waited for,
        a few seconds at most, so the daemon does not exit before those writes."""
        self._events.put(None)
        self._pool.close()
        if self.rests is not None and self._thread.is_alive():
            self.rests.wait_settled(RELEASE_WAIT)

    # -- the runner's thread --------------------------------------------------

    def _serve(self) -> None:
        self._main = getcurrent()
        try:
            with self._store.write_round(self._park) as writes, self._store.own_writes():
                self._writes = writes
                while not (self._closing and not self._workflows):
                    self._take(block=not self._ready)
                    self._round()
        except BaseException as e:  # a bug: the handlers here can no longer go on
            log.exception("the batch runner stopped")
            self._failed(e)
        finally:
            self._writes = None

    def _take(self, *, block: bool) -> None:
        """New claims, finished pooled bodies and resting handlers whose wake came (or
        all of them, when closing): each makes a greenlet ready. Blocks (if `block`) at
        most until the next wake."""
        timeout = None if self.rests is None else self.rests.next_in()
        woke: list[tuple[greenlet, Any]] = []  # claims of wakes: before the others
        while True:
            try:
                event = self._events.get(timeout=timeout) if block else self._events.get_nowait()
            except queue.Empty:
                break
            block = False
            if event is None:
                self._closing = True
            elif event[0] == "run":
                g = greenlet(self._run)
                self._workflows[g] = event[1].run.workflow
                (woke if event[1].wakes else self._ready).append((g, (event[1], event[2])))
            else:  # ("step", greenlet): its pooled body finished
                self._ready.append((event[1], None))
            if self._closing and not self._workflows:
                return
        self._ready[:0] = woke
        if self.rests is not None:
            woken = self.rests.stop() if self._closing else self.rests.due()
            self._ready[:0] = [(g, not self._closing) for g in woken]  # first

    def _round(self) -> None:
        """Resume every ready greenlet until it parks on a write, waits on the pool or ends;
        then commit the round, and the writers are ready again. Writes that have waited
        ROUND_MAX are committed between greenlets, so a slow body never holds them long.
        A resting handler whose wake comes meanwhile goes next, before the others left."""
        ready, self._ready = collections.deque(self._ready), []
        alive = len(self._workflows)
        started = before = time.monotonic()
        while ready:
            g, value = ready.popleft()
            try:
                g.switch(value)
            except Exception:  # the daemon's execute catches everything: a bug if here
                log.exception("a handler's greenlet failed")
            after = time.monotonic()
            if after - before >= self.hold_warn:
                self._held_long(g, after - before)
            if g.dead:
                del self._workflows[g]
            if after - started >= ROUND_MAX:  # its writes waited at most this long
                self._commit()
                started = time.monotonic()
            before = after
            if self.rests is not None and not self._closing:
                ready.extendleft((w, True) for w in reversed(self.rests.due()))
        # The claim for the slots freed meanwhile is the round's last write, committed with
        # it (the runner's own write commits the round at once, see _park), or its only one.
        claimed = self._claim_now()
        self._commit()
        parked, self._parked = self._parked, []
        self._ready.extend((g, None) for g in parked)
        rested = self.rests is not None and self.rests.take_freed()
        # Slots were freed (runs ended or rested) and this round's claim took none for them:
        # the loop claims. When it did, waking the loop too only made it look again for
        # runs it had just claimed (a loop pass for every few rests of a sleeping batch).
        if (len(self._workflows) < alive or rested) and not claimed:
            self._ended()

    def _claim_now(self) -> bool:
        """The daemon's claim in this round (see Daemon.claim_in_round), unless closing."""
        writes = self._writes is not None and self._writes.pending > 0
        return self._claim is not None and not self._closing and self._claim(writes)

    def _commit(self) -> None:
        """The round's writes in one transaction, one COMMIT (the store's round). The write
        lock is held for the statements alone, not while handlers run their Python
        (another daemon on the file writes then)."""
        assert self._writes is not None
        self._writes.commit()

    def _held_long(self, g: greenlet, seconds: float) -> None:
        """One handler kept the thread (code of its own outside ctx.step, or a step body
        not yet known to be slow): every other handler waited. Said once per workflow."""
        workflow = self._workflows.get(g, "?")
        if workflow in self._warned:
            return
        self._warned.add(workflow)
        log.warning(
            "a run of workflow %r held the daemon's batch runner for %.1f s without a durable"
            " call, and every other run waited: move slow work into ctx.step (a step body"
            " that blocks runs on a thread of its own), or run the daemon with --threads",
            workflow,
            seconds,
        )

    # -- inside a claim's greenlet ----------------------------------------------

    def _run(self, job: tuple[Claim, LiveRun]) -> None:
        step_caller.set(self._call_step)
        resting.set(self.rests)
        self._execute(*job)

    def allow_rests(self, clock: Clock, slots: Slots, lease: float, heartbeat: float) -> None:
        """Let handlers wait out short sleeps and retries in memory (flowctl.daemon.rests):
        on the system clock only, since resting greenlets wait on real time."""
        self.rests = Rests(clock, slots, lease, switch=self._to_main, heartbeat=heartbeat)

    def _to_main(self) -> object:
        assert self._main is not None
        return self._main.switch()

    def _park(self) -> None:
        """A write waits for its round's COMMIT: back to the runner until the round commits."""
        g = getcurrent()
        assert self._main is not None
        if g is self._main:  # the runner's own write (none today): commit it now
            self._commit()
            return
        self._parked.append(g)
        self._main.switch()

    def _call_step(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self.placement.inline(fn):
            start = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self.placement.observed(fn, time.monotonic() - start, inline=True)
        g = getcurrent()
        context = contextvars.copy_context()  # the step's output capture and ctx go along
        outcome: list[Any] = []

        def job() -> None:
            start = time.monotonic()
            try:
                outcome.append((True, context.run(fn, *args, **kwargs)))
            except BaseException as e:  # handed to the handler, as a direct call raises it
                outcome.append((False, e))
            outcome.append(time.monotonic() - start)
            self._events.put(("step", g))

        self._pool.submit(job)
        assert self._main is not None
        self._main.switch()  # resumed once, by the ("step", g) event the job sends
        (ok, value), seconds = outcome
        self.placement.observed(fn, seconds, inline=False)
        if not ok:
            raise value
        return value
