"""Command steps under a real `flowctl daemon` with worker processes (the default on
several cores) are stopped as the README says: SIGTERM reaches the command (it inherits no
ignored or blocked signal from the daemon or its worker), so a `trap ... TERM` runs on
cancel and a `timeout:` ends the step at once, not after the SIGKILL grace; and the whole
process tree of a command step dies with the process running it, even by SIGKILL.

On a SQLite file: what is tested is processes and signals, the same on either store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import wait_until

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.store import open_store
from tests.proctree import alive, marked, parent, tree_command, whole_tree

from .conftest import ROOT, Daemons, read, statuses

pytestmark = pytest.mark.crash

STOP_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)


def _start(db: Path, tmp_path: Path, yaml: str) -> str:
    (tmp_path / "wf.yaml").write_text(yaml)
    with open_store(str(db)) as store:
        return ops.start(store, "wf.yaml", {}, clock=SystemClock(), cwd=str(tmp_path)).run.run_id


def _masks(status: str) -> dict[str, int]:
    """SigIgn, SigBlk, ... of a /proc/PID/status text, as bit masks."""
    masks = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd"):
            masks[key] = int(value.strip(), 16)
    return masks


def _has(mask: int, signum: int) -> bool:
    return bool(mask >> (signum - 1) & 1)


def _hostile_daemon(db: Path, tmp_path: Path, workers: str) -> subprocess.Popen[bytes]:
    """A daemon started as `flowctl daemon &` from a script starts it (SIGINT and SIGQUIT
    ignored), and with SIGTERM blocked on top: what a command must not inherit."""

    def hostile() -> None:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    log = open(tmp_path / "hostile.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--workers", workers],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(ROOT),
        preexec_fn=hostile,
    )
    log.close()
    return proc


@pytest.mark.parametrize(
    "how", ["workers", "hostile-workers", "hostile-one-process"], ids=lambda how: how
)
def test_a_command_step_inherits_no_ignored_or_blocked_stop_signal(
    tmp_path: Path, daemons: Daemons, how: str
) -> None:
    db = tmp_path / "f.db"
    run_id = _start(
        db, tmp_path, "name: masks\nsteps:\n  - id: masks\n    run: cat /proc/self/status\n"
    )
    if how == "workers":
        daemon = daemons.start(db, "--workers", "2")
    else:
        daemon = _hostile_daemon(db, tmp_path, "2" if how == "hostile-workers" else "1")
        daemons.procs.append(daemon)  # killed at the end with the others
        inherited = _masks(Path(f"/proc/{daemon.pid}/status").read_text())
        # The daemon itself ignores and blocks them: the command must not.
        assert _has(inherited["SigIgn"], signal.SIGQUIT)
        assert _has(inherited["SigBlk"], signal.SIGTERM)
    wait_until(lambda: statuses(db).get(run_id) == "completed", timeout=30)
    ((result,),) = read(db, "SELECT result FROM runs WHERE run_id = ?", (run_id,))
    masks = _masks(json.loads(result)["steps"]["masks"])
    for signum in STOP_SIGNALS:
        assert not _has(masks["SigIgn"], signum), (signum, masks)
        assert not _has(masks["SigBlk"], signum), (signum, masks)
    assert masks["SigBlk"] == 0


TRAP = """\
name: trapper
steps:
  - id: trapped
    run: "trap 'echo trapped >> {log}; exit 3' TERM; echo started >> {log}; sleep 60 & wait"
"""


def test_a_cancelled_command_step_runs_its_term_trap(tmp_path: Path, daemons: Daemons) -> None:
    db, log = tmp_path / "f.db", tmp_path / "trap.log"
    run_id = _start(db, tmp_path, TRAP.format(log=log))
    daemons.start(db, "--workers", "2")
    wait_until(lambda: log.exists() and "started" in log.read_text(), timeout=30)
    with open_store(str(db)) as store:
        assert ops.cancel(store, run_id, clock=SystemClock()).cancel_requested
    wait_until(lambda: statuses(db)[run_id] == "cancelled", timeout=30)
    # SIGKILL (after the grace) would not have run the trap.
    assert log.read_text().split() == ["started", "trapped"]


TIMEOUT = """\
name: slow
steps:
  - id: slow
    run: "echo $$ >> {pids}; exec sleep 60"
    timeout: 1s
    retry: {{max_attempts: 1}}
"""


def test_a_command_step_timeout_is_kept_within_its_grace(tmp_path: Path, daemons: Daemons) -> None:
    db, pids = tmp_path / "f.db", tmp_path / "pids"
    run_id = _start(db, tmp_path, TIMEOUT.format(pids=pids))
    daemons.start(db, "--workers", "2")
    wait_until(lambda: pids.exists() and pids.read_text().strip(), timeout=30)
    seen = time.monotonic()  # the command has started: its 1 s runs
    command = int(pids.read_text().split()[0])
    wait_until(lambda: not alive(command), timeout=15)
    ended = time.monotonic() - seen
    # SIGTERM ends `sleep` at once: about 1 s; ignored, SIGKILL comes 5 s (the grace) later.
    assert ended < 3.5, ended
    wait_until(lambda: statuses(db)[run_id] == "dead", timeout=30)
    ((error,),) = read(db, "SELECT error FROM runs WHERE run_id = ?", (run_id,))
    assert "CommandTimeoutError" in error


TREE = """\
name: tree
steps:
  - id: tree
    run: "{command}"
"""


@pytest.mark.parametrize("kill", ["worker", "daemon-group", "one-process-daemon"])
def test_a_command_steps_process_tree_dies_with_its_worker_on_sigkill(
    tmp_path: Path, daemons: Daemons, kill: str
) -> None:
    db = tmp_path / "f.db"
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"  # a `sleep` length no one else uses
    _start(db, tmp_path, TREE.format(command=tree_command(marker)))
    daemon = daemons.start(db, "--workers", "1" if kill == "one-process-daemon" else "2")
    try:
        tree = wait_until(lambda: whole_tree(marker), timeout=30)
        (shell,) = (pid for pid, argv in tree.items() if argv[0] == "/bin/sh")
        runner = parent(shell)  # the process running the step
        assert (runner == daemon.pid) == (kill == "one-process-daemon")
        if kill == "daemon-group":
            os.killpg(daemon.pid, signal.SIGKILL)
        else:
            os.kill(runner, signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in tree), timeout=10)
        if kill != "worker":  # else the daemon's new worker runs the step again
            daemon.wait(10)
            assert marked(marker) == {}
    finally:
        for pid in marked(marker):  # whatever a failure left
            os.kill(pid, signal.SIGKILL)
