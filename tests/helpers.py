"""Poll, don't sleep: helpers for tests that watch real processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def db_of(store: Any) -> str:
    """The database `store` uses, as `--db` and FLOWCTL_DB take it: a SQLite file path, or
    a PostgreSQL URL (for a real `flowctl` process on the same database)."""
    return store.location


def open_same(store: Any) -> Any:
    """Another connection to the database `store` uses (the CLI, the TUI, another daemon),
    on the same backend: a SQLite file path, or a PostgreSQL URL."""
    from flowctl.store import open_store

    return open_store(db_of(store))


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Call predicate until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def query(db: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the database directly, as an independent observer: a SQLite file, or a
    postgresql:// URL (tests/dbs.py; `?` placeholders either way)."""
    from tests.dbs import rows

    return rows(db, sql, params)


def execute(db: Path | str, sql: str, params: tuple[Any, ...] = ()) -> int:
    """Write the database directly, as another process would: a SQLite file, or a
    postgresql:// URL (`?` placeholders either way); returns rows changed."""
    from tests.dbs import is_url

    if is_url(db):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as pg:
            return pg.execute(sql.replace("?", "%s"), params).rowcount  # type: ignore[arg-type]
    conn = sqlite3.connect(str(db), timeout=10, isolation_level=None)
    try:
        return conn.execute(sql, params).rowcount
    finally:
        conn.close()


ROOT = Path(__file__).resolve().parent.parent


def logged_daemon(db: str | Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A real `flowctl daemon` on `db` (from the repository root), its output in `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", *args],
            cwd=str(ROOT),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


class ParkedRound:
    """A minimal batch runner (flowctl.daemon.batch) for store tests: greenlets on this thread,
    inside the store's write round for it (Store.write_round), whose writes are queued and
    park until `write_round()` commits the round and resumes them; a write made by this
    (the main) greenlet commits the round at once, as the runner's own does."""

    def __init__(self, store: Any) -> None:
        from greenlet import getcurrent

        self.store = store
        self.main = getcurrent()
        self.parked: list[Any] = []
        self._open = store.write_round(self.park)
        self.round = self._open.__enter__()
        store.set_group_commit(True)

    def park(self) -> None:
        from greenlet import getcurrent

        g = getcurrent()
        if g is self.main:  # the runner's own write: its round commits now
            self.round.commit()
            return
        self.parked.append(g)
        self.main.switch()

    def start(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(*args) in a greenlet until it parks on a write, or ends."""
        from greenlet import greenlet

        g = greenlet(fn)
        g.switch(*args)
        return g

    def write_round(self) -> None:
        """The runner's round: every queued write in one transaction, one COMMIT, then the
        writers return."""
        self.round.commit()
        parked, self.parked = self.parked, []
        for g in parked:
            g.switch()

    def close(self) -> None:
        self._open.__exit__(None, None, None)
        self.store.set_group_commit(False)


def btrees_per_row(db: Path, writes: set[str]) -> list[str]:
    """The statements among `writes` whose program builds a temporary b-tree per row (an
    OpenEphemeral not behind a Once, which builds one per statement), asked of SQLite with
    EXPLAIN on the database `db`: an IN list of three or more values in a CHECK or a
    partial index's condition builds one each time it is evaluated (about 3 µs)."""
    conn = sqlite3.connect(db)
    try:
        bad = []
        for sql in sorted(writes):
            program = [op[1] for op in conn.execute(f"EXPLAIN {sql}")]
            if any(
                op == "OpenEphemeral" and program[i - 1] != "Once" for i, op in enumerate(program)
            ):
                bad.append(sql)
        return bad
    finally:
        conn.close()
