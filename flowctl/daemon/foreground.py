"""The foreground worker behind `flowctl run --wait` and `Client.run`: a Daemon restricted
to one run, driven from the caller's thread under the usual lease rules.

Beside flowctl.daemon.loop (which serves every run), so that each module keeps to one job.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowctl.clock import Clock
from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.daemon.loop import Daemon
from flowctl.model import EntryState, JournalEntry, Run, RunStatus
from flowctl.runtime.engine import Engine, Outcome
from flowctl.store import Claim, Store
from flowctl.tracing import flush as flush_traces
from flowctl.transitions import awaited_child

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
    other processes) and resumes the run itself, unless a daemon gets there first. A
    child run it waits for is driven here the same way (see _carried_child).
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
    drive = _Drive(wait, None if timeout is None else clock.monotonic() + timeout)
    restore = _mark_operator_interrupts(worker.engine, drive.executing, drive.idle)
    try:
        return _heartbeating(worker, run_id, drive, on_wait)
    finally:
        restore()
        flush_traces()  # the run's spans, before the command prints its end and exits


@dataclass
class _Drive:
    """How a foreground drive goes, shared by the run and the child runs driven with it:
    whether it waits through sleeps, when it gives up (the clock's monotonic time), and
    the events the operator's Ctrl-C sets or looks at."""

    wait: bool
    give_up: float | None
    idle: threading.Event = field(default_factory=threading.Event)
    executing: threading.Event = field(default_factory=threading.Event)


def _heartbeating(
    worker: Daemon, run_id: str, drive: _Drive, on_wait: Callable[[], None] | None
) -> Run:
    """_until_done, with a thread heartbeating the one-run worker's leases meanwhile."""
    stop = threading.Event()
    hb = threading.Thread(target=_heartbeat_until, args=(worker, stop), daemon=True)
    hb.start()
    try:
        return _until_done(worker, run_id, drive, on_wait)
    finally:
        stop.set()


def _until_done(
    worker: Daemon, run_id: str, drive: _Drive, on_wait: Callable[[], None] | None
) -> Run:
    """Claim and run `run_id` whenever it is due, until it ends (or, unless `drive.wait`,
    until it is not due; or past `drive.give_up`); returns the run as it then is."""
    store, clock = worker.store, worker.clock
    while True:
        _raise_if_operator_interrupted(worker.engine)
        worker.reap_dead_owners()  # a dead daemon's lease on this run lapses at once
        run = store.get_run(run_id)
        if run.status.is_terminal:
            return run
        start, now = clock.monotonic(), clock.now()
        if run.run_at is None or run.run_at > now:  # not due
            if _carried_child(worker, run, drive):
                continue  # the child ended: its parent is due now
            if not drive.wait:
                return run
            if on_wait is not None:  # someone else may be running it: say what it did
                on_wait()
            if drive.give_up is not None and clock.monotonic() >= drive.give_up:
                return run
            pause = POLL_INTERVAL
            if run.run_at is not None and run.status is not RunStatus.RUNNING:
                pause = max(0.0, min(pause, (run.run_at - now).total_seconds()))
            clock.wait_until(drive.idle, start + pause)
            continue
        claims = worker.claim(now, 1)
        for claim in claims:
            drive.executing.set()
            try:
                worker.execute(claim)
            finally:
                drive.executing.clear()
        if not claims:
            clock.wait(drive.idle, POLL_INTERVAL)


def _carried_child(worker: Daemon, run: Run, drive: _Drive) -> bool:
    """A run waiting for its child run (`ctx.child`, a YAML `workflow:` step): drive the
    child here as this run is driven (to its end when waiting, else until it parks), so a
    run in the foreground needs no daemon for its children, nor theirs (this recurses).
    A daemon may claim the child first: it is then waited for, as any run driven here.
    True when the child ended, which made its parent due."""
    store = worker.store
    child_id = awaited_child(run.status, store.last_entry(run.run_id, [EntryState.PENDING]))
    if child_id is None or store.get_run(child_id).status.is_terminal:
        return False
    child = Daemon(
        store,
        worker.clock,
        worker.config,
        engine=worker.engine,
        only_run_id=child_id,
    )
    return _heartbeating(child, child_id, drive, None).status.is_terminal


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
