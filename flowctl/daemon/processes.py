"""`flowctl daemon --workers N`: N worker processes execute runs, each a whole daemon.

The executor of a daemon with workers (flowctl.daemon.executor): the daemon process
supervises, in a loop of its own (`Processes.serve`). It starts N workers
(`python -m flowctl.daemon.worker`, or from the .pyz the daemon runs from: spawn.child_argv),
each a Daemon of its own on the same database: it registers, claims runs under its own
leases, keeps its own timer wheel and batch runner, and fires schedules. On SQLite their
write rounds take turns on the database (flowctl.daemon.batch, SqliteDatabase.take_turns):
each holds the write lock only for its round's statements, so one worker runs its
handlers' Python while another writes, and N workers use N cores. On PostgreSQL they
are daemons of a fleet, as ones started by hand would be. The daemon process itself runs
no handler: it replaces a worker that dies, sends the notifications, and turns its own
stop into theirs.

Why this shape (issue 14, measured on 2 shared cores with `benchmarks/scaling.py`): the
earlier one kept every write in the daemon process and ran handlers in worker processes
that sent each store call over a socket as JSON. For trivial three-step runs the
protocol cost the daemon process more CPU per run (0.5 ms) than a whole one-process
daemon spends (0.23 ms), so two workers ran 1,377 runs/s against 3,841 for one process.
Whole engines send nothing: each run costs what it costs in one process, plus the turns.

A worker killed at any moment (SIGKILL included) loses nothing: it is a dead daemon on
this host, whose leases the other workers lapse at once (watches.Reaper); a run
taken from it is a suspect, which this daemon runs alone in a worker process of its own
(flowctl.daemon.isolation, from its supervising loop), so a run that keeps killing its
worker is dead-lettered as poison while the workers serve everything else. The daemon starts another in its place (after a pause that
grows while they keep dying young). A worker that cannot serve at all (its database
gone, say) exits with FATAL, and the daemon then stops the others and exits too. The
workers take orders only from the daemon, over a pipe (the first line is their settings,
then `drain` or `stop`): they ignore SIGINT and SIGTERM, which the daemon turns into
`drain` for all; and at the pipe's end (the daemon is gone, even by SIGKILL) a worker
stops at once and hands its runs back, so no worker outlives its daemon. Nothing secret
is on their command lines: a PostgreSQL URL's password travels in the pipe.
"""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from flowctl.daemon.executor import Executor, Host
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.daemon.spawn import child_settings, start_child
from flowctl.errors import DatabaseGoneError
from flowctl.model import to_us
from flowctl.runtime.live import LiveRun
from flowctl.store import Claim

log = logging.getLogger(__name__)

KILL_AFTER = 5.0  # seconds past a drain's grace before a worker that has not exited is killed
MAX_PAUSE = 30.0  # the longest pause before replacing workers that keep dying before serving
FATAL = 3  # a worker's exit code for "this daemon cannot serve": not replaced


def _children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def replacement_pause(unserved_deaths: int) -> float:
    """Seconds to wait before replacing a worker, after this many deaths in a row before
    it served (it never finished its first pass): none for the first, then doubling up to
    MAX_PAUSE, so a worker that cannot start never spins the machine. A worker that died
    while serving (a crash, a kill) is replaced at once."""
    if unserved_deaths <= 1:
        return 0.0
    return float(min(MAX_PAUSE, 2 ** (unserved_deaths - 2)))


@dataclass(eq=False)
class _Worker:
    slot: int
    popen: subprocess.Popen[bytes]
    control: int  # the write end of its control pipe; its end is the worker's EOF
    ready: int  # the read end of its ready pipe: a line once it serves, EOF if it dies first
    started: float


class Processes(Executor):
    """The N worker processes a daemon supervises: started with its settings, replaced
    when one dies, told to drain or stop when it does, waited for when it exits."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.until_idle = False
        self.deaths = 0
        self._host: Host | None = None
        self._workers: dict[int, _Worker] = {}
        self._lock = threading.Lock()
        self._order: str | None = None  # "drain" or "stop" once told: no more replacements
        self._closed = threading.Event()
        self._finished = 0  # slots whose worker exited for good (see done)
        self._started_for: tuple[int, str] | None = None  # see _due_again
        self.fatal: str | None = None  # why a worker could not serve (exit code FATAL)
        self._cpu_at_start = (0.0, 0.0)

    def serve(self, host: Host, until_idle: bool) -> int:
        """The supervisor's loop: keep the workers going, watch the database file, turn a
        stop into theirs, wait for them. The exit code: 1 after a hard stop or a worker
        that could not serve, else 0; DatabaseGoneError if the file went."""
        self._host, self.until_idle = host, until_idle
        life = host.life
        self._start_workers()
        life.serving.set()
        gone: DatabaseGoneError | None = None
        try:
            while not life.stopping:
                host.watch_file()  # as each worker does: the same one line, exit 1
                isolating = host.isolate()  # suspects run in processes of their own
                if until_idle and self.done() and not isolating and not self._due_again(host):
                    break
                life.wait(host.clock.monotonic() + POLL_INTERVAL)
        except DatabaseGoneError as e:
            gone = e
        life.stopping = True
        if life.hard:
            self.stop()
        self.close()
        host.close_isolated(0.0 if life.hard else host.config.grace)
        if gone is not None:
            raise gone
        host.watch_file(now=True)  # a worker may have seen it first (or could not open it)
        if self.fatal is not None:
            log.error("%s: stopped", self.fatal)
        return 1 if life.hard or self.fatal is not None else 0

    def submit(self, claim: Claim, live: LiveRun) -> None:
        raise AssertionError("worker processes claim their own runs: nothing is submitted")

    @property
    def host(self) -> Host:
        assert self._host is not None, "not serving"
        return self._host

    def _due_again(self, host: Host) -> bool:
        """Until idle, once every worker has exited: whether a run came due since, and the
        workers were started again for it. A suspect run alone in an isolated worker ends
        after the workers found nothing left, and its ending may give a key's slot back
        (or wake a parent), making a run due that no worker would ever see. They are not
        started again for the run they were last started for: one they could not take
        stays due, and `--until-idle` must still end."""
        due = host.store.next_due(1)
        if not due or due[0][0] > to_us(host.clock.now()) or due[0] == self._started_for:
            return False
        self._started_for = due[0]
        with self._lock:
            self._finished = 0
        self._spawn_all()
        return True

    def _start_workers(self) -> None:
        self._cpu_at_start = (_own_cpu(), _children_cpu())
        self._spawn_all()

    def _spawn_all(self) -> None:
        for slot in range(self.count):
            self._place(self._spawn(slot))
            threading.Thread(
                target=self._watch, args=(slot,), name=f"flowctl-engine-{slot + 1}", daemon=True
            ).start()

    def drain(self) -> None:
        """Every worker drains as this daemon does: no new claims, running handlers finish."""
        self._tell("drain")

    def stop(self) -> None:
        """Every worker stops at once and hands its runs back."""
        self._tell("stop")

    def done(self) -> bool:
        """Every worker has exited and none will be replaced (until idle: each found
        nothing left to do)."""
        with self._lock:
            return self._finished == self.count

    def close(self) -> None:
        """Tell the workers to drain (unless told to stop, or done), wait for them, kill any
        still there past the grace, and log where the CPU went."""
        self.drain()
        deadline = time.monotonic() + self.host.config.grace + KILL_AFTER
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            try:
                worker.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d did not exit in time: killing it", worker.popen.pid)
                worker.popen.kill()
                worker.popen.wait()
        self._closed.set()
        own = _own_cpu() - self._cpu_at_start[0]
        theirs = _children_cpu() - self._cpu_at_start[1]
        log.info(
            "workers: CPU %.2f s in this process, %.2f s in %d worker process(es); %d died",
            own,
            theirs,
            self.count + self.deaths,
            self.deaths,
        )

    # -- the processes -------------------------------------------------------------

    def _tell(self, order: str) -> None:
        """Under the lock: a watcher closes a dead worker's pipe under it too, so a write
        never goes to a descriptor number the process has since reused."""
        with self._lock:
            if self._order == "stop" or self._order == order:
                return
            self._order = order
            for worker in self._workers.values():
                if worker.control < 0:
                    continue
                try:
                    os.write(worker.control, f"{order}\n".encode())
                except OSError:
                    pass  # it is gone already: its watcher saw or will see it

    def _spawn(self, slot: int) -> _Worker:
        popen, write, ready = start_child("flowctl.daemon.worker", self._settings())
        log.debug("worker %d: pid %d", slot + 1, popen.pid)
        return _Worker(slot, popen, write, ready, time.monotonic())

    def _place(self, worker: _Worker) -> None:
        """Make `worker` its slot's, telling it an order given while it was starting."""
        with self._lock:
            self._workers[worker.slot] = worker
            if self._order is not None:
                os.write(worker.control, f"{self._order}\n".encode())

    def _settings(self) -> dict[str, Any]:
        """What a worker needs to be this daemon's twin (spawn.child_settings), and the
        file it opened (SQLite: a file replaced since is not served)."""
        store = self.host.store
        return {
            **child_settings(store, self.host.config),
            "file": store.file_identity(),
            "until_idle": self.until_idle,
            "worker_of": os.getpid(),
        }

    def _watch(self, slot: int) -> None:
        """Reap one slot's worker; replace it unless this daemon is draining or stopping
        (or it ran until idle and is done)."""
        unserved = 0
        while True:
            with self._lock:
                worker = self._workers[slot]
            served = _read_line(worker.ready)
            code = worker.popen.wait()
            lived = time.monotonic() - worker.started
            with self._lock:
                os.close(worker.control)
                os.close(worker.ready)
                worker.control = worker.ready = -1
                told = self._order
            if code == FATAL and told is None:
                self.fatal = f"worker pid {worker.popen.pid} could not serve (see its log)"
                self.host.stop()  # the supervisor drains the others and exits
            if (
                told is not None
                or code == FATAL
                or self._closed.is_set()
                or (self.until_idle and code == 0)
            ):
                with self._lock:
                    self._finished += 1
                return
            self.deaths += 1
            unserved = unserved + 1 if not served else 1
            pause = replacement_pause(unserved)
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            log.warning(
                "worker pid %d ended (%s) after %.1f s; its runs are reclaimed; starting another%s",
                worker.popen.pid,
                how,
                lived,
                f" in {pause:g} s" if pause else "",
            )
            if self._closed.wait(pause):
                return
            with self._lock:
                if self._order is not None:
                    self._finished += 1
                    return
            self._place(self._spawn(slot))


def _read_line(fd: int) -> bool:
    """Whether a line arrives on `fd` before its end (the worker served before it died)."""
    try:
        return os.read(fd, 1) != b""
    except OSError:
        return False
