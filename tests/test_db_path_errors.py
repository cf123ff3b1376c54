"""A database path the OS refuses to look at (a name too long, a component that is a file)
is one line naming it (and the cause), exit 1, no traceback and nothing created — for --db and
for the paths `copy` takes (the CLI fuzz found `copy` raising OSError)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inproc import run_main


@pytest.mark.parametrize("via", ["db", "copy"])
def test_a_name_too_long_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    monkeypatch.chdir(tmp_path)
    long = "9" * 3000
    args = ["--db", long, "ls"] if via == "db" else ["copy", long, str(tmp_path / "x.db")]
    ran = run_main(monkeypatch, *args)
    assert ran.returncode == 1
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "File name too long" in lines[0], ran.stderr
    assert "Traceback" not in ran.stderr and len(lines[0]) < 200
    assert list(tmp_path.iterdir()) == []


def test_a_file_used_as_a_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("")
    ran = run_main(monkeypatch, "--db", "f/sub.db", "ls")
    assert ran.returncode == 1
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "f/sub.db" in lines[0] and "Traceback" not in ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "a" * 300 + ".py:fn"],
        ["run", "a" * 300],
        ["run", "a" * 300 + ".py"],
        ["check", "a" * 300],
        ["validate", "a" * 300],
    ],
)
def test_a_workflow_target_whose_name_is_too_long_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """The CLI fuzz at ten times its scale found `run` and `check` raising OSError for a
    target whose file name the OS refuses (Python 3.11's is_file() raises it)."""
    from flowctl.store import open_store

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "t.db"
    if args[0] == "check":  # it checks a database's runs: one must be there
        open_store(db).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    ran = run_main(monkeypatch, "--db", str(db), *args)
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "File name too long" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
