"""The daemon: it wakes sleepers on time, runs what is queued, and survives its own crashes.

flowctl.daemon.loop        Daemon: tick() and run_forever(), claims, drain
flowctl.daemon.config      DaemonConfig: its settings, and what it refuses
flowctl.daemon.lifecycle   its stop state (serving, draining, stopped), signals
flowctl.daemon.wheel       the timer wheel (pure) and the daemon's refill of it
flowctl.daemon.slots       the runs its handlers execute now
flowctl.daemon.heartbeat   lease extension, and what live handlers are told
flowctl.daemon.watches     the clock, free space, the database file, dead owners
flowctl.daemon.executor    how claims execute: inline, threads, greenlets ...
flowctl.daemon.batch       ... the batch runner (greenlets) ...
flowctl.daemon.processes   ... or worker processes (`--workers N`), supervised
flowctl.daemon.worker      one worker process (`python -m flowctl.daemon.worker`)
flowctl.daemon.retention   pruning finished runs ([retention], `flowctl prune`)
flowctl.daemon.notifier    delivering the notification outbox ([notify])
flowctl.daemon.foreground  one run driven from the caller (`flowctl run --wait`, Client.run)
"""

from flowctl.daemon.config import DaemonConfig
from flowctl.daemon.loop import Daemon

__all__ = ["Daemon", "DaemonConfig"]
