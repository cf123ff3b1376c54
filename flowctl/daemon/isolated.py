"""An isolated worker: one suspect run, alone in a process of its own (flowctl.daemon.isolation).

    python -m flowctl.daemon.isolated CONTROL_FD REPORT_FD

CONTROL_FD is the read end of a pipe from the daemon that started it: its one line is the
settings as JSON (the run, the database, the daemon's settings, the log level). At the
pipe's end (that daemon stops, or is gone, even by SIGKILL) this worker stops at once and
hands its run back. On REPORT_FD it writes the lease it claimed (`FENCE OWNER`), so that
daemon can charge the run a crash if this process dies under it, and it alone. If that
daemon is gone by then (the write fails), the run is handed back at once, not executed:
due now to the next daemon that isolates it, rather than held until this worker's own
death is noticed and reclaimed (one more reclaim, and a traceback in the log, each time).

It claims that one run as a claimer that runs it alone, executes it until its handler
stops (it ends, suspends, or is interrupted), and exits 0. SIGINT and SIGTERM are caught
and ignored (not SIG_IGN, which commands it starts would inherit): the daemon turns them
into its own drain and closes the pipe when its grace is over.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import IO, Any

from flowctl.clock import SystemClock
from flowctl.daemon.isolation import FATAL
from flowctl.daemon.lifecycle import DaemonStopping
from flowctl.daemon.loop import UNWIND_WAIT, Daemon
from flowctl.daemon.spawn import child_keys, child_start, config_of
from flowctl.errors import FlowctlError
from flowctl.store import Claim, open_store
from flowctl.tracing import flush as flush_traces

log = logging.getLogger(__name__)


def stop_at_eof(control: IO[bytes], daemon: Daemon) -> None:
    """At the pipe's end, interrupt the handler, give it UNWIND_WAIT to unwind, hand the run
    back, and exit: the run is a suspect still, for the next claimer that runs it alone."""
    for _ in control:
        pass
    daemon.stop(drain=False)
    lives = daemon.slots.lives()
    for live in lives:
        live.interrupt(DaemonStopping("the daemon that isolated this run stopped"))
    until = daemon.clock.monotonic() + UNWIND_WAIT
    while len(daemon.slots) and daemon.clock.monotonic() < until:
        daemon.life.wait(until)
    if len(daemon.slots):
        try:
            daemon.heartbeat.release([live.lease for live in lives], "its daemon stopped")
        except Exception:
            log.exception("could not release the run")
        flush_traces()  # os._exit runs no atexit hook
        os._exit(0)


def serve(settings: dict[str, Any], control: IO[bytes], report: int) -> int:
    """Claim the run alone and execute it, reporting the lease; stop at the pipe's end.
    The exit code: 0 (its handler stopped, or the run was not there to claim)."""
    store = open_store(
        settings["db"], durability=settings["durability"], create=False, keys=child_keys(settings)
    )
    try:
        config = config_of({**settings["config"], "retention": {}})
        daemon = Daemon(store, SystemClock(), config, only_run_id=settings["run_id"])
        threading.Thread(
            target=stop_at_eof, args=(control, daemon), name="flowctl-orders", daemon=True
        ).start()
        beat = threading.Thread(
            target=daemon.heartbeat.loop, args=(daemon.life,), name="flowctl-heartbeat"
        )
        beat.start()
        try:
            with store.own_writes():
                daemon.reap_dead_owners(force=True)  # a dead worker's lease lapses at once
                for claim in daemon.claim(daemon.clock.now(), 1):
                    if reported(report, claim):
                        daemon.execute(claim)
                    else:  # its daemon is gone: the run is due at once to the next one
                        daemon.heartbeat.release([claim.lease], "its daemon stopped")
        finally:
            daemon.life.served.set()
            beat.join(timeout=5)
        return 0
    finally:
        store.close()


def reported(report: int, claim: Claim) -> bool:
    """Tell the daemon that isolated this run the lease claimed (so it alone can charge a
    crash of this process to the run): False when that daemon is gone (the pipe is
    closed at its end). The run is then not executed here: with nobody to see this
    process die, a crash of it would be charged to nobody."""
    try:
        os.write(report, f"{claim.lease.fence} {claim.lease.owner}\n".encode())
    except OSError:  # EPIPE: its reader, the daemon, has died or closed it
        return False
    return True


def main(argv: list[str]) -> int:
    control, report, settings = child_start(argv, "isolated")
    try:
        return serve(settings, control, report)
    except FlowctlError as e:  # the database is gone, say: not the run's fault
        log.error("%s", e)
        return FATAL


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
