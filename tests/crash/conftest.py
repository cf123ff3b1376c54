"""Real `flowctl daemon` processes for the crash tests, and independent reads of the database.

A crash test takes the `db` fixture (tests/conftest.py): a SQLite file path or the URL of a
fresh PostgreSQL database, once each. Daemons get it as `--db`, runs are started through
flowctl's public `open_store`, and the results are read with tests/dbs.py (sqlite3 for a
file, psycopg for a URL), never through flowctl's own code."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.ids import HOST
from flowctl.store import open_store
from tests.dbs import is_url, rows

ROOT = Path(__file__).resolve().parents[2]
FLOWS = "tests/crash/flows.py"


class Daemons:
    """Starts `python -m flowctl daemon` in its own session (so a test can signal its whole
    process group, as a terminal's Ctrl-C or a service manager would); kills leftovers.

    One process per daemon (`--workers 1`) unless the test gives --workers: these tests
    kill, stop and signal the process that runs the handlers. Worker processes (the
    default on several cores) are killed by test_workers_kill9 and the crash loop."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, db: Path | str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"daemon-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flowctl",
                "--db",
                str(db),
                "daemon",
                "--log-level",
                "info",
                *(() if "--workers" in args else ("--workers", "1")),
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return (self.tmp_path / f"daemon-{self.procs.index(proc)}.log").read_text()

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    yield d
    d.cleanup()


def start_runs(
    db: Path | str, name: str, inputs: list[dict[str, Any]], *, target: str | None = None
) -> list[str]:
    """Queue one run of `name` in tests/crash/flows.py (or of `target`) per input."""
    with open_store(str(db)) as store:
        return [
            ops.start(
                store, target or f"{FLOWS}:{name}", i, clock=SystemClock(), cwd=str(ROOT)
            ).run.run_id
            for i in inputs
        ]


def read(db: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the database as an independent observer (its own connection, no flowctl code):
    a SQLite file, or a postgresql:// URL (tests/dbs.py; `?` placeholders either way)."""
    return rows(db, sql, params)


def statuses(db: Path | str) -> dict[str, str]:
    return dict(read(db, "SELECT run_id, status FROM runs"))  # type: ignore[arg-type]


def registered(db: Path | str) -> set[int]:
    """The pids of the daemons registered in the database. A daemon registers after it has
    installed its signal handlers: from then on SIGTERM drains it (before, a daemon started
    just now could be stopped mid-import and exit -15)."""
    return {int(pid) for (pid,) in read(db, "SELECT pid FROM daemons")}


def timeline(db: Path | str, run_id: str, type_: str | None = None) -> list[dict[str, Any]]:
    rows = read(db, "SELECT at, type, data FROM timeline WHERE run_id = ? ORDER BY seq", (run_id,))
    return [
        {"at_us": at, "type": t, **json.loads(data or "{}")}
        for at, t, data in rows
        if type_ is None or t == type_
    ]


def mid_write(db: Path | str, pid: int) -> bool:
    """Whether the daemon `pid` may be inside a write right now, so that freezing it would
    hold up everyone else: on SQLite, someone holds the file's write lock; on PostgreSQL,
    that process has a statement or a transaction open on the server (its row locks)."""
    if not is_url(db):
        return holds_write_lock(Path(db))
    name = f"flowctl {HOST} {pid}"[:63]  # the application_name flowctl's connections carry
    busy = rows(
        db,
        "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = ? AND state <> 'idle'",
        (name,),
    )
    return bool(busy[0][0])


def intact(db: Path | str) -> bool:
    """The SQLite file passes integrity_check. A PostgreSQL database has no file of ours
    to check (the server owns its pages), so there it is true."""
    return is_url(db) or rows(db, "PRAGMA integrity_check") == [("ok",)]


def holds_write_lock(db: Path) -> bool:
    """True when some process holds the SQLite file's write lock right now."""
    conn = sqlite3.connect(str(db), timeout=0.05, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def seeded_rng() -> random.Random:
    """The test's random choices, from FLOWCTL_CRASH_SEED when given (to replay a failure),
    else a fresh seed, printed so a failure can be replayed."""
    seed = int(os.environ.get("FLOWCTL_CRASH_SEED") or random.randrange(2**32))
    print(f"FLOWCTL_CRASH_SEED={seed}")
    return random.Random(seed)


def worker_pids(daemon_pid: int) -> list[int]:
    """The daemon's child processes: its workers (Linux /proc)."""
    pids: list[int] = []
    for task in Path(f"/proc/{daemon_pid}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(set(pids))
