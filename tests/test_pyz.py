"""dist/flowctl.pyz: built by the documented command, run with a plain python3 (not this
virtualenv's), it runs a workflow. Slow (a build and a first-run unpack): marked crash."""

from __future__ import annotations

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


def test_the_pyz_runs_a_workflow_with_plain_python(tmp_path: Path) -> None:
    pyz = tmp_path / "flowctl.pyz"
    built = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_pyz.py"), "-o", str(pyz)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (tmp_path / "hello.yaml").write_text(YAML)
    plain = Path(sys.base_prefix) / "bin" / "python3"  # no virtualenv, no site-packages of ours
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SHIV_ROOT": str(tmp_path / "shiv"),
    }
    db = tmp_path / "f.db"
    ran = subprocess.run(
        [str(plain), str(pyz), "--db", str(db), "run", "hello.yaml", "--wait"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    assert "completed" in ran.stdout
    logs = subprocess.run(
        [str(plain), str(pyz), "--db", str(db), "ls", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert '"status": "completed"' in logs.stdout
