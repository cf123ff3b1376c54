"""How a daemon's claimed runs execute: one interface, its kind chosen once from the
settings (flowctl.daemon.loop.choose), as huey's consumer picks its worker Environment.

    Inline      in the caller's thread, at once: what tick() does outside run_forever
                (tests, flowctl.testing) and the one-run foreground worker
    Threads     on `concurrency` threads sharing the daemon's connection
    Greenlets   as greenlets on one thread, a round of writes per COMMIT (flowctl.daemon.batch)
    Processes   in worker processes, each a whole daemon (flowctl.daemon.processes)

`serve` runs the daemon until it stops. For the kinds in this process the daemon's own
loop claims and `submit`s here (Greenlets also claim as their rounds end, for the slots
their runs freed); Processes has a loop of its own (its workers claim).
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, Protocol

from flowctl.clock import Clock, SystemClock
from flowctl.daemon.batch import BatchRunner
from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.lifecycle import Lifecycle
from flowctl.daemon.slots import Slots
from flowctl.runtime.engine import Outcome
from flowctl.runtime.live import LiveRun
from flowctl.store import Claim, Store

# Threads of a daemon that write beside its handlers: the loop, the heartbeat, the
# notifier and a watcher of the file or a flush of spans.
OWN_WRITERS = 4


class Host(Protocol):
    """What an executor needs of the daemon it executes for (flowctl.daemon.loop.Daemon)."""

    store: Store
    clock: Clock
    config: DaemonConfig
    life: Lifecycle
    slots: Slots

    def execute(self, claim: Claim, live: LiveRun | None = None) -> Outcome: ...
    def claim_in_round(self, writes: bool) -> bool: ...
    def serve_loop(self, until_idle: bool, executor: Executor) -> int: ...
    def watch_file(self, *, now: bool = False) -> None: ...
    def stop(self, *, drain: bool = True) -> None: ...
    def isolate(self) -> bool: ...
    def close_isolated(self, grace: float) -> None: ...


class Executor(ABC):
    """Where claimed runs execute. `wakes_per_run`: the loop is woken as each run ends,
    to claim for the freed slot (the batch runner wakes it once per round instead)."""

    wakes_per_run: ClassVar[bool] = True
    # The executor claims for its freed slots itself, in its write round (the batch
    # runner): the wheel then leaves a run released behind a key to that claim.
    claims_in_round: ClassVar[bool] = False

    @abstractmethod
    def serve(self, host: Host, until_idle: bool) -> int:
        """Run `host` until it stops; returns its exit code."""

    @abstractmethod
    def submit(self, claim: Claim, live: LiveRun) -> None:
        """Execute one claimed run (its slot is taken): at once, or handed on."""


class InProcess(Executor):
    """The kinds that execute in the daemon's own process, while its loop claims."""

    def serve(self, host: Host, until_idle: bool) -> int:
        """The daemon's loop claims and this executes, on the daemon's one connection, so
        concurrent handlers' commits share one fsync, and on SQLite daemons on one file
        take turns writing."""
        store = host.store
        store.set_group_commit(host.config.concurrency > 1)
        store.take_turns()  # SQLite: alternate write turns with other daemons
        self.start(host)
        try:
            with store.own_writes():
                return host.serve_loop(until_idle, self)
        finally:
            self.close()
            store.set_group_commit(False)

    @abstractmethod
    def start(self, host: Host) -> None:
        """Get ready to execute `host`'s claims."""

    @abstractmethod
    def close(self) -> None:
        """No new claim comes: let what runs end (the daemon interrupts it if it must)."""


class Inline(InProcess):
    """In the caller's thread: `submit` returns once the run's handler has stopped."""

    def __init__(self, execute: Callable[[Claim, LiveRun], object]) -> None:
        self._execute = execute

    def start(self, host: Host) -> None:
        pass  # nothing runs beside the caller

    def submit(self, claim: Claim, live: LiveRun) -> None:
        self._execute(claim, live)

    def close(self) -> None:
        pass


class Threads(InProcess):
    """`concurrency` threads, each executing one claim at a time from a queue."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._jobs: queue.SimpleQueue[tuple[Claim, LiveRun] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def start(self, host: Host) -> None:
        host.store.writers(self.count + OWN_WRITERS)
        for i in range(self.count):
            t = threading.Thread(
                target=self._work, args=(host,), name=f"flowctl-worker-{i}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def submit(self, claim: Claim, live: LiveRun) -> None:
        self._jobs.put((claim, live))

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self, host: Host) -> None:
        with host.store.own_writes():
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                host.execute(*job)


class Greenlets(InProcess):
    """Handlers as greenlets on one thread, their writes committed a round at a time."""

    wakes_per_run = False  # the runner wakes the loop once per round in which runs ended
    claims_in_round = True

    def __init__(self) -> None:
        self._runner: BatchRunner | None = None

    def start(self, host: Host) -> None:
        def failed(error: BaseException) -> None:
            # The runner broke (a bug, logged there): its handlers will never end, so stop
            # now; the stop hands their runs back for reclaim.
            host.stop(drain=False)

        self._runner = BatchRunner(
            host.store,
            host.execute,
            ended=host.life.wake.set,
            failed=failed,
            claim=host.claim_in_round,
        )
        if isinstance(host.clock, SystemClock):
            config = host.config
            self._runner.allow_rests(host.clock, host.slots, config.lease, config.heartbeat)
        self._runner.start()

    def submit(self, claim: Claim, live: LiveRun) -> None:
        assert self._runner is not None, "submit before start"
        self._runner.submit(claim, live)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


def batched(config: DaemonConfig, *, one_run: bool) -> bool:
    """Whether handlers run as greenlets on one thread (flowctl.daemon.batch), their writes
    in the store's write round, rather than on `concurrency` threads: when asked for
    (`batch`), and not for a one-run worker (`run --wait`)."""
    return config.batch and not one_run and config.concurrency > 1
