"""A real PostgreSQL server for the tests: one fresh database per test, no mocks.

The server is the one FLOWCTL_TEST_PG_URL names (`.ci/run` starts a throwaway cluster with
`.ci/pg-cluster` and exports it). Without one the PostgreSQL tests skip, saying how to get
one; under CI (CI=true) they fail instead, so CI can never pass by skipping them.

Each test gets its own database (CREATE DATABASE, dropped afterwards), so tests stay
independent under pytest-xdist and never see each other's rows or notifications.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest

URL_ENV = "FLOWCTL_TEST_PG_URL"
_HOW = (
    f"no PostgreSQL server for the tests: set {URL_ENV} (e.g. "
    f'export {URL_ENV}=$(.ci/pg-cluster start "$(mktemp -d)"))'
)
_checked: dict[str, str | None] = {}  # base url -> why it cannot be used (None: usable)


def unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {why}", pytrace=False)
    pytest.skip(why)


def server_url() -> str:
    """The server's base URL (its maintenance database), or skip / fail as above."""
    url = os.environ.get(URL_ENV, "").strip()
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
                _checked[url] = f"the server at {URL_ENV} cannot be used: {e}".splitlines()[0]
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
