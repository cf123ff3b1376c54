"""How the daemon starts a Python process of its own (a worker of `--workers N`, an
isolated worker for a suspect): by the Python running the daemon, with its isolation
flags, as `python -m MODULE`, or from the single-file build the daemon runs from."""

from __future__ import annotations

import os
import sys
import zipfile

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
