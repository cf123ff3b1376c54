"""dist/flowctl.pyz: built by the documented command, run with a plain python3 (not this
virtualenv's, and with -I: nothing of ours on its path), it runs a workflow in the
foreground and through a daemon with worker processes. Slow (a build and a first-run
unpack): marked crash."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.crash

YAML = """
name: hello
steps:
  - id: greet
    run: ["echo", "hello from the pyz"]
  - sleep: 10ms
  - id: done
    run: "true"
"""

# No sleep: `daemon --until-idle` stops when nothing is due *now*, and a run sleeping for
# a few milliseconds is not due yet. Each run's step says which process ran it.
QUICK = """
name: quick
steps:
  - id: who
    run: 'echo $PPID'
"""

PLAIN = Path(sys.base_prefix) / "bin" / "python3"  # no virtualenv, no site-packages of ours


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build") / "flowctl.pyz"
    built = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_pyz.py"), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return out


def _env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHIV_ROOT": str(tmp_path / "shiv")}


def _flowctl(
    pyz: Path, tmp_path: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLAIN), "-I", str(pyz), "--db", str(tmp_path / "f.db"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
        timeout=timeout,
    )


def test_the_plain_python_has_no_flowctl(tmp_path: Path) -> None:
    found = subprocess.run(
        [str(PLAIN), "-I", "-c", "import flowctl"], capture_output=True, cwd=tmp_path
    )
    assert found.returncode != 0  # else the next tests would not show what they claim


def test_the_pyz_runs_a_workflow_with_plain_python(pyz: Path, tmp_path: Path) -> None:
    (tmp_path / "hello.yaml").write_text(YAML)
    ran = _flowctl(pyz, tmp_path, "run", "hello.yaml", "--wait")
    assert ran.returncode == 0, ran.stderr
    assert "completed" in ran.stdout
    logs = _flowctl(pyz, tmp_path, "ls", "--json")
    assert '"status": "completed"' in logs.stdout


def test_the_pyz_daemon_runs_workflows_on_worker_processes(pyz: Path, tmp_path: Path) -> None:
    (tmp_path / "quick.yaml").write_text(QUICK)
    for _ in range(6):
        queued = _flowctl(pyz, tmp_path, "run", "quick.yaml", "--detach")
        assert queued.returncode == 0, queued.stderr
    daemon = _flowctl(pyz, tmp_path, "daemon", "--until-idle", "--workers", "2", timeout=120)
    assert daemon.returncode == 0, daemon.stderr
    assert "ModuleNotFoundError" not in daemon.stderr
    assert "supervises 2 worker processes" in daemon.stderr
    assert "0 died" in daemon.stderr
    runs = json.loads(_flowctl(pyz, tmp_path, "ls", "--json").stdout)
    assert [run["status"] for run in runs] == ["completed"] * 6
    # The shells' parents: worker processes, not the daemon that supervises them.
    supervisor = re.search(r"INFO daemon [^/ ]+/(\d+)/", daemon.stderr)
    assert supervisor is not None, daemon.stderr
    ran_in = {run["result"]["steps"]["who"] for run in runs}
    assert ran_in and supervisor.group(1) not in ran_in
