"""Opening the database: which commands create one, which refuse a missing one, foreign,
newer, invalid and corrupt files refused with not one byte changed, read-only access,
`--db ""`, and the modes of the folder and files flowctl creates.

Read-only access is exercised for real, though tests run as root (for whom mode bits do
not bite): a tmpfs remounted read-only (EROFS, like a read-only bind mount) and a file made
immutable with `chattr +i` (EPERM). Each is skipped where the machine cannot do it, and
undone at teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.worker import WorkerCancelled
from typer.testing import CliRunner

from flowctl import cli
from flowctl.clock import SystemClock
from flowctl.errors import DatabaseNotFoundError
from flowctl.store import APPLICATION_ID, SCHEMA_VERSION, NewRun
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.store.sqlite import opening as store_module
from flowctl.tui import FlowctlApp, RunTable
from tests.conftest import ROOT

# ---------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _no_env_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def flow(tmp_path: Path) -> str:
    path = tmp_path / "flows.py"
    path.write_text(
        "from flowctl import workflow\n\n@workflow\ndef hello(ctx):\n"
        "    return ctx.step('hi', lambda: 'hi')\n"
    )
    return f"{path}:hello"


def invoke(db: Path | str, *args: str) -> Any:
    result = CliRunner().invoke(cli.app, ["--db", str(db), *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback is a failure of its own
    return result


def one_line(result: Any) -> str:
    err = str(result.stderr).strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("flowctl: "), err
    return err


def files(folder: Path) -> dict[str, bytes]:
    """Every file in a folder with its bytes: 'not one byte changed, nothing created'."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def seeded(db: Path, n: int = 3) -> list[str]:
    from datetime import UTC, datetime

    with Store(db) as s:
        for i in range(n):
            s.create_run(
                NewRun(run_id=f"r_{i}", workflow="w", target="t", kind="python", input={"i": i}),
                datetime(2026, 1, 1, tzinfo=UTC),
            )
    return [f"r_{i}" for i in range(n)]


def header_ints(db: Path) -> tuple[int, int, int]:
    """(file format write version, user_version, application_id) read from the header bytes:
    1 is a rollback journal, 2 is WAL."""
    head = db.read_bytes()[:100]
    return head[18], int.from_bytes(head[60:64], "big", signed=True), int.from_bytes(head[68:72])


# ---------------------------------------------------------------- a missing database

READERS = [
    ["ls"],
    ["ls", "--json"],
    ["show", "r_1"],
    ["status"],
    ["agenda"],
    ["tui"],
    ["schedule", "ls"],
    ["schedule", "show", "nightly"],
    # and the commands that change what exists: nothing to change in a missing database
    ["signal", "r_1", "go"],
    ["cancel", "r_1"],
    ["wake", "r_1"],
]
if "why" in {c.name for c in cli.app.registered_commands}:
    READERS.append(["why", "r_1"])


@pytest.mark.parametrize("args", READERS, ids=lambda a: " ".join(a))
def test_a_reading_command_refuses_a_missing_database_and_creates_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    db = tmp_path / "typo" / "x.db"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(db, *args)
    assert result.exit_code == 1
    err = one_line(result)
    assert str(db) in err and "flowctl init" in err and "starting a run" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # not even the folder


def test_the_store_refuses_a_missing_file_without_create(tmp_path: Path) -> None:
    with pytest.raises(DatabaseNotFoundError):
        Store(tmp_path / "none.db", create=False)
    assert list(tmp_path.iterdir()) == []


def test_run_creates_the_database_and_its_folder_0700_whatever_the_umask(
    tmp_path: Path, flow: str
) -> None:
    db = tmp_path / "new" / "deeper" / "x.db"
    old = os.umask(0)
    try:
        result = invoke(db, "run", flow, "--detach")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    assert db.parent.stat().st_mode & 0o777 == 0o700
    assert db.stat().st_mode & 0o777 == 0o600
    assert invoke(db, "ls").exit_code == 0


def test_schedule_add_creates_the_database(tmp_path: Path, flow: str) -> None:
    db = tmp_path / "s.db"
    result = invoke(db, "schedule", "add", "nightly", "--cron", "0 9 * * *", flow)
    assert result.exit_code == 0, result.stderr
    assert invoke(db, "schedule", "ls").exit_code == 0


def test_init_creates_the_database_its_config_names(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, ["init"])
    assert result.exit_code == 0, result.stderr
    db = tmp_path / ".flowctl" / "flowctl.db"
    assert f"created database {db}" in result.stdout
    assert db.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / ".flowctl").stat().st_mode & 0o777 == 0o700
    assert CliRunner().invoke(cli.app, ["ls"]).exit_code == 0


def test_the_daemon_creates_the_database_and_says_so_in_its_first_log_line(
    tmp_path: Path,
) -> None:
    db = tmp_path / "d" / "x.db"
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--until-idle"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"},
    )
    assert out.returncode == 0, out.stderr
    first = out.stderr.splitlines()[0]
    assert f"created a new database at {db}" in first
    assert db.exists()
    again = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--until-idle"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert again.returncode == 0, again.stderr
    assert "created" not in again.stderr and f"on {db}" in again.stderr.splitlines()[0]


def test_an_empty_db_option_is_a_usage_error(tmp_path: Path) -> None:
    for args in (["ls"], ["run", "x.yaml"], ["daemon", "--until-idle"]):
        result = invoke("", *args)
        assert result.exit_code == 2
        assert "--db is empty" in one_line(result)
    assert list(tmp_path.iterdir()) == []


def test_a_database_folder_that_cannot_be_created_is_one_line(tmp_path: Path, flow: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = invoke(blocker / "sub" / "x.db", "run", flow, "--detach")
    assert result.exit_code == 1
    err = one_line(result)
    assert "cannot create the database folder" in err and str(blocker) in err


# ---------------------------------------------------------------- foreign files


def foreign_db(path: Path, *tables: str) -> None:
    conn = sqlite3.connect(path)
    for t in tables:
        conn.execute(t)
    conn.execute("INSERT INTO notes VALUES ('keep me')") if "notes" in " ".join(tables) else None
    conn.commit()
    conn.close()


FOREIGN = {
    "own-tables": ["CREATE TABLE notes (text TEXT)", "CREATE TABLE tags (name TEXT)"],
    "own-runs-table": [
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT)",
        "CREATE TABLE notes (text TEXT)",
    ],
}


@pytest.mark.parametrize("kind", list(FOREIGN))
@pytest.mark.parametrize(
    "args",
    [["ls"], ["status"], ["show", "r_1"], ["run", "{flow}", "--detach"], ["schedule", "ls"]],
    ids=lambda a: " ".join(a),
)
def test_another_applications_database_is_refused_with_not_one_byte_changed(
    tmp_path: Path, flow: str, kind: str, args: list[str]
) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    db = folder / "app.db"
    foreign_db(db, *FOREIGN[kind])
    before = files(folder)
    result = invoke(db, *[a.replace("{flow}", flow) for a in args])
    assert result.exit_code == 1
    err = one_line(result)
    assert f"{db} is not a flowctl database" in err
    assert files(folder) == before  # no tables, no WAL switch, no -wal or -shm left behind


def test_the_daemon_refuses_a_foreign_database(tmp_path: Path) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    db = folder / "app.db"
    foreign_db(db, *FOREIGN["own-tables"])
    before = files(folder)
    out = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--until-idle"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        line for line in out.stderr.strip().splitlines() if "is not a flowctl database" in line
    ]
    assert "Traceback" not in out.stderr
    assert files(folder) == before


def test_an_empty_sqlite_file_is_initialised(tmp_path: Path, flow: str) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).execute("PRAGMA user_version").fetchall()  # 0 bytes, or a bare header
    result = invoke(db, "run", flow, "--detach")
    assert result.exit_code == 0, result.stderr
    with Store(db) as s:
        assert len(s.list_runs()) == 1


def test_a_flowctl_database_from_before_the_marker_is_recognised_and_marked(
    tmp_path: Path, flow: str
) -> None:
    db = tmp_path / "old.db"
    seeded(db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA application_id = 0")  # as written by flowctl before the marker
    conn.close()
    assert invoke(db, "ls").exit_code == 0
    assert invoke(db, "run", flow, "--detach").exit_code == 0
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def rollback_mode_copy(db: Path, user_version: int) -> None:
    """A flowctl database switched back to a rollback journal, at another schema version:
    so a WAL switch made before refusing would show in the header."""
    seeded(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA user_version = {user_version}")
    conn.close()


@pytest.mark.parametrize(
    ("version", "needle"),
    [
        (SCHEMA_VERSION + 1, "is newer than this flowctl understands"),
        (-1, "invalid"),
        (0, "invalid"),
    ],
)
def test_a_newer_or_invalid_schema_is_refused_before_anything_is_written(
    tmp_path: Path, flow: str, version: int, needle: str
) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    db = folder / "f.db"
    rollback_mode_copy(db, version)
    assert header_ints(db) == (1, version, APPLICATION_ID)
    before = files(folder)
    for args in (["ls"], ["run", flow, "--detach"], ["status"]):
        result = invoke(db, *args)
        assert result.exit_code == 1
        assert needle in one_line(result)
    assert files(folder) == before
    assert header_ints(db)[0] == 1  # still a rollback journal: no WAL switch


def corrupt(db: Path) -> None:
    """Overwrite every page after the first (the schema) with garbage."""
    page = 4096
    data = bytearray(db.read_bytes())
    assert len(data) > 2 * page
    data[page:] = b"\xa5" * (len(data) - page)
    db.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "args",
    [["ls"], ["status"], ["show", "r_1"], ["run", "{flow}", "--detach"], ["agenda"]],
    ids=lambda a: " ".join(a),
)
@pytest.mark.parametrize("quick_check", [True, False], ids=["on-open", "on-read"])
def test_a_corrupt_database_is_one_line_for_every_command(
    tmp_path: Path, flow: str, args: list[str], quick_check: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "f.db"
    seeded(db, 50)
    corrupt(db)
    if not quick_check:  # a file too big for quick_check on open: the read itself says it
        monkeypatch.setattr(store_module, "QUICK_CHECK_MAX_BYTES", 0)
    result = invoke(db, *[a.replace("{flow}", flow) for a in args])
    assert result.exit_code == 1
    err = one_line(result)
    assert f"database disk image is malformed: {db}" in err


# ---------------------------------------------------------------- read-only access


@contextlib.contextmanager
def _mounted_tmpfs(where: Path) -> Iterator[Path]:
    where.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(where)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


@pytest.fixture
def ro_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on a filesystem remounted read-only, holding a flowctl database (f.db)."""
    with _mounted_tmpfs(tmp_path / "ro") as folder:
        seeded(folder / "f.db")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder


@pytest.fixture
def immutable_db(tmp_path: Path) -> Iterator[Path]:
    """A flowctl database file made immutable (chattr +i) in a writable folder."""
    folder = tmp_path / "imm"
    folder.mkdir()
    db = folder / "f.db"
    seeded(db)
    try:
        subprocess.run(["chattr", "+i", str(db)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"chattr +i does not work here: {e}")
    try:
        yield db
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=False)


def _read_only_reads_work_and_writes_are_one_line(db: Path, flow: str) -> None:
    """Reads work and say so; writes are one line; the database file keeps every byte.
    (Beside an immutable file SQLite's readers may create an empty -wal and the -shm.)"""
    folder = db.parent
    before = db.read_bytes()
    reads = [["ls"], ["ls", "--json"], ["show", "r_1"], ["status"], ["schedule", "ls"]]
    if "why" in {c.name for c in cli.app.registered_commands}:
        reads.append(["why", "r_1"])
    for args in reads:
        result = invoke(db, *args)
        assert result.exit_code == 0, (args, result.stderr)
        assert result.stderr.strip() == (
            f"flowctl: note: {db} is read-only here: opened for reading only"
        )
    assert "r_1" in invoke(db, "ls").stdout
    for args in (["signal", "r_1", "go"], ["cancel", "r_1"], ["run", flow, "--detach"]):
        result = invoke(db, *args)
        assert result.exit_code == 1, (args, result.stdout)
        assert one_line(result).startswith(f"flowctl: read-only database: {db}")
    assert db.read_bytes() == before
    assert set(files(folder)) <= {db.name, f"{db.name}-wal", f"{db.name}-shm"}
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def test_a_database_on_a_read_only_filesystem_is_read(ro_folder: Path, flow: str) -> None:
    _read_only_reads_work_and_writes_are_one_line(ro_folder / "f.db", flow)


def test_an_immutable_database_file_is_read(immutable_db: Path, flow: str) -> None:
    _read_only_reads_work_and_writes_are_one_line(immutable_db, flow)


def test_a_new_database_in_a_read_only_folder_is_one_line(ro_folder: Path, flow: str) -> None:
    result = invoke(ro_folder / "sub" / "x.db", "run", flow, "--detach")
    assert result.exit_code == 1
    assert "cannot create the database folder" in one_line(result)


def test_the_tui_opens_a_read_only_database_and_says_so(ro_folder: Path) -> None:
    store = Store(ro_folder / "f.db", create=False, allow_read_only=True)
    assert store.read_only
    app = FlowctlApp(store=store, clock=SystemClock(), view="auto")  # as `flowctl tui` does
    seen: list[str] = []

    async def scenario() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            for _ in range(3):  # let the thread worker load the rows
                for worker in list(app.workers):
                    with contextlib.suppress(WorkerCancelled):
                        await worker.wait()
                await pilot.pause()
            seen.append(str(app.query_one("HeaderLine").render()))
            table = app.query_one("#table", RunTable)
            seen.extend(str(row.key.value) for row in table.ordered_rows)

    asyncio.run(scenario())
    store.close()
    assert "read-only" in seen[0]
    assert sorted(seen[1:]) == ["r_0", "r_1", "r_2"]


# ---------------------------------------------------------------- file modes


def test_an_existing_database_wal_and_shm_become_0600_when_opened_for_writing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "f.db"
    seeded(db)
    keep = Store(db)  # holds the WAL and SHM open, as a running daemon would
    keep.list_runs()
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        os.chmod(p, 0o644)
    assert invoke(db, "ls").exit_code == 0  # any opening that can write: reads included
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir() if "f.db" in p.name}
    assert modes == {"f.db": 0o600, "f.db-wal": 0o600, "f.db-shm": 0o600}
    keep.close()
