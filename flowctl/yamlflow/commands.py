"""Run one external command for a step: own process group, capped output, timeout and stop.

A command runs in its own process group (a new session), so a Ctrl-C or SIGTERM sent to
the daemon's group does not kill it mid-step; flowctl stops it itself (SIGTERM to the
group, then SIGKILL after a grace period) when a timeout, cancellation or deadline says so.
It starts with the default action for the signals that stop a process and none blocked,
whatever the process running it ignores or blocks (a daemon started by `&` in a script
ignores SIGINT and SIGQUIT, and the worker processes used to ignore SIGINT and SIGTERM),
so that SIGTERM reaches it and a `trap ... TERM` runs. When the command ends, whatever is left of its process group is
killed too, and if the process running it dies first, even by SIGKILL, the group dies
with it (flowctl.yamlflow.guard), so no orphan from the group outlives the step.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowctl.errors import (
    CommandFailedError,
    CommandTimeoutError,
    FlowctlError,
    mark_non_retryable,
)
from flowctl.output import StepOutput
from flowctl.output import current as current_output
from flowctl.yamlflow import guard

POLL_SECONDS = 0.05  # how often stop requests and timeouts are checked
DEFAULT_CAP = 1 << 20  # bytes kept per stream
ERROR_TAIL = 4096  # bytes of stderr carried by CommandFailedError / CommandTimeoutError
_DRAIN_SECONDS = 1.0  # after exit: how long to wait for pipes held open by escaped processes
_REAP_SECONDS = 0.5  # after SIGKILL: how long to wait for the group to disappear

_running: set[int] = set()  # process groups of the commands this process is running
_running_lock = threading.Lock()


def kill_running_commands() -> int:
    """SIGKILL the group of every command this process still runs; returns how many.

    For a daemon whose grace period is over: it exits now, and a command that ignores
    SIGTERM must not outlive it, nor its children (only the leader dies with the daemon).
    """
    with _running_lock:
        groups = list(_running)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)
    return len(groups)


@dataclass(frozen=True)
class CommandResult:
    """What a finished command produced; stdout/stderr are the last `cap` bytes of each."""

    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    duration: float
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool

    def json_output(self) -> Any:
        """stdout parsed as JSON, or None when it is not (or was truncated into invalid JSON)."""
        text = self.stdout.strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def to_json(self) -> dict[str, Any]:
        """The step result journaled for a run step (and shown by `flowctl show --json`)."""
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration": round(self.duration, 6),
            "json": self.json_output(),
        }


class _Tail:
    """Keeps the last `cap` bytes of a stream and counts all of them; with `sink`, each
    chunk is also handed to the step's stored output as it arrives (`flowctl logs`)."""

    def __init__(self, cap: int, sink: StepOutput | None = None, stream: str = "") -> None:
        self.cap = max(0, cap)
        self.buf = bytearray()
        self.total = 0
        self.sink = sink
        self.stream = stream

    def add(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink.write_bytes(self.stream, data)
        self.total += len(data)
        self.buf += data
        if len(self.buf) > self.cap:
            del self.buf[: len(self.buf) - self.cap]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.buf)

    def text(self, limit: int | None = None) -> str:
        data = self.buf if limit is None else self.buf[-limit:] if limit else b""
        return bytes(data).decode("utf-8", errors="replace")


def command_argv(cmd: list[str] | str) -> list[str]:
    """A list is exec'd as-is (no shell); a string is run by `/bin/sh -c`."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = list(cmd)
    if not argv:
        raise FlowctlError("a command needs at least one argument (the program to run)")
    for item in argv:
        if not isinstance(item, str):
            raise FlowctlError(f"command arguments must be strings, got {item!r}")
    return argv


def run_command(
    cmd: list[str] | str,
    *,
    env: dict[str, str],
    cwd: str | None,
    timeout: float | None,
    should_stop: Callable[[], BaseException | None],
    grace: float = 5.0,
    cap: int = DEFAULT_CAP,
) -> CommandResult:
    """Run `cmd` to completion and return its result; raise when it fails or must stop.

    Output: the LAST `cap` bytes of stdout and of stderr are kept (the rest is counted in
    stdout_bytes/stderr_bytes and dropped), decoded as UTF-8 with replacement characters.
    A non-zero exit raises CommandFailedError (with `.result` set to the CommandResult).
    `should_stop()` is polled every ~50 ms: when it returns an exception the process group
    gets SIGTERM, then SIGKILL after `grace` seconds, and that exception is raised. Past
    `timeout` seconds the same happens and CommandTimeoutError is raised.
    """
    argv = command_argv(cmd)
    pending = should_stop()
    if pending is not None:
        raise pending
    if cwd is not None and not os.path.isdir(cwd):
        raise FlowctlError(f"working directory {cwd!r} does not exist or is not a folder")
    guard.ensure()
    started = time.monotonic()
    proc = _start(argv, cmd, env, cwd)
    sink = current_output()
    out, err = _Tail(cap, sink, "stdout"), _Tail(cap, sink, "stderr")
    stop_exc: BaseException | None = None
    with _running_lock:
        _running.add(proc.pid)
    guard.watch(proc.pid)
    try:
        stop_exc = _supervise(proc, out, err, timeout, should_stop, grace, started)
    finally:
        try:
            _finish(proc)
        finally:
            with _running_lock:
                _running.discard(proc.pid)
            guard.forget(proc.pid)
    duration = time.monotonic() - started
    if stop_exc is not None:
        raise stop_exc
    result = CommandResult(
        argv=argv,
        exit_code=_exit_code(proc.returncode),
        stdout=out.text(),
        stderr=err.text(),
        duration=duration,
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )
    if result.exit_code != 0:
        failure = CommandFailedError(result.exit_code, stderr_tail=err.text(ERROR_TAIL), argv=cmd)
        failure.result = result  # type: ignore[attr-defined]
        raise failure
    return result


def _start(
    argv: list[str], cmd: list[str] | str, env: dict[str, str], cwd: str | None
) -> subprocess.Popen[bytes]:
    """The command, started in a session (a process group) of its own that dies with this
    process, its stop signals at their default action; what the OS refuses to start is a
    one-line error (not found: 127, not executable: 126; a NUL byte or an E2BIG
    environment no retry can fix)."""
    try:
        return _spawn(argv, env, cwd)
    except FileNotFoundError as exc:
        raise CommandFailedError(127, f"{argv[0]}: command not found", argv=cmd) from exc
    except PermissionError as exc:
        raise CommandFailedError(126, f"{argv[0]}: permission denied", argv=cmd) from exc
    # What the OS cannot pass to any command: the same values fail the same way again.
    except ValueError as exc:  # "embedded null byte"
        raise mark_non_retryable(
            FlowctlError(
                f"{argv[0]}: an argument or environment value holds a NUL byte, which no"
                " command can be given: remove it from the value"
            )
        ) from exc
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        raise mark_non_retryable(
            FlowctlError(
                f"{argv[0]}: its arguments and environment are longer than the OS passes"
                " (E2BIG; at most 128 KiB per value): write a big value to a file and pass"
                " its path"
            )
        ) from exc


def _spawn(argv: list[str], env: dict[str, str], cwd: str | None) -> subprocess.Popen[bytes]:
    """Popen in a session of its own. Its child lists its group with the guard before it
    execs, so no moment of the command is unguarded; one that then could not exec (it
    tells its pid on a pipe of its own) is unlisted here, lest the guard later kill a
    group that reuses its number."""
    told = guard.announcer()
    pid_read, pid_write = os.pipe()
    try:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_prepare_child(os.getpid(), told, pid_write),
            )
        except BaseException:
            os.close(pid_write)  # the child's copy closed as it exited: read to the end
            pid_write = -1
            listed = os.read(pid_read, 32)
            if listed:
                guard.forget(int(listed))
            raise
    finally:
        for fd in (told, pid_write, pid_read):
            if fd is not None and fd >= 0:
                os.close(fd)


def _supervise(
    proc: subprocess.Popen[bytes],
    out: _Tail,
    err: _Tail,
    timeout: float | None,
    should_stop: Callable[[], BaseException | None],
    grace: float,
    started: float,
) -> BaseException | None:
    """Pump output until the command exits; stop it when asked. Returns the exception to raise."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = started + timeout if timeout is not None else None
    stop_exc: BaseException | None = None
    kill_at: float | None = None
    killed = False
    idle = threading.Event()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        pidfd = _pidfd(proc.pid)
        if pidfd is not None:
            # Readable when the command exits, so the loop wakes at once instead of polling.
            sel.register(pidfd, selectors.EVENT_READ, None)
        while True:
            _pump(sel, POLL_SECONDS, idle)
            if out.sink is not None:
                out.sink.tick()
            if _has_exited(proc.pid):
                break
            now = time.monotonic()
            if stop_exc is None:
                stop_exc = should_stop()
                if stop_exc is None and deadline is not None and now >= deadline:
                    assert timeout is not None
                    stop_exc = CommandTimeoutError(timeout, err.text(ERROR_TAIL))
                if stop_exc is not None:
                    _signal_group(proc.pid, signal.SIGTERM)
                    kill_at = now + max(0.0, grace)
            elif not killed and kill_at is not None and now >= kill_at:
                _signal_group(proc.pid, signal.SIGKILL)
                killed = True
        if pidfd is not None:
            sel.unregister(pidfd)
            os.close(pidfd)
        # The leader has exited but is not reaped yet, so its pid still names the group:
        # kill what is left of the group before reaping, then drain what was written.
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        drain_until = time.monotonic() + _DRAIN_SECONDS
        while sel.get_map() and time.monotonic() < drain_until:
            _pump(sel, POLL_SECONDS, idle)
    if isinstance(stop_exc, CommandTimeoutError):
        stop_exc = CommandTimeoutError(stop_exc.timeout, err.text(ERROR_TAIL))
    return stop_exc


def _pump(sel: selectors.BaseSelector, wait: float, idle: threading.Event) -> None:
    """Read whatever is ready on the pipes (waiting at most `wait` seconds)."""
    if not sel.get_map():
        idle.wait(wait)
        return
    for key, _ in sel.select(wait):
        if key.data is None:  # the pidfd: the command exited
            continue
        data = os.read(key.fd, 65536)
        if data:
            key.data.add(data)
        else:
            sel.unregister(key.fileobj)


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


_PRCTL = _load_prctl()  # looked up once, never inside a forked child
_PR_SET_PDEATHSIG = 1


# What stops a process: a command must not inherit them ignored (SIG_IGN survives exec).
STOP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)


def _prepare_child(parent: int, told: int | None, pid_fd: int) -> Callable[[], None]:
    """Runs in the forked child, before exec: the stop signals at their default action
    and no signal blocked (both survive exec), and SIGKILL when `parent` dies; then its
    group listed with the guard (on `told`) and its pid told on `pid_fd` (see _spawn).

    The parent-death signal fires when the *thread* that forked dies, not the process:
    that thread is the one running run_command, which waits in _supervise until the
    command's leader is reaped, so it fires only when the whole process dies. It reaches
    the leader alone; flowctl.yamlflow.guard kills the rest of the group then.
    """

    def prepare() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the worker died before the signal was armed
                os._exit(137)
        if told is not None:
            guard.announce(told)
            try:
                os.write(pid_fd, b"%d" % os.getpid())
            except OSError:
                pass

    return prepare


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _has_exited(pid: int) -> bool:
    """True once the process has exited, without reaping it (its pid stays reserved)."""
    try:
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return status is not None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _finish(proc: subprocess.Popen[bytes]) -> None:
    """Leave nothing behind: the leader reaped, the group gone, the pipes closed."""
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGKILL)  # not reaped yet, so the pid still names the group
        proc.wait()
    wait_until = time.monotonic() + _REAP_SECONDS
    idle = threading.Event()
    while _group_alive(proc.pid) and time.monotonic() < wait_until:
        _signal_group(proc.pid, signal.SIGKILL)
        idle.wait(0.01)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still alive (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _exit_code(returncode: int | None) -> int:
    """Shell convention: killed by signal N reports 128 + N."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode
