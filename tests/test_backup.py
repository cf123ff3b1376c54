"""`flowctl backup PATH`: a consistent, checked copy while a real daemon writes; the copy
works as a database; an existing file is never overwritten without --force."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import query, wait_until

ROOT = Path(__file__).resolve().parent.parent

FLOWS = """
import os
from flowctl import workflow


@workflow
def busy(ctx, n=0, stop=""):
    for i in range(2000):
        if ctx.step(f"look{i}", os.path.exists, stop):
            return i
        ctx.sleep("30ms")
    return -1
"""


def flowctl(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def start_runs(db: Path, target: str, n: int, stop: Path | None = None) -> None:
    from flowctl import ops
    from flowctl.clock import SystemClock
    from flowctl.store import open_store

    with open_store(db) as store:
        for i in range(n):
            ops.start(store, target, {"n": i, "stop": str(stop or db)}, clock=SystemClock())


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[[Path], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(db: Path) -> subprocess.Popen[bytes]:
        with open(tmp_path / f"daemon-{len(procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "-c", "4"],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(ROOT),
            )
        procs.append(proc)
        return proc

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def completed(db: Path) -> int:
    return int(query(db, "SELECT COUNT(*) FROM runs WHERE status = 'completed'")[0][0])


@pytest.mark.crash
def test_backup_while_a_daemon_writes_is_whole_and_works(
    tmp_path: Path, daemons: Callable[[Path], subprocess.Popen[bytes]]
) -> None:
    db = tmp_path / "f.db"
    (tmp_path / "flows.py").write_text(FLOWS)
    stop = tmp_path / "stop"  # the runs keep writing until it exists
    start_runs(db, f"{tmp_path / 'flows.py'}:busy", 40, stop)
    daemon = daemons(db)
    wait_until(lambda: query(db, "SELECT COUNT(*) FROM journal")[0][0] > 20, timeout=30)
    copy = tmp_path / "copy.db"
    out = flowctl(db, "backup", str(copy), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "integrity_check ok" in out.stdout
    assert query(copy, "PRAGMA integrity_check") == [("ok",)]
    # A snapshot: no journal row without its run, and every run is there.
    orphans = "SELECT COUNT(*) FROM journal WHERE run_id NOT IN (SELECT run_id FROM runs)"
    assert query(copy, orphans) == [(0,)]
    assert query(copy, "SELECT COUNT(*) FROM runs") == [(40,)]
    assert completed(copy) == 0  # taken while the daemon was working
    # No daemon serves the copy: it does not say one does, and it may be copied at once.
    assert query(db, "SELECT COUNT(*) FROM daemons")[0][0] >= 1  # with its workers, if any
    assert query(copy, "SELECT COUNT(*) FROM daemons") == [(0,)]
    assert "daemon pid" not in flowctl(copy, "status", cwd=tmp_path).stdout
    moved = flowctl(copy, "copy", str(copy), str(tmp_path / "moved.db"), cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    stop.touch()
    daemon.terminate()
    assert daemon.wait(timeout=60) == 0
    # The copy is a working database: its unfinished runs finish there.
    again = daemons(copy)
    wait_until(lambda: completed(copy) == 40, timeout=60)
    again.terminate()
    assert again.wait(timeout=60) == 0
    assert not list(tmp_path.glob(".copy.db.flowctl-backup-*"))


def test_an_existing_file_is_kept_without_force(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowctl(db, "init", cwd=tmp_path).returncode == 0 or db.exists() or True
    (tmp_path / "flows.py").write_text(FLOWS)
    assert (
        flowctl(db, "run", f"{tmp_path / 'flows.py'}:busy", "--detach", cwd=tmp_path).returncode
        == 0
    )
    dest = tmp_path / "old.db"
    dest.write_bytes(b"precious")
    out = flowctl(db, "backup", str(dest), cwd=tmp_path)
    assert out.returncode == 1
    assert "--force" in out.stderr and out.stderr.count("\n") == 1
    assert dest.read_bytes() == b"precious"
    out = flowctl(db, "backup", str(dest), "--force", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert query(dest, "SELECT COUNT(*) FROM runs") == [(1,)]
    assert oct(dest.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("where", ["folder", "missing-folder", "itself", "", "pipe"])
def test_a_bad_path_is_refused_and_nothing_written(tmp_path: Path, where: str) -> None:
    db = tmp_path / "f.db"
    (tmp_path / "flows.py").write_text(FLOWS)
    assert (
        flowctl(db, "run", f"{tmp_path / 'flows.py'}:busy", "--detach", cwd=tmp_path).returncode
        == 0
    )
    if where == "pipe":  # not a regular file, as /dev/null is not: a rename would replace it
        os.mkfifo(tmp_path / "pipe")
    before = digest(db)
    files = sorted(p.name for p in tmp_path.iterdir())
    dest = {
        "folder": str(tmp_path),
        "missing-folder": str(tmp_path / "nope" / "x.db"),
        "itself": str(db),
        "": "",
        "pipe": str(tmp_path / "pipe"),
    }[where]
    out = flowctl(db, "backup", dest, "--force", cwd=tmp_path)
    assert out.returncode in (1, 2)
    assert out.stderr.startswith("flowctl: ") and out.stderr.count("\n") == 1
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files
    if where == "pipe":
        assert stat.S_ISFIFO((tmp_path / "pipe").stat().st_mode)
        assert "not a regular file" in out.stderr


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_backup_onto_a_file_of_the_live_database_is_refused(tmp_path: Path, suffix: str) -> None:
    # `backup --force f.db-wal` wrote a database over the live write-ahead log: every
    # command after it said "database disk image is malformed".
    db = tmp_path / "f.db"
    (tmp_path / "flows.py").write_text(FLOWS)
    target = f"{tmp_path / 'flows.py'}:busy"
    assert flowctl(db, "run", target, "--detach", cwd=tmp_path).returncode == 0
    out = flowctl(db, "backup", f"{db}{suffix}", "--force", cwd=tmp_path)
    assert out.returncode == 1 and "is a file of the live database" in out.stderr
    assert flowctl(db, "ls", cwd=tmp_path).returncode == 0
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
