"""`show` and the TUI say what is true of a run whose workflow file changed since it started:
a YAML run keeps its pinned definition; a Python run replays the new code and may stop with a
non-determinism error (and does, when the calls before its frontier changed)."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import open_store
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.tui.render import render_detail
from tests.conftest import ROOT
from tests.helpers import db_of

PY = """
from flowctl import workflow


@workflow
def nap(ctx):
    ctx.step("{name}", lambda: 1)
    ctx.sleep("1h")
    return "done"
"""

YAML = """
name: napper
steps:
  - id: {name}
    run: [echo, hi]
  - sleep: 1h
"""


def sleeping_run(store: Store, clock: FakeClock, target: str) -> str:
    rid = ops.start(store, target, {}, clock=clock).run.run_id
    Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    return rid


def test_a_changed_python_file_is_not_called_pinned(
    store: Store, fake_clock: FakeClock, flows_dir: Path
) -> None:
    path = flows_dir / "nap.py"
    path.write_text(PY.format(name="first"))
    rid = sleeping_run(store, fake_clock, f"{path}:nap")
    assert ops.show_run(store, rid, clock=fake_clock).notes == []
    path.write_text(PY.format(name="renamed"))
    detail = ops.show_run(store, rid, clock=fake_clock)
    assert detail.source_changed is True
    (note,) = detail.notes
    assert note == (
        f"{path} changed since this run started; the run replays the new code, and a replay"
        " that meets a different call than its journal holds ends it dead with a"
        " non-determinism error (guard such changes with ctx.version())"
    )
    assert "pinned" not in note
    plain = render_detail(detail, fake_clock.now(), width=400).plain
    assert "non-determinism error" in plain and "pinned" not in plain


def test_a_deleted_python_file_is_said_gone_not_changed(
    store: Store, fake_clock: FakeClock, flows_dir: Path
) -> None:
    path = flows_dir / "nap.py"
    path.write_text(PY.format(name="first"))
    rid = sleeping_run(store, fake_clock, f"{path}:nap")
    path.unlink()
    (note,) = ops.show_run(store, rid, clock=fake_clock).notes
    assert note == (
        f"{path} no longer exists: this run cannot be replayed until it is back (its next"
        " attempt fails to load it)"
    )


def test_a_python_replay_after_the_change_meets_a_nondeterminism_error(
    store: Store, fake_clock: FakeClock, flows_dir: Path
) -> None:
    """The note's claim, in a fresh process (which imports the file as it is now)."""
    path = flows_dir / "ask.py"
    path.write_text(PY.format(name="first").replace('ctx.sleep("1h")', 'ctx.wait_signal("go")'))
    rid = ops.start(store, f"{path}:nap", {}, clock=fake_clock).run.run_id
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    assert store.get_run(rid).status is RunStatus.WAITING
    path.write_text(PY.format(name="renamed").replace('ctx.sleep("1h")', 'ctx.wait_signal("go")'))
    ops.send_signal(store, rid, "go", None, clock=SystemClock())
    subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db_of(store), "daemon", "--until-idle",
         "--log-level", "error"],
        check=True, timeout=60, cwd=str(ROOT),
    )  # fmt: skip
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None and run.error["kind"] == "nondeterminism"


def test_a_changed_yaml_file_keeps_its_pinned_definition(
    store: Store, fake_clock: FakeClock, flows_dir: Path
) -> None:
    path = flows_dir / "nap.yaml"
    path.write_text(YAML.format(name="first"))
    rid = sleeping_run(store, fake_clock, str(path))
    path.write_text(YAML.format(name="renamed"))
    (note,) = ops.show_run(store, rid, clock=fake_clock).notes
    assert note == (
        f"{path} changed since this run started; the run keeps its pinned definition"
        " (new runs use the new file)"
    )
    fake_clock.advance(timedelta(hours=1))
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    assert store.get_run(rid).status is RunStatus.COMPLETED


def test_show_prints_the_note(
    db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_clock: FakeClock,
    flows_dir: Path,
) -> None:
    monkeypatch.setattr(cli, "SystemClock", lambda: fake_clock)
    monkeypatch.chdir(tmp_path)
    path = flows_dir / "nap.py"
    path.write_text(PY.format(name="first"))
    runner = CliRunner()

    def call(*args: str) -> Any:
        result = runner.invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.stdout

    rid = call("run", f"{path}:nap", "--detach").split()[1]
    with open_store(db) as store:
        Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    path.write_text(PY.format(name="renamed"))
    out = call("show", rid)
    assert f"note      {path} changed since this run started; the run replays the new code" in out
    assert "pinned" not in out
