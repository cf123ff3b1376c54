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
    flowctl.daemon.isolation   suspects, each alone in a process of its own; the reclaim pass
    flowctl.daemon.isolated    one isolated worker (`python -m flowctl.daemon.isolated`)
    flowctl.daemon.retention   pruning finished runs ([retention], `flowctl prune`)
    flowctl.daemon.notifier    delivering the notification outbox ([notify])
    flowctl.daemon.foreground  one run driven from the caller (`flowctl run --wait`, Client.run)

`Daemon` and `DaemonConfig` are loaded on first use (PEP 562), as flowctl's own public
names are: importing one part (`flowctl prune` imports retention) loads that part, not the
loop, the engine and the scheduler with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowctl.daemon.config import DaemonConfig
    from flowctl.daemon.loop import Daemon

_WHERE = {"Daemon": "flowctl.daemon.loop", "DaemonConfig": "flowctl.daemon.config"}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'flowctl.daemon' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


__all__ = ["Daemon", "DaemonConfig"]
