"""The daemon as a user service: `daemon --print/--install/--uninstall` with a recording
`systemctl` on PATH (a real program), and `daemon stop` draining a real daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import query, wait_until

ROOT = Path(__file__).resolve().parent.parent
FLOWCTL = Path(sys.executable).with_name("flowctl")  # the console script of this environment

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$@" >> "$SYSTEMCTL_LOG"
exit "${SYSTEMCTL_EXIT:-0}"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with a flowctl.toml (grace 45s) and a fake systemctl in bin/."""
    (tmp_path / "flowctl.toml").write_text('db = "state/flow.db"\ngrace = "45s"\n')
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    return tmp_path


def flowctl(
    cwd: Path, *args: str, path: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "config"), **env}
    environ.pop("FLOWCTL_DB", None)
    if path is not None:
        environ["PATH"] = path
    return subprocess.run(
        [str(FLOWCTL), *args], capture_output=True, text=True, cwd=cwd, env=environ, timeout=60
    )


def test_print_shows_a_unit_for_this_database_and_its_config(project: Path) -> None:
    out = flowctl(project, "daemon", "--print")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    db = (project / "state" / "flow.db").resolve()
    assert f"ExecStart={FLOWCTL.resolve()} --db {db} daemon" in lines
    assert f"WorkingDirectory={project.resolve()}" in lines  # where its flowctl.toml is found
    assert "Restart=on-failure" in lines
    assert "KillSignal=SIGTERM" in lines
    assert "KillMode=mixed" in lines  # command steps are the daemon's to stop
    assert "TimeoutStopSec=60" in lines  # above the 45 s drain grace
    assert "WantedBy=default.target" in lines
    assert not (project / "config").exists()  # printing writes nothing
    assert not (project / "state").exists()


def test_install_writes_enables_and_starts_then_uninstall_removes(project: Path) -> None:
    log = project / "systemctl.log"
    path = f"{project / 'bin'}{os.pathsep}{os.environ['PATH']}"
    out = flowctl(project, "daemon", "--install", path=path, SYSTEMCTL_LOG=str(log))
    assert out.returncode == 0, out.stderr
    units = list((project / "config" / "systemd" / "user").glob("flowctl-flow-*.service"))
    assert len(units) == 1
    name = units[0].name
    printed = flowctl(project, "daemon", "--print").stdout
    assert units[0].read_text() == printed
    assert log.read_text().splitlines() == ["--user daemon-reload", f"--user enable --now {name}"]
    assert "loginctl enable-linger" in out.stdout

    out = flowctl(project, "daemon", "--uninstall", path=path, SYSTEMCTL_LOG=str(log))
    assert out.returncode == 0, out.stderr
    assert not units[0].exists()
    assert log.read_text().splitlines()[2:] == [
        f"--user disable --now {name}",
        "--user daemon-reload",
    ]
    again = flowctl(project, "daemon", "--uninstall", path=path, SYSTEMCTL_LOG=str(log))
    assert again.returncode == 1 and "no service installed" in again.stderr


NO_BUS_SYSTEMCTL = """#!/bin/sh
echo "Failed to connect to bus: No medium found" >&2
exit 1
"""


def test_install_without_a_user_bus_leaves_no_unit_and_says_what_to_run(project: Path) -> None:
    """Issue 39: a container or an ssh session without a systemd user manager."""
    (project / "bin" / "systemctl").write_text(NO_BUS_SYSTEMCTL)
    path = f"{project / 'bin'}{os.pathsep}{os.environ['PATH']}"
    out = flowctl(project, "daemon", "--install", path=path)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "daemon-reload` failed (exit 1): Failed to connect to bus: No medium found" in out.stderr
    assert "run `flowctl daemon` under your own supervisor" in out.stderr
    assert list((project / "config" / "systemd" / "user").glob("*")) == []


def test_a_failing_systemctl_is_one_line(project: Path) -> None:
    path = f"{project / 'bin'}{os.pathsep}{os.environ['PATH']}"
    out = flowctl(
        project,
        "daemon",
        "--install",
        path=path,
        SYSTEMCTL_LOG=str(project / "log"),
        SYSTEMCTL_EXIT="1",
    )
    assert out.returncode == 1
    assert "systemctl --user daemon-reload` failed (exit 1)" in out.stderr
    assert out.stderr.count("\n") == 1


def test_without_systemd_it_writes_the_unit_and_says_what_to_run(project: Path) -> None:
    empty = project / "empty"
    empty.mkdir()
    out = flowctl(project, "daemon", "--install", path=str(empty))
    assert out.returncode == 0, out.stderr
    assert "systemctl not found" in out.stdout and "enable --now flowctl-flow-" in out.stdout
    assert len(list((project / "config" / "systemd" / "user").glob("*.service"))) == 1


@pytest.mark.parametrize(
    "args",
    [["daemon", "start"], ["daemon", "stop", "--install"], ["daemon", "--install", "--uninstall"]],
)
def test_bad_daemon_actions_are_usage_errors(project: Path, args: list[str]) -> None:
    out = flowctl(project, *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert not (project / "config").exists()


FLOWS = """
import time
from flowctl import workflow


@workflow
def slow(ctx):
    ctx.step("work", lambda: time.sleep(1.0) or "worked")
    return "done"
"""


@pytest.fixture
def daemon_proc(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    db = tmp_path / "d.db"
    (tmp_path / "flows.py").write_text(FLOWS)
    ran = subprocess.run(
        [str(FLOWCTL), "--db", str(db), "run", f"{tmp_path / 'flows.py'}:slow", "--detach"],
        capture_output=True,
        timeout=60,
    )
    assert ran.returncode == 0
    with open(tmp_path / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [str(FLOWCTL), "--db", str(db), "daemon", "--grace", "20s"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    yield db, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.crash
def test_daemon_stop_drains_and_waits(
    tmp_path: Path, daemon_proc: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    db, proc = daemon_proc
    wait_until(lambda: query(db, "SELECT status FROM runs") == [("running",)], timeout=30)
    out = subprocess.run(
        [str(FLOWCTL), "--db", str(db), "daemon", "stop"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"daemon pid {proc.pid}" in out.stdout and "drained and exited" in out.stdout
    assert proc.poll() == 0  # already gone when stop returned, and by a drain
    assert query(db, "SELECT status FROM runs") == [("completed",)]  # it finished its step
    listed = subprocess.run(
        [str(FLOWCTL), "--db", str(db), "status", "--json"], capture_output=True, text=True
    )
    assert not [d for d in json.loads(listed.stdout)["daemons"] if d.get("alive")]
    nothing = subprocess.run(
        [str(FLOWCTL), "--db", str(db), "daemon", "stop"], capture_output=True, text=True
    )
    assert nothing.returncode == 0 and "no daemon is running" in nothing.stdout
