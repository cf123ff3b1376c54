"""The `flowctl` command's entry point (pyproject's [project.scripts]) and `python -m flowctl`.

Start-up (issue 17, item 4): importing the CLI (Typer, Click, flowctl's command skeleton)
allocates some 17,000 objects that live as long as the process, and the cyclic garbage
collector, triggered by allocation counts, walks them again and again while they are made:
about 8 ms of a 60 ms `flowctl --help`. So the collector is off while the CLI is imported,
those objects are then moved out of its sight (`gc.freeze()`: they are not garbage), and it
is on again before any command runs, so a daemon or the TUI collects as usual.

`-m flowctl.daemon.worker FD FD` starts a worker of `flowctl daemon --workers N`, and
`-m flowctl.daemon.isolated FD FD` the worker a suspect runs alone in: the single-file
build (flowctl.pyz, whose entry point this is) starts them from itself that way, on a
Python that may have no flowctl installed (flowctl.daemon.spawn).
"""

import gc
import sys


def main() -> None:
    """Run the `flowctl` command (or a worker process, see above)."""
    if sys.argv[1:3] == ["-m", "flowctl.daemon.worker"]:
        from flowctl.daemon.worker import main as serve

        sys.exit(serve(sys.argv[3:]))
    if sys.argv[1:3] == ["-m", "flowctl.daemon.isolated"]:
        from flowctl.daemon.isolated import main as alone

        sys.exit(alone(sys.argv[3:]))
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        from flowctl.cli import main as run
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()
    run()


if __name__ == "__main__":
    main()
