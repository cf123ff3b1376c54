"""A postgresql:// URL selects the PostgreSQL store wherever a database is named (--db,
FLOWCTL_DB, flowctl.toml); every way of not reaching the server is one line, exit 1.

The server cases run against the real test server (tests/pg.py): a port nothing listens
on, a wrong password, a database that does not exist.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from flowctl.config import Config, is_database_url, resolve_db
from flowctl.errors import ConfigError
from tests.conftest import ROOT
from tests.pg import server_url, with_database

URL = "postgresql://flow:secret@db.internal:5433/flowctl"


def flowctl(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"}
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "flowctl"]
    return subprocess.run(
        command + ([] if code else list(args)),
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=str(cwd),
        timeout=60,
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "POSTGRESQL"])
def test_a_url_is_kept_as_given_from_db_env_and_toml(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = URL.replace("postgresql", scheme, 1)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    none = Config(path=None, values={})
    assert resolve_db(url, none) == url  # a str, never a Path folding its //
    monkeypatch.setenv("FLOWCTL_DB", url)
    assert resolve_db(None, none) == url
    monkeypatch.delenv("FLOWCTL_DB")
    toml = Config(path=tmp_path / "flowctl.toml", values={"db": url})
    assert resolve_db(None, toml) == url


def test_anything_else_is_a_sqlite_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    none = Config(path=None, values={})
    for name in ("flowctl.db", "postgresql.db", "./postgres:/x.db"):
        assert not is_database_url(name)
        assert resolve_db(name, none) == Path(name)
    toml = Config(path=tmp_path / "flowctl.toml", values={"db": "state/flowctl.db"})
    assert resolve_db(None, toml) == tmp_path / "state" / "flowctl.db"


@pytest.mark.parametrize("url", ["mysql://h/db", "postgresq://u@h/db", "sqlite:///x.db"])
def test_a_url_of_another_kind_is_refused_not_made_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """A mistyped or foreign URL would become a SQLite file in a folder named after it."""
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    none = Config(path=None, values={})
    scheme = url.split(":", 1)[0]
    with pytest.raises(ConfigError, match=f"--db '{url}': {scheme}:// URLs are not accepted"):
        resolve_db(url, none)
    monkeypatch.setenv("FLOWCTL_DB", url)
    with pytest.raises(ConfigError, match="FLOWCTL_DB"):
        resolve_db(None, none)
    monkeypatch.delenv("FLOWCTL_DB")
    with pytest.raises(ConfigError, match="db in "):
        resolve_db(None, Config(path=tmp_path / "flowctl.toml", values={"db": url}))


def test_the_cli_runs_a_workflow_on_postgresql_and_never_makes_a_folder(
    pg_url: str, tmp_path: Path
) -> None:
    env = {"FLOWCTL_DB": pg_url}
    empty = flowctl("ls", env=env, cwd=tmp_path)
    assert "no flowctl database at postgresql://" in one_line_error(empty)
    assert f":{urlsplit(pg_url).password}@" not in empty.stderr  # the password is never shown
    done = flowctl("--db", pg_url, "run", str(ROOT / "workflows/ping.yaml"), "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = flowctl("ls", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert run["status"] == "completed" and run["workflow"] == "ping"
    assert list(tmp_path.iterdir()) == []  # no folder named "postgresql:" or any file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_that_is_not_there_is_one_line_naming_it() -> None:
    url = f"postgresql://flowctl:flowctl@127.0.0.1:{_free_port()}/flowctl"
    line = one_line_error(flowctl("--db", url, "ls"))
    assert line.startswith("flowctl: cannot connect to PostgreSQL at 127.0.0.1:")
    assert "/flowctl: " in line and "refused" in line.lower()


def test_a_refused_login_is_one_line_naming_the_server_and_the_user(pg_url: str) -> None:
    parts = urlsplit(pg_url)
    bad = pg_url.replace(f":{parts.password}@", ":wrong-password@", 1)
    line = one_line_error(flowctl("--db", bad, "ls"))
    where = f"{parts.hostname}:{parts.port}{parts.path}"
    assert line.startswith(f"flowctl: cannot connect to PostgreSQL at {where}: ")
    assert f'password authentication failed for user "{parts.username}"' in line
    assert "wrong-password" not in line


def test_a_database_that_does_not_exist_is_one_line_naming_it() -> None:
    url = with_database(server_url(), "no_such_flowctl_db")
    line = one_line_error(flowctl("--db", url, "daemon"))
    assert "cannot connect to PostgreSQL at 127.0.0.1:" in line
    assert 'database "no_such_flowctl_db" does not exist' in line


def test_without_psycopg_a_url_names_the_extra_to_install(tmp_path: Path) -> None:
    """psycopg made unimportable in the child (as on a SQLite-only install)."""
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None;"
        " sys.argv = ['flowctl', *sys.argv[1:]]; from flowctl.cli import main; main()"
    )
    line = one_line_error(flowctl("--db", URL, "ls", code=code, cwd=tmp_path))
    assert line == (
        "flowctl: a postgresql:// database needs the PostgreSQL driver: install the extra"
        " with pip install 'flowctl-runner[postgres]'"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_login_that_may_not_create_the_tables_is_one_line(pg_url: str, tmp_path: Path) -> None:
    """A schema the login may not create tables in (PostgreSQL 15's `public` for a login
    that does not own the database) is one line that says what to do, not psycopg's
    traceback; nothing is written."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA locked")
        conn.execute("REVOKE CREATE ON SCHEMA locked FROM current_user")  # an owner may
        conn.execute("ALTER ROLE current_user IN DATABASE " + urlsplit(pg_url).path[1:]
                     + " SET search_path = locked")  # fmt: skip
    try:
        line = one_line_error(flowctl("--db", pg_url, "daemon", "--until-idle", cwd=tmp_path))
        assert "refused to create flowctl's tables" in line
        assert "permission denied for schema locked" in line and "GRANT CREATE" in line
        with psycopg.connect(pg_url) as conn:
            tables = conn.execute("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'locked'")
            assert tables.fetchone() == (0,)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ALTER ROLE current_user IN DATABASE " + urlsplit(pg_url).path[1:]
                         + " RESET search_path")  # fmt: skip
