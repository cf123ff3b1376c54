"""A real PostgreSQL server for the tests: one fresh database per test, no mocks.

The server is the one FLOWCTL_TEST_PG_URL names when it is set. Otherwise, when PostgreSQL's
server programs are installed (`apt-get install postgresql`; FLOWCTL_TEST_PG_BIN names
another folder of them), the first test that needs a server starts a throwaway cluster with
`.ci/pg-cluster`, one for the whole session: the session that begins (pytest's own process,
or pytest-xdist's controller) makes a folder for it (FLOWCTL_TEST_PG_DIR, which its workers
inherit), the workers start it once under a file lock in that folder, and the session
stops it and removes the folder when it ends, after its last worker. A cluster whose
session was killed is stopped by the next session. Without either the PostgreSQL tests
skip, summarised in one line (conftest.py folds their reports); under CI (CI=true) they
fail instead, so CI can never pass by skipping them.

Each test gets its own database (CREATE DATABASE, dropped afterwards), so tests stay
independent under pytest-xdist and never see each other's rows or notifications.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

URL_ENV = "FLOWCTL_TEST_PG_URL"
BIN_ENV = "FLOWCTL_TEST_PG_BIN"
DIR_ENV = "FLOWCTL_TEST_PG_DIR"
PG_CLUSTER = Path(__file__).resolve().parent.parent / ".ci" / "pg-cluster"
DIR_PREFIX = "flowctl-test-pg-"
NO_SERVER = "no PostgreSQL server for the tests"
_HOW = (
    f"{NO_SERVER}: install PostgreSQL's server programs (Debian: apt-get install postgresql;"
    f" the tests then start a throwaway one) or set {URL_ENV} to a server's URL"
)
_checked: dict[str, str | None] = {}  # base url -> why it cannot be used (None: usable)
_started: dict[str, str] = {}  # cluster folder -> its URL, or why it could not start
SKIPPED: set[str] = set()  # the reasons this process skipped tests for (conftest folds them)


def unavailable(why: str) -> None:
    """Skip the test for want of a server (fail it under CI=true)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {why}", pytrace=False)
    SKIPPED.add(why)
    pytest.skip(why)


def server_binaries() -> str | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl): FLOWCTL_TEST_PG_BIN if
    set, else the newest /usr/lib/postgresql/*/bin (Debian), else pg_ctl's on PATH."""
    if BIN_ENV in os.environ:
        given = os.environ[BIN_ENV]
        return given if os.path.isfile(os.path.join(given, "pg_ctl")) else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version)
    if found:
        return found[-1]
    pg_ctl = shutil.which("pg_ctl")
    return os.path.dirname(pg_ctl) if pg_ctl else None


def _version(bindir: str) -> tuple[int, ...]:
    name = Path(bindir).parent.name
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def begin_session() -> str | None:
    """At the start of a session (not in an xdist worker, nor under a session that already
    did this): when the tests have no server URL but could start one, make the folder its
    cluster will live in and export it; returns that folder (this session owns it)."""
    stop_abandoned_clusters()
    if os.environ.get(URL_ENV, "").strip() or DIR_ENV in os.environ or not server_binaries():
        return None
    folder = tempfile.mkdtemp(prefix=DIR_PREFIX)
    os.chmod(folder, 0o711)  # run as root, the server (user postgres) must reach cluster/
    Path(folder, "owner").write_text(str(os.getpid()))
    os.environ[DIR_ENV] = folder
    return folder


def end_session(folder: str) -> None:
    """Stop the session's cluster, if a test started it, and remove its folder."""
    with _locked(folder):
        if Path(folder, "cluster").exists():  # started, or killed while starting
            _pg_cluster("stop", folder)
    shutil.rmtree(folder, ignore_errors=True)
    if os.environ.get(DIR_ENV) == folder:
        del os.environ[DIR_ENV]


def stop_abandoned_clusters() -> None:
    """Stop the clusters of sessions that were killed before they could (owner not alive)."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), DIR_PREFIX + "*")):
        try:
            owner = int(Path(folder, "owner").read_text())
        except (OSError, ValueError):
            continue
        if not _alive(owner):
            end_session(folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _locked(folder: str) -> Iterator[None]:
    with open(os.path.join(folder, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # released when the file closes


def _pg_cluster(action: str, folder: str) -> str:
    bindir = server_binaries()
    proc = subprocess.run(
        [str(PG_CLUSTER), action, os.path.join(folder, "cluster")],
        capture_output=True,
        text=True,
        env={**os.environ, "PG_BINDIR": bindir or ""},
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f".ci/pg-cluster {action} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def session_cluster(folder: str) -> str:
    """The URL of the session's throwaway cluster, started by whichever worker asks first."""
    with _locked(folder):
        url_file = Path(folder, "url")
        if not url_file.exists():
            url_file.write_text(_pg_cluster("start", folder))
        return url_file.read_text().strip()


def server_url() -> str:
    """The server's base URL (its maintenance database), or skip / fail as above."""
    url = os.environ.get(URL_ENV, "").strip()
    folder = os.environ.get(DIR_ENV, "")
    if not url and os.path.isdir(folder):
        if folder not in _started:
            try:
                _started[folder] = session_cluster(folder)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                _started[folder] = f"{NO_SERVER}: {e}"
        url = _started[folder]
        if not url.startswith("postgresql://"):
            unavailable(url)
    if not url:
        unavailable(_HOW)
    if url not in _checked:
        try:
            import psycopg
        except ImportError:
            _checked[url] = "psycopg is not installed: pip install -e '.[dev]'"
        else:
            try:
                psycopg.connect(url, connect_timeout=5).close()
                _checked[url] = None
            except psycopg.Error as e:
                _checked[url] = f"the test server cannot be used: {e}".splitlines()[0]
    why = _checked[url]
    if why is not None:
        unavailable(why)
    return url


def with_database(url: str, name: str) -> str:
    """`url` naming the database `name` instead."""
    scheme, netloc, _, query, fragment = urlsplit(url)
    return urlunsplit((scheme, netloc, "/" + name, query, fragment))


def _admin(url: str, statement: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(sql.Identifier(name)))


def create_database(url: str) -> str:
    """A new empty database on the server; returns its name."""
    name = f"flowctl_test_{uuid.uuid4().hex[:16]}"
    _admin(url, "CREATE DATABASE {}", name)
    return name


def drop_database(url: str, name: str) -> None:
    _admin(url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new empty database, dropped (with any connection left) afterwards."""
    base = server_url()
    name = create_database(base)
    try:
        yield with_database(base, name)
    finally:
        drop_database(base, name)
