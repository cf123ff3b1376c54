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
