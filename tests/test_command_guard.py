"""flowctl.yamlflow.guard: a process that runs a command step and dies by SIGKILL takes
the command's whole process group with it (the shell and the children the parent-death
signal does not reach), also when its guard was killed before and replaced. Real
processes, real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.helpers import wait_until
from tests.proctree import alive, marked, parent, tree_command, whole_tree

# Runs a quick command (which starts the guard), says so, reads a command line (on stdin:
# its own command line must not hold the marker), then runs it on a thread of its own, as
# the daemon's batch runner runs a blocking step.
# With "late": its thread never gets to list the command's group itself (`guard.watch`),
# as when the process dies before that thread runs again after the command started.
RUNNER = """\
import sys, threading
from flowctl.yamlflow import guard
from flowctl.yamlflow.commands import run_command

if sys.argv[1:] == ["late"]:
    guard.watch = lambda pgid: None

def run(cmd):
    run_command(cmd, env={"PATH": "/usr/bin:/bin"}, cwd=None, timeout=None,
                should_stop=lambda: None)

run("true")
print("ready", flush=True)
threading.Thread(target=run, args=(sys.stdin.readline().strip(),)).start()
"""


def _guards_of(pid: int) -> list[int]:
    """The guard processes of process `pid` (the last word of a guard's command line)."""
    label = f"flowctl-guard-of-{pid}"
    return [guard for guard, argv in marked(label).items() if argv[-1] == label]


@pytest.mark.parametrize(
    ("guard_killed", "late"),
    [(False, False), (True, False), (False, True)],
    ids=["guard", "guard-replaced", "listed-by-the-command-itself"],
)
def test_a_process_killed_by_sigkill_takes_its_commands_tree_with_it(
    guard_killed: bool, late: bool
) -> None:
    """`listed-by-the-command-itself`: the command's child lists its group with the guard
    before it execs, so the group is guarded before the process that started it has run
    another line."""
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"
    with subprocess.Popen(
        [sys.executable, "-c", RUNNER, *(["late"] if late else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as runner:
        assert runner.stdin is not None and runner.stdout is not None
        try:
            _kill_the_runner(runner, marker, guard_killed)
        finally:
            runner.kill()
            for pid in marked(marker):  # whatever a failure left
                os.kill(pid, signal.SIGKILL)


def _kill_the_runner(runner: subprocess.Popen[str], marker: str, guard_killed: bool) -> None:
    """Start the tree (after killing the guard, if asked), SIGKILL the runner, and see the
    tree and the guard gone."""
    assert runner.stdin is not None and runner.stdout is not None
    assert runner.stdout.readline() == "ready\n"
    (guard,) = _guards_of(runner.pid)
    if guard_killed:
        os.kill(guard, signal.SIGKILL)
        wait_until(lambda: not alive(guard))
    runner.stdin.write(tree_command(marker) + "\n")
    runner.stdin.flush()
    tree = wait_until(lambda: whole_tree(marker), timeout=10)
    shell = next(pid for pid, argv in tree.items() if argv[0] == "/bin/sh")
    assert parent(shell) == runner.pid
    (now_guard,) = _guards_of(runner.pid)  # replaced before the command started
    assert (now_guard != guard) == guard_killed
    runner.kill()
    runner.wait()
    wait_until(lambda: not any(alive(pid) for pid in tree), timeout=10)
    wait_until(lambda: not alive(now_guard))  # its work done, the guard is gone too


def test_a_process_that_ran_a_command_ends_its_guard_as_it_exits() -> None:
    """At a clean exit the guard is ended and reaped first (atexit), not left to notice
    the pipe's end after the process is gone: no guard outlives it, and its Popen says
    nothing at exit (it warned `subprocess N is still running`, a ResourceWarning)."""
    code = (
        "from flowctl.yamlflow import guard\n"
        "from flowctl.yamlflow.commands import run_command\n"
        "import os\n"
        "run_command('true', env={'PATH': '/usr/bin:/bin'}, cwd=None, timeout=None,"
        " should_stop=lambda: None)\n"
        "print(os.getpid(), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "ResourceWarning" not in done.stderr, done.stderr
    assert _guards_of(int(done.stdout)) == []
