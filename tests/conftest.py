"""Shared fixtures: a temporary database, a fake clock, an in-process daemon driven by tick()."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import pytest
import typer.main
import typer.testing

from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.runtime.engine import Engine
from flowctl.store.sqlite import SqliteStore as Store
from tests import pg

ROOT = Path(__file__).resolve().parent.parent

_build_command = typer.main.get_command
_built: dict[typer.Typer, click.Command] = {}


def _command_built_once(app: typer.Typer) -> click.Command:
    """Typer rebuilds the click command tree from every function's signature on each call
    (tens of ms); a test session calls it for each of thousands of in-process invocations
    of an app that never changes, so each app's tree is built once and reused (click runs
    a command from a fresh context every time, as a new process would)."""
    if app not in _built:
        _built[app] = _build_command(app)
    return _built[app]


typer.main.get_command = _command_built_once  # what Typer.__call__ (cli.main) calls
typer.testing._get_command = _command_built_once  # what CliRunner.invoke calls


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement run on a connection opened from here on."""
    seen: list[str] = []
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    yield seen


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "flowctl.db"


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 29, 0, 59, tzinfo=UTC))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The store under test, once per backend: a SQLite file in tmp_path (the file db_path
    names), and a fresh PostgreSQL database of its own (skipped without a server; see
    tests/pg.py)."""
    if request.param == "sqlite":
        s = Store(tmp_path / "flowctl.db")
    else:
        from flowctl.store.postgres.store import PostgresStore

        s = PostgresStore(request.getfixturevalue("pg_url"))  # type: ignore[assignment]
    yield s
    s.close()


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database for front-end tests (CLI, ops, client), once per backend, as `--db`
    takes it: a SQLite file path in tmp_path (not yet created), or the URL of a fresh empty
    PostgreSQL database (skipped without a server; see tests/pg.py). Read it as an
    independent observer with tests/dbs.py."""
    if request.param == "sqlite":
        return str(tmp_path / "flowctl.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def engine(store: Store, fake_clock: FakeClock) -> Engine:
    return Engine(store, fake_clock)


@pytest.fixture
def daemon(store: Store, fake_clock: FakeClock) -> Daemon:
    return Daemon(store, fake_clock, DaemonConfig(concurrency=4, lease=15, heartbeat=1))


@pytest.fixture
def flows_dir(tmp_path: Path) -> Path:
    """A folder for workflow files written by a test."""
    d = tmp_path / "flows"
    d.mkdir()
    return d


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[object]:
    """Start real `flowctl daemon` subprocesses; all are killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(tmp_path / f"daemon-{len(procs)}.log", "wb") as log:  # the child keeps its copy
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "flowctl",
                    "--db",
                    str(db),
                    "daemon",
                    "--log-level",
                    "warning",
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=str(ROOT),
            )
        procs.append(proc)
        return proc

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


_PG_FOLDER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The session (not an xdist worker) readies a throwaway PostgreSQL cluster for its
    tests when no server URL is given (tests/pg.py: started on first use, by one worker)."""
    if not hasattr(config, "workerinput"):
        folder = pg.begin_session()
        if folder is not None:
            config.stash[_PG_FOLDER] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """After the last worker: stop the session's cluster and remove its folder."""
    folder = config.stash.get(_PG_FOLDER, None)
    if folder is not None:
        pg.end_session(folder)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Tests skipped for want of a PostgreSQL server are reported at tests/pg.py, so `-ra`
    summarises them in one line (SKIPPED [656] tests/pg.py: no PostgreSQL server ...),
    not one line per test file and line."""
    report: pytest.TestReport = yield
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
        if reason.removeprefix("Skipped: ") in pg.SKIPPED:
            report.longrepr = (pg.__file__, None, reason)
    return report


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database of its own (see tests/pg.py); skips without a
    server, fails without one under CI=true."""
    with pg.fresh_database() as url:
        yield url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PostgreSQL variant of a `store` test that also uses the SQLite file itself (it,
    or a fixture it uses, asks for `db_path`: the file's header, WAL, pragmas, a direct
    connection) is not generated: that test is about the SQLite backend. Nor is that of a
    TUI snapshot test: it checks the rendering, the same for both, and the PostgreSQL
    database's name (shown in the header) differs in every test."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        names = getattr(item, "fixturenames", ())
        sqlite_file = "db_path" in names or "snap_compare" in names
        on_pg = callspec is not None and "postgres" in (
            callspec.params.get("store"),
            callspec.params.get("db"),
        )
        if on_pg and sqlite_file:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _tui_in_utc(request: pytest.FixtureRequest) -> Iterator[None]:
    """TUI tests see the machine's local zone as UTC: the TUI shows local time with the
    zone (as the CLI does), and a snapshot must not depend on the host's TZ. A test that
    wants another zone sets TZ itself (monkeypatch) and calls time.tzset()."""
    if request.node.get_closest_marker("tui") is None:
        yield
        return
    import time

    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()
