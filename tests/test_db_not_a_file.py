"""`--db` names a regular file. A FIFO, socket or device (/dev/null is the usual one) is
refused in one line before anything opens, reads or changes it: opening a database makes
the file 0600, and doing that to /dev/null broke every other user of the machine."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flowctl import cli
from flowctl.errors import DatabaseError
from flowctl.store.sqlite import SqliteStore


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.db"
    os.mkfifo(path, 0o644)
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "sock.db"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    os.chmod(path, 0o644)
    return path


@pytest.mark.parametrize("make", [_fifo, _socket])
def test_the_store_refuses_a_path_that_is_not_a_regular_file(tmp_path: Path, make: object) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(
        DatabaseError, match="is not a regular file: a database is a file; give a file's path"
    ):
        SqliteStore(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not made private
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no WAL, no SHM


@pytest.mark.parametrize("args", [["ls"], ["status"], ["daemon", "--until-idle"]])
def test_every_command_says_so_in_one_line_through_a_link_too(
    tmp_path: Path, args: list[str]
) -> None:
    link = tmp_path / "link.db"
    link.symlink_to(_fifo(tmp_path))
    result = CliRunner().invoke(cli.app, ["--db", str(link), *args])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert lines == [
        f"flowctl: {link} is not a regular file: a database is a file; give a file's path"
    ]
    assert stat.S_IMODE(link.stat().st_mode) == 0o644
