"""A guard process that kills the process groups of this process's commands when it dies.

A command step runs in a process group of its own (flowctl.yamlflow.commands). Its
leader gets a parent-death signal, but that is not inherited: `sleep 60 & sleep 60; wait`
leaves its two `sleep`s running as orphans when the worker that started the shell is
killed with SIGKILL (or with its daemon's whole process group), and the daemon that
reclaims the run starts the step again beside them. So the first command a process
starts also starts a guard: a tiny `python -I -S -c` in a session of its own (a signal
to the daemon's group does not reach it), reading a pipe on which this process writes
`+PGID` when a command starts and `-PGID` once its group is gone. When this process dies,
however it dies, the kernel closes the pipe's write end; at its end the guard SIGKILLs
every group still listed and exits. One guard per process (a forked child starts its
own), started lazily so a daemon that runs no command has none.

What it cannot catch: a process that leaves its group (setsid, setpgid) on purpose, and a
SIGKILL of the guard itself.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading

# Runs in the guard: stdlib only, no flowctl (the guard starts from any Python, a .pyz's too).
# It outlives signals sent to everyone (a service manager's SIGTERM to the whole cgroup): it
# ends at its pipe's end only, after the process it guards.
GUARD_CODE = """\
import os, signal, sys
for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
    signal.signal(signum, signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    pgid = int(line[1:])
    if line[:1] == b"+":
        groups.add(pgid)
    else:
        groups.discard(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""

_lock = threading.Lock()
_groups: set[int] = set()  # the groups the guard must kill if this process dies now
_pipe = -1  # write end of the guard's stdin; -1: no guard running for this process
_guard: subprocess.Popen[bytes] | None = None
_exiting = False  # this process is exiting (_at_exit): no new guard is started
EXIT_WAIT = 2.0  # seconds an exiting process waits for its guard to end


def ensure() -> None:
    """Have a live guard before a command starts, so that no moment of the command's life
    is unguarded (a guard found dead only when a group is listed would leave the moments
    before its replacement starts)."""
    global _pipe
    with _lock:
        if _pipe >= 0 and _guard is not None and _guard.poll() is None:
            return
        if _pipe >= 0:
            os.close(_pipe)
            _pipe = -1
        _restart()


def announcer() -> int | None:
    """A copy of the guard's pipe for a command about to start: its child lists its own
    group through it before it execs (`announce`). Listed by `watch` only once started, a
    command whose worker died in between (its thread not yet run again) left the children
    it had started meanwhile running. The caller closes it once the command started."""
    with _lock:
        return os.dup(_pipe) if _pipe >= 0 else None


def announce(fd: int) -> None:
    """In a command's child, in its own session (its pid is its group), before exec. A
    guard gone meanwhile is an EPIPE here, not a SIGPIPE (at its default action by now)
    that would kill the command before it starts."""
    default = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        os.write(fd, b"+%d\n" % os.getpid())
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGPIPE, default)


def watch(pgid: int) -> None:
    """List a command's process group with the guard (starting the guard if need be)."""
    with _lock:
        _groups.add(pgid)
        if _pipe < 0 or not _send(f"+{pgid}\n"):
            _restart()


def forget(pgid: int) -> None:
    """The group is gone (reaped and killed): the guard must no longer kill it, since its
    number may be reused."""
    with _lock:
        _groups.discard(pgid)
        if _pipe >= 0:
            _send(f"-{pgid}\n")


def _send(line: str) -> bool:
    """Write one line (short enough to be atomic); False when the guard is gone."""
    global _pipe
    try:
        os.write(_pipe, line.encode())
        return True
    except OSError:
        os.close(_pipe)
        _pipe = -1
        return False


def _restart() -> None:
    """Start a guard and tell it every group listed now. Without a Python to start (an
    embedded interpreter), the leaders' parent-death signal is all that is left."""
    global _pipe, _guard
    if not sys.executable or _exiting:
        return
    read, write = os.pipe()
    try:
        _guard = subprocess.Popen(
            # The last word names it in `ps`: sys.argv[1] of the guard, unused.
            [sys.executable, "-I", "-S", "-c", GUARD_CODE, f"flowctl-guard-of-{os.getpid()}"],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        os.close(write)
        return
    finally:
        os.close(read)
    _pipe = write
    for pgid in _groups:
        if not _send(f"+{pgid}\n"):
            return


def _at_exit() -> None:
    """This process ends: end its guard now, as its death would a moment later (any group
    still listed is killed), and reap it, so the guard is not left running past the exit
    with its Popen object (which says so at exit, a ResourceWarning)."""
    global _pipe, _guard, _exiting
    with _lock:
        _exiting = True  # a daemon thread starting a command now starts no guard
        guard, _guard = _guard, None
        if _pipe >= 0:
            os.close(_pipe)
            _pipe = -1
    if guard is not None:
        try:
            guard.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            pass


def _after_fork_in_child() -> None:
    """A forked child is another process: it must not keep its parent's guard alive (the
    guard sees its end only when every copy of the pipe's write end is closed), nor list
    its own commands with it."""
    global _pipe, _guard, _lock, _exiting
    _lock = threading.Lock()
    _exiting = False
    if _pipe >= 0:
        os.close(_pipe)
    if _guard is not None:
        # Its parent's guard is no child of this process: dropped as it is, its Popen would
        # say at once "subprocess N is still running" (a ResourceWarning, printed where a
        # command's child has its stderr by now, before it execs).
        vars(_guard)["_child_created"] = False
    _pipe, _guard = -1, None
    _groups.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)
