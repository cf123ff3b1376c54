"""How the daemon starts a Python process of its own (a worker of `--workers N`, an
isolated worker for a suspect), and how such a child starts: by the Python running the
daemon, with its isolation flags, as `python -m MODULE CONTROL_FD BACK_FD` (or from the
single-file build the daemon runs from), its settings the first line on CONTROL_FD."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import zipfile
from dataclasses import asdict
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any

from flowctl.daemon.config import DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import Store

if TYPE_CHECKING:
    from flowctl.crypto.cipher import Keyring

# The modules a daemon starts as processes; the .pyz's entry point (flowctl.__main__)
# takes `-m` of these too.
CHILD_MODULES = ("flowctl.daemon.worker", "flowctl.daemon.isolated")


def child_argv(module: str, *args: str) -> list[str]:
    """How to start `module` with `args`: `python -m` of it, by the Python running this
    daemon with its isolation flags. A daemon running from the single-file build
    (`python3 flowctl.pyz daemon`) starts it from that same file instead, whose entry point
    takes `-m MODULE` too: that Python may not have flowctl installed at all, so `python -m`
    alone dies with ModuleNotFoundError."""
    if module not in CHILD_MODULES:
        raise ValueError(f"{module} is not a process the daemon starts")
    python = [sys.executable]
    if sys.flags.isolated:
        python.append("-I")
    else:
        python += ["-E"] if sys.flags.ignore_environment else []
        python += ["-s"] if sys.flags.no_user_site else []
    archive = running_archive()
    return [*python, *([archive] if archive is not None else []), "-m", module, *args]


def running_archive() -> str | None:
    """The zip application (a .pyz) this process was started as, if it was one: its path
    is sys.argv[0], and the program's __main__ module was loaded from inside it."""
    argv0 = sys.argv[0] if sys.argv else ""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if not argv0 or not os.path.isfile(argv0):
        return None
    archive = os.path.abspath(argv0)
    if not os.path.abspath(main_file).startswith(archive + os.sep):
        return None
    return archive if zipfile.is_zipfile(archive) else None


def child_settings(store: Store, config: DaemonConfig) -> dict[str, Any]:
    """What every child process needs to open the daemon's database as the daemon did: the
    URL or path itself (never on a command line), its durability, the daemon's settings
    for one process (retention in seconds: JSON) and the log level. Each kind adds its
    own (see config_of for the way back)."""
    values = asdict(config)
    values["workers"] = 1
    values["retention"] = {
        status.value: age.total_seconds() for status, age in config.retention.items()
    }
    return {
        "db": store.location,
        "durability": store.durability,
        "config": values,
        "log_level": logging.getLevelName(logging.getLogger("flowctl").getEffectiveLevel()),
    }


def child_keys(settings: dict[str, Any]) -> Keyring | None:
    """The key ring a child opens the database with: the daemon's key file, if any."""
    path = settings["config"].get("key_file")
    if not path:
        return None
    from flowctl.crypto.cipher import load_keyring

    return load_keyring(path)


def config_of(values: dict[str, Any]) -> DaemonConfig:
    """The DaemonConfig a child runs with (child_settings' "config"): the daemon's, one
    process."""
    values = dict(values)
    values["retention"] = {
        RunStatus(status): timedelta(seconds=seconds)
        for status, seconds in values.get("retention", {}).items()
    }
    values["workers"] = 1
    values["untold"] = tuple(values.get("untold", ()))
    return DaemonConfig(**values)


def start_child(module: str, settings: dict[str, Any]) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start `module` as `python -m MODULE CONTROL_FD BACK_FD` and write its settings as
    the first line on CONTROL_FD. Returns the process, the write end of its control pipe
    (closing it is the child's signal to stop) and the read end of the pipe it answers on."""
    read, write = os.pipe()
    back_r, back_w = os.pipe()
    try:
        popen = subprocess.Popen(
            child_argv(module, str(read), str(back_w)),
            pass_fds=(read, back_w),
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        for fd in (write, back_r):
            os.close(fd)
        raise
    finally:
        os.close(read)
        os.close(back_w)
    os.write(write, json.dumps(settings).encode() + b"\n")
    return popen, write, back_r


def _caught(signum: int, frame: object) -> None:
    """SIGINT/SIGTERM in a child: the daemon that started it decides what it does."""


def child_start(argv: list[str], kind: str) -> tuple[IO[bytes], int, dict[str, Any]]:
    """A child's start (`argv`: CONTROL_FD BACK_FD): SIGINT and SIGTERM caught and left to
    its daemon (caught, not ignored: an ignored signal stays ignored in every program the
    child starts), its settings read, its log lines named `kind PID`. Returns the control
    pipe, the fd it answers on, and its settings."""
    signal.signal(signal.SIGINT, _caught)
    signal.signal(signal.SIGTERM, _caught)
    control = os.fdopen(int(argv[0]), "rb")
    settings: dict[str, Any] = json.loads(control.readline())
    logging.basicConfig(
        level=getattr(logging, str(settings["log_level"]).upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s {kind} {os.getpid()}: %(message)s",
        stream=sys.stderr,
    )
    return control, int(argv[1]), settings
