"""A worker of `flowctl daemon --workers N`: a whole daemon, started by another.

    python -m flowctl.daemon.worker CONTROL_FD READY_FD

CONTROL_FD is the read end of a pipe from the daemon that started this one (see
flowctl.daemon.processes): its first line is the settings as JSON (the database, the
daemon's settings, the log level), then `drain` or `stop` when that daemon drains or
stops. On READY_FD this one writes a line once it serves (its first pass is done), so
that daemon can tell a worker that died serving from one that could not start. At the
pipe's end that daemon is gone (even by SIGKILL): this one stops at once and hands its
runs back. SIGINT and SIGTERM do nothing here: the daemon that started this
one turns them into `drain` for all its workers, so a Ctrl-C sent to the whole process
group is not a second signal here. They are caught, not ignored: an ignored signal stays
ignored in every program this worker starts (a step's own subprocess), a caught one is
back at its default action there.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import IO

from flowctl.clock import SystemClock
from flowctl.daemon.loop import Daemon
from flowctl.daemon.processes import FATAL
from flowctl.daemon.spawn import child_keys, child_start, config_of
from flowctl.errors import DatabaseNotFoundError, FlowctlError
from flowctl.store import open_store

log = logging.getLogger(__name__)


def listen(control: IO[bytes], daemon: Daemon) -> None:
    """Orders from the daemon that started this one, until its end of the pipe closes."""
    for line in control:
        order = line.strip()
        if order == b"drain":
            daemon.stop(drain=True)
        elif order == b"stop":
            daemon.stop(drain=False)
    # That daemon closes its end only after this process has exited: it is gone.
    log.warning("the daemon that started this worker is gone: stopping now")
    daemon.stop(drain=False)


def say_ready(fd: int, daemon: Daemon) -> None:
    daemon.serving.wait()
    try:
        os.write(fd, b"serving\n")
    except OSError:
        pass
    os.close(fd)


def main(argv: list[str]) -> int:
    """Serve as a worker of the daemon at the other end of CONTROL_FD; the exit code."""
    control, ready, settings = child_start(argv, "worker")
    try:
        # Never create it: a file deleted since the daemon opened it stops the daemon.
        store = open_store(
            settings["db"],
            durability=settings["durability"],
            create=False,
            keys=child_keys(settings),
        )
    except DatabaseNotFoundError:
        log.error("database file %s was deleted before this worker opened it", settings["db"])
        return FATAL
    except FlowctlError as e:
        log.error("%s", e)
        return FATAL
    try:
        expected = settings.get("file")  # SQLite: (device, inode) the daemon opened
        opened = store.file_identity()
        if expected is not None and (opened is None or list(opened) != expected):
            # Replaced (a restore, say) between the daemon's open and this one's.
            log.error(
                "database file %s was replaced by another file while the daemon started its"
                " workers; stopping without writing to it: start the daemon again to serve"
                " the file now at that path",
                settings["db"],
            )
            return FATAL
        daemon = Daemon(
            store, SystemClock(), config_of(settings["config"]), worker_of=settings["worker_of"]
        )
        threading.Thread(
            target=listen, args=(control, daemon), name="flowctl-orders", daemon=True
        ).start()
        threading.Thread(
            target=say_ready, args=(ready, daemon), name="flowctl-ready", daemon=True
        ).start()
        return daemon.run_forever(until_idle=bool(settings["until_idle"]))
    except FlowctlError as e:  # the database is gone, say: another worker could not serve
        log.error("%s", e)
        return FATAL
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
