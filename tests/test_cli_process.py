"""`flowctl` as a shell sees it: a real `python -m flowctl` process per case.

Only what an in-process run cannot show lives here: that the entry point starts at all,
the exit code the process really ends with, and Ctrl-C. Everything else about the CLI is
in tests/test_cli.py, in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import query

FLOWS = (
    "from flowctl import workflow\n"
    "\n"
    "@workflow\n"
    "def add(ctx, a: int, b: int = 1):\n"
    "    return ctx.step('add', lambda: a + b)\n"
    "\n"
    "@workflow\n"
    "def boom(ctx):\n"
    "    ctx.step('explode', lambda: 1 / 0)\n"
    "\n"
    "@workflow\n"
    "def sleepy(ctx):\n"
    "    ctx.step('before', lambda: 'x')\n"
    "    ctx.sleep('24h')\n"
    "    return 'woke'\n"
    "\n"
    "def _interrupt():\n"
    "    raise KeyboardInterrupt\n"
    "\n"
    "@workflow\n"
    "def interrupts(ctx):\n"
    "    ctx.step('interrupt', _interrupt)\n"
)


def flowctl_argv(db: str | None, *args: str) -> list[str]:
    return [sys.executable, "-m", "flowctl", *(["--db", db] if db else []), *args]


def flowctl(db: str | None, *args: str, via_env: bool = False) -> subprocess.CompletedProcess[str]:
    """A real process on `db` (a SQLite path or a PostgreSQL URL), given as --db, or as
    FLOWCTL_DB with `via_env`."""
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"}
    if via_env and db:
        env["FLOWCTL_DB"] = db
    return subprocess.run(
        flowctl_argv(None if via_env else db, *args),
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env=env,
        timeout=60,
    )


@pytest.fixture
def flow_file(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def test_help_through_the_real_entry_point() -> None:
    out = flowctl(None, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Usage: ")
    assert "Durable workflows on one machine" in out.stdout
    assert out.stderr == ""


@pytest.mark.parametrize(
    ("args", "code", "stream", "needle"),
    [
        (["run", "{flow}:add", "-i", "a:=1", "--json"], 0, "stdout", '"result": 2'),
        (["run", "{flow}:boom", "--max-attempts", "1"], 1, "stderr", "ZeroDivisionError"),
        (["frobnicate"], 2, "stderr", "flowctl: No such command 'frobnicate'"),
        (["ls", "--status", "sleepy"], 2, "stderr", "flowctl: unknown status 'sleepy'"),
    ],
)
def test_exit_codes_of_a_real_process(
    db: str, flow_file: Path, args: list[str], code: int, stream: str, needle: str
) -> None:
    out = flowctl(db, *[a.replace("{flow}", str(flow_file)) for a in args])
    assert out.returncode == code, (out.stdout, out.stderr)
    assert needle in getattr(out, stream)
    assert "Traceback" not in out.stderr
    if code == 2:
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_ctrl_c_during_run_wait_leaves_the_run_to_the_daemon(db: str, flow_file: Path) -> None:
    proc = subprocess.Popen(
        flowctl_argv(db, "run", f"{flow_file}:sleepy", "--wait"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # click flushes every echo: lines arrive as printed
            seen.append(line)
            if "sleeping until" in line:
                break
        assert any("sleeping until" in line for line in seen), seen
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (stdout, stderr)
    (run_id,) = [r[0] for r in query(db, "SELECT run_id FROM runs")]
    assert stderr.strip() == (
        f"interrupted: run {run_id} is left to `flowctl daemon`, which resumes it"
    )
    # The run is durable: still sleeping, its lease released for a daemon to take.
    assert query(db, "SELECT status, lease_owner FROM runs") == [("sleeping", None)]
    shown = json.loads(flowctl(db, "show", run_id, "--json").stdout)
    assert [c["kind"] for c in shown["checkpoints"]] == ["step", "sleep"]


def test_a_keyboardinterrupt_raised_by_a_step_fails_the_attempt_in_the_foreground(
    db: str, flow_file: Path
) -> None:
    """Only a real SIGINT is the operator's Ctrl-C; one the workflow raises is its error.
    The database comes from FLOWCTL_DB here, as a service's environment gives it."""
    out = flowctl(db, "run", f"{flow_file}:interrupts", "--max-attempts", "1", via_env=True)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert "KeyboardInterrupt" in out.stderr
    assert query(db, "SELECT status, lease_owner FROM runs") == [("dead", None)]
    (error,) = [json.loads(r[0]) for r in query(db, "SELECT error FROM runs")]
    assert error["type"] == "KeyboardInterrupt"
