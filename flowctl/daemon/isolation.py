"""Suspects run isolated: each run reclaimed from a dead worker executes in a worker
process of its own (`python -m flowctl.daemon.isolated`), beside which the daemon goes on
claiming, waking and firing as usual.

Why (issue 39): several runs share a daemon, so a crash alone cannot say which run
caused it. Every run reclaimed from a dead worker is a suspect (transitions.claim_verdict),
and a suspect is claimed only by a claimer that runs it alone. That claimer used to be the
daemon itself, claiming nothing else meanwhile: one 60 s suspect held every timer 47 s
late. Now it is a child process that runs that one run and nothing else, so a crash it
causes is still the suspect's, while the daemon serves everything else.

A crash is charged here and only here: when an isolated worker dies (a signal, an exit
code other than 0 and FATAL) after it claimed its run, and this daemon lived to see it
(not stopping), `charge_crash` counts it against that run; five charged crashes without a
checkpoint make it poison. A whole process group killed at once (OOM, power loss,
`systemctl kill -s KILL`) takes this daemon with its isolated workers: nobody charges, and
the next daemon isolates the suspect again.

The reclaim pass has its own cadence (`reclaim_every`), whatever the backlog: a lapsed
lease is no longer reached only when the claims run out of queued runs older than it
(issue 38). Runs released by a drain have no owner and are no suspects: the usual claims
take them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flowctl.clock import Clock
from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.spawn import child_settings, start_child
from flowctl.store import Lease, Store
from flowctl.transitions import ISOLATED_AT_ONCE

log = logging.getLogger(__name__)

FATAL = 3  # an isolated worker's exit code for "could not serve": not the run's fault
KILL_AFTER = 5.0  # seconds past a stop before an isolated worker still there is killed


def reclaim_every(lease: float) -> float:
    """Seconds between reclaim passes: a quarter lease, at most a second, so a lapsed lease
    is taken over within about a lease of lapsing."""
    return min(1.0, lease / 4)


@dataclass(eq=False)
class _Isolated:
    """One isolated worker: its run, its process, and the lease it reported claiming."""

    run_id: str
    popen: subprocess.Popen[bytes]
    control: int  # write end of its order pipe; closing it tells the worker to stop
    started: float
    lease: Lease | None = None
    code: int | None = None  # set by its watcher once it exited
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Suspect:
    """What `why` and `status` say of a suspect this daemon isolates."""

    run_id: str
    pid: int
    since: float  # monotonic


class Isolation:
    """The isolated workers of one daemon: started for due suspects at the reclaim pass's
    cadence, watched, charged when one dies under its run, stopped with the daemon.

    Store calls are made only from the daemon's loop thread (`look`, `close`); watcher
    threads only reap their process and wake the loop (`wake`)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        config: DaemonConfig,
        wake: Callable[[], None],
        holds: Callable[[str], bool],
        *,
        limit: int = ISOLATED_AT_ONCE,
        spread: bytes | None = None,
    ) -> None:
        """`wake` wakes the daemon's loop (an isolated worker ended); `holds` says whether
        the daemon itself still runs a run (a lease of its own that lapsed while its
        handler ran late is not taken over from under it here); `spread`, this daemon's
        own order among due suspects (transitions.suspect_order; random by default)."""
        self.store, self.clock, self.config = store, clock, config
        self.wake, self.holds = wake, holds
        self.limit = max(1, min(limit, config.concurrency))
        self.every = reclaim_every(config.lease)
        self.spread = os.urandom(8) if spread is None else spread
        self._live: dict[str, _Isolated] = {}
        self._lock = threading.Lock()
        self._next_look = float("-inf")
        self.waiting = 0  # due suspects seen at the last pass beyond those isolated
        self.draining = False  # start no new isolated worker (crashes are still charged)
        self.stopping = False  # the daemon stops: its isolated workers' deaths charge nobody

    # -- the loop's side ----------------------------------------------------------------

    def look(self) -> bool:
        """Charge the crashes of isolated workers that died, then (at the pass's cadence)
        start isolated workers for due suspects. True if a worker ended or started."""
        changed = self._reap()
        mono = self.clock.monotonic()
        if self.draining or self.stopping or mono < self._next_look:
            return changed
        self._next_look = mono + self.every
        with self._lock:
            handed = set(self._live)
        room = self.limit - len(handed)
        due = [
            r
            for r in self.store.suspects_due(self.clock.now(), 4 * self.limit, self.spread)
            if r not in handed and not self.holds(r)
        ]
        self.waiting = max(0, len(due) - max(room, 0))
        if room <= 0 or not due:
            return changed
        # The fewest crashes first, in this daemon's own order among equals, so daemons that
        # look at once mostly pick different suspects. Two that pick the same run each start
        # a worker for it: one claims it, the other finds it taken and exits.
        for run_id in due[:room]:
            self._start(run_id)
        return True

    def next_look(self) -> float:
        """Monotonic time of the next reclaim pass (the loop waits no longer)."""
        return self._next_look

    def running(self) -> list[Suspect]:
        with self._lock:
            return [Suspect(i.run_id, i.popen.pid, i.started) for i in self._live.values()]

    def busy(self) -> bool:
        """An isolated worker runs, or a suspect is due (an until-idle daemon waits)."""
        with self._lock:
            if self._live:
                return True
        return bool(self.store.suspects_due(self.clock.now(), 1))

    def close(self, grace: float) -> None:
        """The daemon stops: isolated workers finish their run within `grace` seconds, then
        are told to stop (they hand their run back), then killed past KILL_AFTER. None of
        these deaths is charged: this daemon is stopping."""
        self.draining = self.stopping = True
        until = time.monotonic() + grace
        for order_at in (until, until + KILL_AFTER):
            for worker in self._workers():
                worker.done.wait(max(0.0, order_at - time.monotonic()))
            if order_at == until:
                for worker in self._workers():
                    _close_fd(worker)  # EOF: stop now, hand the run back
        for worker in self._workers():
            if worker.code is None:
                log.warning("isolated worker pid %d did not stop: killing it", worker.popen.pid)
                worker.popen.kill()
                worker.done.wait(5)
        self._reap()

    # -- the workers ----------------------------------------------------------------------

    def _workers(self) -> list[_Isolated]:
        with self._lock:
            return list(self._live.values())

    def _start(self, run_id: str) -> None:
        settings = {**child_settings(self.store, self.config), "run_id": run_id}
        try:
            popen, write, report_r = start_child("flowctl.daemon.isolated", settings)
        except OSError as e:
            log.warning("run %s: could not start an isolated worker: %s", run_id, e)
            return
        worker = _Isolated(run_id, popen, write, time.monotonic())
        with self._lock:
            self._live[run_id] = worker
        log.info("run %s: its worker died under it; running it alone, pid %d", run_id, popen.pid)
        threading.Thread(
            target=self._watch, args=(worker, report_r), name="flowctl-isolated", daemon=True
        ).start()

    def _watch(self, worker: _Isolated, report: int) -> None:
        """Read the lease the worker claimed (one line), then reap it and wake the loop."""
        with os.fdopen(report, "rb") as lines:
            line = lines.readline().split(maxsplit=1)
        if len(line) == 2:
            worker.lease = Lease(worker.run_id, int(line[0]), line[1].decode().strip())
        worker.code = worker.popen.wait()
        worker.done.set()
        self.wake()

    def _reap(self) -> bool:
        """Forget isolated workers that exited, charging a crash to the run of each that died
        under it while this daemon serves."""
        with self._lock:
            ended = [w for w in self._live.values() if w.done.is_set()]
            for worker in ended:
                del self._live[worker.run_id]
        for worker in ended:
            _close_fd(worker)
            self._ended(worker)
        return bool(ended)

    def _ended(self, worker: _Isolated) -> None:
        code = worker.code
        if code == 0 or code == FATAL or worker.lease is None or self.stopping:
            if code not in (0, None):
                log.warning("isolated worker pid %d exited (%s)", worker.popen.pid, _how(code))
            return
        crashes = self.store.charge_crash(worker.lease, self.clock.now())
        if crashes is not None:
            log.warning(
                "run %s: its isolated worker pid %d died (%s): crash %d charged to it",
                worker.run_id,
                worker.popen.pid,
                _how(code),
                crashes,
            )


def _close_fd(worker: _Isolated) -> None:
    if worker.control >= 0:
        os.close(worker.control)
        worker.control = -1


def _how(code: int | None) -> str:
    if code is not None and code < 0:
        return signal.Signals(-code).name
    return f"exit code {code}"
