"""The foreground worker behind `flowctl run --wait` and `Client.run`: a Daemon restricted
to one run, driven from the caller's thread under the usual lease rules.

Beside flowctl.daemon.loop (which serves every run), so that each module keeps to one job.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from flowctl.clock import Clock
from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.daemon.loop import Daemon
from flowctl.model import JournalEntry, Run, RunStatus
from flowctl.runtime.engine import Engine, Outcome
from flowctl.store import Claim, Store

log = logging.getLogger(__name__)


def drive_run(
    store: Store,
    clock: Clock,
    run_id: str,
    config: DaemonConfig | None = None,
    *,
    wait: bool,
    on_checkpoint: Callable[[JournalEntry], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    on_claim: Callable[[Claim], None] | None = None,
    on_wait: Callable[[], None] | None = None,
    engine: Engine | None = None,
    timeout: float | None = None,
) -> Any:
    """Act as a worker for one run (`flowctl run`, `Client.run`) under the usual lease rules.

    Runs it now in this thread; returns when it ends, or — unless `wait` — when it
    suspends. With `wait`, it waits through sleeps (noticing signals and wakes made by
    other processes) and resumes the run itself, unless a daemon gets there first.
    `on_claim` is told of each claim before the handler runs; `on_wait`, each time round
    the wait while the run is not due here (a daemon may be running it).
    """
    worker = Daemon(
        store,
        clock,
        config or DaemonConfig(concurrency=1),
        engine=engine or Engine(store, clock, foreground=True),
        only_run_id=run_id,
        on_checkpoint=on_checkpoint,
        on_outcome=on_outcome,
        on_claim=on_claim,
    )
    stop = threading.Event()
    hb = threading.Thread(target=_heartbeat_until, args=(worker, stop), daemon=True)
    hb.start()
    idle = threading.Event()
    executing = threading.Event()
    restore = _mark_operator_interrupts(worker.engine, executing, idle)
    try:
        give_up = None if timeout is None else clock.monotonic() + timeout
        return _until_done(worker, run_id, wait, on_wait, give_up, idle, executing)
    finally:
        stop.set()
        restore()


def _until_done(
    worker: Daemon,
    run_id: str,
    wait: bool,
    on_wait: Callable[[], None] | None,
    give_up: float | None,
    idle: threading.Event,
    executing: threading.Event,
) -> Run:
    """Claim and run `run_id` whenever it is due, until it ends (or, unless `wait`, until
    it is not due; or past `give_up`); returns the run as it then is."""
    store, clock = worker.store, worker.clock
    while True:
        _raise_if_operator_interrupted(worker.engine)
        worker.reap_dead_owners()  # a dead daemon's lease on this run lapses at once
        run = store.get_run(run_id)
        if run.status.is_terminal:
            return run
        start, now = clock.monotonic(), clock.now()
        if run.run_at is None or run.run_at > now:  # not due
            if not wait:
                return run
            if on_wait is not None:  # someone else may be running it: say what it did
                on_wait()
            if give_up is not None and clock.monotonic() >= give_up:
                return run
            pause = POLL_INTERVAL
            if run.run_at is not None and run.status is not RunStatus.RUNNING:
                pause = max(0.0, min(pause, (run.run_at - now).total_seconds()))
            clock.wait_until(idle, start + pause)
            continue
        claims = worker.claim(now, 1)
        for claim in claims:
            executing.set()
            try:
                worker.execute(claim)
            finally:
                executing.clear()
        if not claims:
            clock.wait(idle, POLL_INTERVAL)


def _raise_if_operator_interrupted(engine: Engine) -> None:
    if engine.operator_interrupted:
        raise KeyboardInterrupt


def _mark_operator_interrupts(
    engine: Engine, executing: threading.Event, idle: threading.Event
) -> Callable[[], None]:
    """A real SIGINT is the operator's (a KeyboardInterrupt raised by workflow code fails
    its attempt instead): raised into an executing handler, else it wakes the wait loop,
    which raises where no lock is held. Returns the undo; off the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return lambda: None  # someone else handles SIGINT here: leave it to them

    def on_sigint(signum: int, frame: object) -> None:
        engine.operator_interrupted = True
        if executing.is_set():
            raise KeyboardInterrupt
        idle.set()

    signal.signal(signal.SIGINT, on_sigint)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


def _heartbeat_until(worker: Daemon, stop: threading.Event) -> None:
    due = worker.clock.monotonic() + worker.config.heartbeat
    while not worker.clock.wait_until(stop, due):
        due = max(due, worker.clock.monotonic()) + worker.config.heartbeat
        try:
            worker.heartbeat_once()
        except Exception:
            log.exception("heartbeat failed")
