"""`flowctl daemon --workers N`: handlers run in N worker processes, one process owns the file.

Why this shape (issue 14, measured): two daemons on one SQLite file give fewer runs/s
than one, because each commits its own small transactions and they queue on SQLite's
single write lock (each waiting in the busy handler). So the daemon process stays the
only writer: it claims, keeps the timer wheel, heartbeats every lease, and commits
every transition. What it gives away is the per-run Python work — the handler, the
replay context, the engine's decisions — to worker processes, so that work uses every
core instead of one GIL. A worker's store calls arrive here as JSON lines; the thread
reading that worker executes every call that arrived together in one transaction (each
in its own savepoint, so one failing call changes nothing of the others; two readers
writing at once share one COMMIT through the store's group commit), then answers each. A worker waits for that answer before its handler
goes on, so every checkpoint is committed (synchronous=FULL) before the step after it
runs, exactly as in process; batching only shares the fsync.

A worker killed at any moment (SIGKILL included) loses nothing: everything it asked for
before dying is executed in the order it was asked (its reader handles the death after
its last call), then the leases of the runs it held lapse now through the store's
`lapse_runs` (fenced: a run that is no longer ours is left alone), as a dead daemon's
do. They are due now and reclaimed by the usual claim rules: a run taken from a dead worker is a
suspect and runs alone next, so a run that keeps killing its worker is dead-lettered as
poison, and a healthy one simply completes. A new worker takes the dead one's place.
Nothing here is pickled: see flowctl.workers.wire. On PostgreSQL the shape is the same
(the daemon process writes, one transaction per batch through the store's run_batch, and
a dead worker's leases lapse through its lapse_runs), so poison is charged alike.

What it buys, measured on 2 shared cores (`benchmarks/scaling.py --concurrency 8,32
--workers 1,2 --big 0 --runs 2000`, which prints the split below from the daemon's exit
line): for trivial three-step runs the daemon process alone spends about as much CPU per
run with two workers (1.3 ms at -c 32, 2.1 ms at -c 8) as the whole single-process daemon
does (1.2-1.3 ms): what leaves it (the handlers, the engine's decisions) is replaced by the
protocol (encoding, a socket round trip per store call, smaller groups per COMMIT), and
the workers spend 1.3-1.5 ms more. So trivial runs go at 500-300 runs/s with two workers
against 760-600 with one. Step bodies that burn CPU under the GIL gain instead
(`--workflow heavy`, 3 x 2 ms of CPU per run, -c 8: 111 -> 141 runs/s; the daemon process
spends 2.6 ms per run and the workers 8.1 ms, against 8.4 ms in one process). The default
stays 1 (threads of the daemon process); `--workers N` is there, crash-tested, for
handlers whose own CPU is the limit. The daemon's exit line says where its CPU went
("CPU x s in this process, y s in N worker process(es)"): measure yours before turning it on.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flowctl.context import LiveRun
from flowctl.engine import Outcome
from flowctl.errors import Interrupt
from flowctl.store.records import Claim
from flowctl.workers.wire import decode, dumps_line, encode, error_message, loads_line
from flowctl.workers.worker import CALLS

if TYPE_CHECKING:
    from flowctl.daemon import Daemon

log = logging.getLogger(__name__)

EXIT_WAIT = 5.0  # seconds a worker gets to exit when told, before SIGKILL


def _cpu_now() -> tuple[float, float]:
    """User + system CPU seconds of this process (every thread) and of its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class RemoteLive(LiveRun):
    """The owner's view of a run executing in a worker: the heartbeat extends its lease
    here; what the heartbeat tells it (cancel, deadline, lost lease, pause) is forwarded."""

    def __init__(self, claim: Claim, proc: _Proc, daemon: Daemon) -> None:
        run = claim.run
        super().__init__(claim.lease, daemon.clock, run.exec_spent, run.timeout)
        self._proc = proc

    def request_pause(self) -> None:
        super().request_pause()
        self._proc.send({"op": "pause", "run_id": self.run_id})

    def interrupt(self, exc: Interrupt) -> None:
        super().interrupt(exc)
        message = {"op": "interrupt", "run_id": self.run_id, "type": type(exc).__name__}
        self._proc.send({**message, "message": str(exc)})


@dataclass(eq=False)
class _Proc:
    """One worker process and the runs it holds (run_id -> (claim, live))."""

    slot: int
    popen: subprocess.Popen[bytes]
    sock: socket.socket
    held: dict[str, tuple[Claim, RemoteLive]] = field(default_factory=dict)
    dead: bool = False
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message: dict[str, Any]) -> None:
        """Best effort: a dead worker's socket refuses, and its death is handled by the
        worker's reader (which releases every run it held)."""
        self.send_all([message])

    def send_all(self, messages: list[dict[str, Any]]) -> None:
        """Several messages in one write (each its own line), best effort as send()."""
        data = b"".join(dumps_line(m) for m in messages)
        try:
            with self.send_lock:
                self.sock.sendall(data)
        except OSError:
            pass


class WorkerPool:
    """N worker processes executing the daemon's claims; their store calls committed here."""

    def __init__(self, daemon: Daemon, workers: int) -> None:
        self.daemon = daemon
        self.store = daemon.store
        self.workers = workers
        self._procs: list[_Proc] = []
        self._lock = threading.Lock()  # _procs, each proc's held and dead
        self._closing = False
        self.deaths = 0
        self.batches = self.calls = 0  # for the log line at close: calls per COMMIT
        self._cpu_at_start = (0.0, 0.0)  # (this process, reaped children): see cpu_split

    # -- the daemon's side -------------------------------------------------------

    def start(self) -> None:
        self._cpu_at_start = _cpu_now()
        with self._lock:
            self._procs = [self._spawn(i) for i in range(self.workers)]

    def cpu_split(self) -> tuple[float, float]:
        """CPU seconds since start(): (this process, the worker processes reaped so far).

        Whether `--workers N` pays is this split: the owner's share is the claim, every
        SQL statement and COMMIT, and the protocol; the workers' is the handlers and the
        engine. Printed at close, so an operator can measure their own workflows."""
        own, children = _cpu_now()
        return own - self._cpu_at_start[0], children - self._cpu_at_start[1]

    def live(self, claim: Claim) -> RemoteLive:
        """Assign the claim to the least busy live worker and hold it there (not sent yet)."""
        with self._lock:
            proc = min((p for p in self._procs if not p.dead), key=lambda p: len(p.held))
            live = RemoteLive(claim, proc, self.daemon)
            proc.held[claim.run.run_id] = (claim, live)
        return live

    def submit(self, claim: Claim, live: LiveRun) -> None:
        if not isinstance(live, RemoteLive):
            raise RuntimeError("WorkerPool.submit: the live run was not made by WorkerPool.live")
        run_id = claim.run.run_id
        message = {"op": "run", "claim": encode(claim)}
        try:  # read here, where the context would read them first thing: no round trips
            journal, versions = claim.journal, claim.versions  # {}: the claim saw none
            message["journal"] = encode(self.store.journal(run_id) if journal is None else journal)
            message["versions"] = encode(
                self.store.versions(run_id) if versions is None else versions
            )
        except Exception as e:  # the worker asks for them itself, and gets this error then
            log.warning("run %s: journal not read ahead: %s", run_id, e)
        live._proc.send(message)

    def kill_commands(self) -> None:
        """The drain is over: every worker kills the commands its handlers still run."""
        for proc in list(self._procs):
            proc.send({"op": "kill"})

    def close(self) -> None:
        """Tell every worker to exit and reap them (SIGKILL a straggler)."""
        self._closing = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            proc.send({"op": "exit"})
        for proc in procs:
            try:
                proc.popen.wait(timeout=EXIT_WAIT)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        for proc in procs:
            proc.sock.close()
        own, theirs = self.cpu_split()
        log.info(
            "workers: %d store calls in %d transactions (%.1f per COMMIT); CPU %.2f s in this"
            " process, %.2f s in %d worker process(es); %d worker(s) died",
            self.calls,
            self.batches,
            self.calls / max(1, self.batches),
            own,
            theirs,
            self.workers + self.deaths,
            self.deaths,
        )

    def pids(self) -> list[int]:
        with self._lock:
            return [p.popen.pid for p in self._procs if not p.dead]

    # -- processes ---------------------------------------------------------------

    def _spawn(self, slot: int) -> _Proc:
        ours, theirs = socket.socketpair()
        level = logging.getLevelName(logging.getLogger("flowctl").getEffectiveLevel())
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flowctl.workers.worker",
                str(theirs.fileno()),
                str(self.daemon.config.concurrency),
                str(level).lower(),
            ],
            pass_fds=(theirs.fileno(),),
            env={**os.environ, "FLOWCTL_WORKER_OF": self.daemon.owner},
        )
        theirs.close()
        proc = _Proc(slot, popen, ours)
        threading.Thread(
            target=self._read_loop, args=(proc,), name=f"flowctl-reader-{slot}", daemon=True
        ).start()
        log.debug("worker %d: pid %d", slot, popen.pid)
        return proc

    def _read_loop(self, proc: _Proc) -> None:
        """Everything one worker says, in order. The calls that arrived together are
        committed together (see _commit); the worker's death is handled here, after its
        last call, so nothing it asked for is lost or reordered."""
        buf = b""
        try:
            with self.store.own_writes():
                while True:
                    data = proc.sock.recv(1 << 16)
                    if not data:
                        break
                    *lines, buf = (buf + data).split(b"\n")
                    calls = []
                    for line in lines:
                        message = loads_line(line)
                        op = message["op"]
                        if op == "call":
                            calls.append(message)
                        elif op == "done":
                            self._done(proc, message["run_id"], decode(message["outcome"]))
                        elif op == "beat":
                            self._beat(proc, message["steps"])
                    if calls:
                        self._commit(proc, calls)
        except OSError as e:
            if not self._closing:  # close() shuts the sockets of workers told to exit
                log.warning("worker pid %d: %s", proc.popen.pid, e)
        except Exception:  # a message we cannot handle: this worker cannot be trusted on
            log.exception("worker pid %d: bad message; killing it", proc.popen.pid)
            proc.popen.kill()
        finally:
            self._buried(proc)

    def _done(self, proc: _Proc, run_id: str, outcome: Outcome) -> None:
        with self._lock:
            held = proc.held.pop(run_id, None)
        if held is not None:
            claim, live = held
            self.daemon._release_slot(run_id)
            self.daemon._settle(claim, live, outcome)

    def _beat(self, proc: _Proc, steps: dict[str, list[str] | None]) -> None:
        """A worker's beat: run id -> [step label, ISO start] (None between steps)."""
        with self._lock:
            for run_id, step in steps.items():
                held = proc.held.get(run_id)
                if held is not None:
                    held[1].step = (
                        None if step is None else (step[0], datetime.fromisoformat(step[1]))
                    )

    # -- the writes ----------------------------------------------------------------

    def _commit(self, proc: _Proc, messages: list[dict[str, Any]]) -> None:
        """Execute the calls in one transaction, then answer each (after the COMMIT). Two
        workers' readers committing at once share one COMMIT too (group commit)."""
        calls = [self._bind(message) for message in messages]
        self.batches += 1
        self.calls += len(calls)
        results = self.store.run_batch(calls)
        replies = []
        for message, (ok, value) in zip(messages, results, strict=True):
            reply: dict[str, Any] = {"op": "reply", "id": message["id"]}
            if ok:
                try:
                    reply["ok"] = encode(value)
                except TypeError as e:
                    reply["err"] = error_message(e)
            else:
                reply["err"] = error_message(value)
            replies.append(reply)
        proc.send_all(replies)  # one write for the batch: the worker splits it into lines

    def _bind(self, message: dict[str, Any]) -> Any:
        method = message["m"]
        if method not in CALLS:
            name = str(method)

            def refused() -> Any:
                raise RuntimeError(f"a worker asked for store method {name!r}, which it may not")

            return refused
        fn = getattr(self.store, method)
        args, kwargs = decode(message["a"]), decode(message["k"])
        return lambda: fn(*args, **kwargs)

    def _buried(self, proc: _Proc) -> None:
        """A worker is gone and every call it made is committed: release what it held."""
        code = proc.popen.wait()
        with self._lock:
            proc.dead = True
            held = list(proc.held.values())
            proc.held.clear()
        proc.sock.close()
        if code == 0 and (self._closing or not held):
            return
        self.deaths += 1
        reason = f"worker process {proc.popen.pid} died (exit {code})"
        if held:
            log.warning("%s holding %d run(s); their leases lapse for reclaim", reason, len(held))
            # Lapsed, not released: a crash keeps its charge (run.solo), so a run that
            # kills its worker each time it runs alone is dead-lettered as poison.
            try:
                self.store.lapse_runs(
                    [live.lease for _, live in held], self.daemon.clock.now(), reason
                )
            except Exception:
                log.exception("could not release the runs of a dead worker")
            for claim, live in held:
                self.daemon._release_slot(claim.run.run_id)
                error = {"type": "WorkerDied", "message": reason}
                self.daemon._settle(claim, live, Outcome(claim.run.run_id, None, error=error))
        else:
            log.warning("%s", reason)
        if not self._closing and not self.daemon._stopping:
            with self._lock:
                self._procs[proc.slot] = self._spawn(proc.slot)
