"""`flowctl check`: replay every unfinished run against the code on disk, before a deploy.

Runs are started for real (their journals written by the engine), the workflow file is
then edited as a deploy would, and `flowctl check` runs in a process of its own, as an
operator runs it. Nothing may run or be written: step bodies append to a side file, and
the database's rows are compared before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import query

ROOT = Path(__file__).resolve().parent.parent

FLOW = """
from pathlib import Path
from flowctl import workflow

SIDE = Path(__file__).with_name("side.log")


def mark(what):
    with SIDE.open("a") as f:
        f.write(what + "\\n")
    return what


@workflow
def followup(ctx, user="u"):
    ctx.step("welcome", mark, "welcome " + user)
    {middle}
    ctx.sleep("{nap}")
    ctx.step("check", mark, "check " + user)
    return "done"
"""

YAML = """
name: yflow
steps:
  - id: first
    run: "true"
  - sleep: 1h
  - id: second
    run: "true"
"""


def flowctl(db: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )


def write_flow(folder: Path, *, middle: str = "", nap: str = "1h") -> Path:
    path = folder / "flow.py"
    path.write_text(FLOW.format(middle=middle, nap=nap))
    return path


def snapshot(db: str) -> list[object]:
    tables = ["runs", "journal", "versions", "timeline", "signals", "published", "output"]
    return [query(db, f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables]


@pytest.fixture
def sleeping(tmp_path: Path, db: str) -> tuple[str, list[str]]:
    """Two runs of flow.py asleep at call #1, and one YAML run asleep at call #1, in the
    database under test (a SQLite file or a PostgreSQL URL)."""
    write_flow(tmp_path)
    ids = []
    for user in ("ana", "bo"):
        out = flowctl(db, "run", "flow.py:followup", "-i", f"user={user}", "--json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        ids.append(json.loads(out.stdout)["id"])
    (tmp_path / "y.yaml").write_text(YAML)
    out = flowctl(db, "run", "y.yaml", "--json", cwd=tmp_path)
    assert json.loads(out.stdout)["status"] == "sleeping"
    (tmp_path / "side.log").write_text("")
    return db, ids


def test_unchanged_code_replays_and_nothing_runs_or_is_written(
    tmp_path: Path, sleeping: tuple[str, list[str]]
) -> None:
    db, _ = sleeping
    before = snapshot(db)
    out = flowctl(db, "check", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "ok: 3 unfinished run(s) replay" in out.stdout
    assert (tmp_path / "side.log").read_text() == ""  # no step body ran
    assert snapshot(db) == before


def test_a_step_inserted_before_the_sleep_breaks_each_sleeping_run(
    tmp_path: Path, sleeping: tuple[str, list[str]]
) -> None:
    db, ids = sleeping
    write_flow(tmp_path, middle='ctx.step("audit", mark, "audit")')
    before = snapshot(db)
    out = flowctl(db, "check", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    for run_id in ids:
        assert f"BREAKS {run_id} (followup, sleeping) at call #1" in out.stdout
    assert "recorded: sleep 'sleep'   now: step 'audit'" in out.stdout
    assert "ctx.version()" in out.stdout
    assert "2 of 3 unfinished run(s) would break" in out.stdout
    assert (tmp_path / "side.log").read_text() == ""
    assert snapshot(db) == before

    js = flowctl(db, "check", "--json", cwd=tmp_path)
    assert js.returncode == 1
    findings = json.loads(js.stdout)
    assert sorted(f["run_id"] for f in findings) == sorted(ids)
    assert {
        (f["workflow"], f["problem"], f["call_index"], f["recorded"], f["now"]) for f in findings
    } == {("followup", "nondeterminism", 1, "sleep 'sleep'", "step 'audit'")}
    assert all("ctx.version" in f["fix"] for f in findings)


def test_a_changed_sleep_duration_is_not_a_break(
    tmp_path: Path, sleeping: tuple[str, list[str]]
) -> None:
    db, _ = sleeping
    write_flow(tmp_path, nap="3d")
    out = flowctl(db, "check", cwd=tmp_path)
    assert out.returncode == 0, out.stdout


def test_a_change_guarded_by_ctx_version_is_not_a_break(
    tmp_path: Path, sleeping: tuple[str, list[str]]
) -> None:
    db, _ = sleeping
    write_flow(
        tmp_path, middle='if ctx.version("audit", 0, 1) == 1:\n        ctx.step("audit", mark, "a")'
    )
    before = snapshot(db)
    out = flowctl(db, "check", cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert snapshot(db) == before  # the version marker met for the first time is not recorded


def test_yaml_runs_are_pinned_and_pass(tmp_path: Path, sleeping: tuple[str, list[str]]) -> None:
    db, _ = sleeping
    (tmp_path / "y.yaml").write_text(YAML.replace("id: first", "id: renamed"))
    out = flowctl(db, "check", "yflow", cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert "ok: 1 unfinished run(s)" in out.stdout


def test_code_that_ends_early_or_no_longer_loads_is_reported(
    tmp_path: Path, sleeping: tuple[str, list[str]]
) -> None:
    db, _ = sleeping
    path = tmp_path / "flow.py"
    path.write_text(path.read_text().replace('    ctx.sleep("1h")\n', "    return 'early'\n"))
    out = flowctl(db, "check", "--json", "followup", cwd=tmp_path)
    assert out.returncode == 1
    assert {(f["problem"], f["call_index"], f["now"]) for f in json.loads(out.stdout)} == {
        ("ends-early", 1, "returns")
    }
    path.write_text(path.read_text().replace("def followup(", "def renamed("))
    out = flowctl(db, "check", "--json", cwd=tmp_path)
    assert out.returncode == 1
    assert {f["problem"] for f in json.loads(out.stdout)} == {"load"}


def test_usage_errors_exit_2(tmp_path: Path, sleeping: tuple[str, list[str]]) -> None:
    db, _ = sleeping
    out = flowctl(db, "check", "--bogus", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "needle"),
    [("nosuch", "unknown workflow 'nosuch'"), (".", "is a folder"), ("", "a target is empty")],
)
def test_a_target_that_names_nothing_fails_the_gate(
    tmp_path: Path, sleeping: tuple[str, list[str]], name: str, needle: str
) -> None:
    """A typo must not pass a pre-deploy check as "0 runs replay"."""
    db, _ = sleeping
    out = flowctl(db, "check", name, cwd=tmp_path)
    assert out.returncode == 2, out.stdout
    assert out.stderr.startswith("flowctl: check: ") and needle in out.stderr  # one prefix
    assert "flowctl check" not in out.stderr  # issue 39: `flowctl: flowctl check nosuch: ...`
    assert out.stderr.count("\n") == 1


def test_in_process_check_imports_the_file_afresh(
    tmp_path: Path, sleeping: tuple[str, list[str]]
) -> None:
    """ops.check in a process that already imported the old code still sees the new code;
    afterwards this process loads the edited file too (as a daemon runs what is on disk),
    while the old handler it held keeps its own module."""
    from flowctl.clock import SystemClock
    from flowctl.ops import maintenance
    from flowctl.runtime.targets import load_target
    from flowctl.store import open_store

    db, ids = sleeping
    old = load_target(str(tmp_path / "flow.py") + ":followup")
    write_flow(tmp_path, middle='ctx.step("audit", mark, "audit")')
    with open_store(db, create=False) as store:
        report = maintenance.check(store, None, clock=SystemClock())
    assert sorted(f.run_id for f in report.findings) == sorted(ids)
    again = load_target(str(tmp_path / "flow.py") + ":followup")
    assert again.handler is not old.handler
    assert "audit" in again.handler.__code__.co_consts  # the edited file's new step
    assert "audit" not in old.handler.__code__.co_consts
    assert again.handler.__globals__ is not old.handler.__globals__
