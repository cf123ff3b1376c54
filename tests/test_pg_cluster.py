"""The PostgreSQL test server itself: fresh databases per test, and CI never skipping."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.pg import URL_ENV, fresh_database, server_url


def _tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        ).fetchall()
    return [r[0] for r in rows]


def test_each_fresh_database_is_empty_separate_and_dropped_afterwards(pg_url: str) -> None:
    import psycopg

    assert _tables(pg_url) == []
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE mine (x int)")
    with fresh_database() as other:
        assert other != pg_url
        assert _tables(other) == []
    assert _tables(pg_url) == ["mine"]
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(other).close()


def _outcome(env: dict[str, str]) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            f"{__file__}::test_each_fresh_database_is_empty_separate_and_dropped_afterwards",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    return proc.stdout.strip().splitlines()[-1]


def test_without_a_server_the_tests_skip_locally_but_fail_under_ci() -> None:
    server_url()  # only meaningful where the real server runs them: skip / fail like them
    env = {k: v for k, v in os.environ.items() if k not in (URL_ENV, "CI")}
    assert "1 skipped" in _outcome(env)
    assert "1 error" in _outcome({**env, "CI": "true"})  # the fixture fails
    assert "1 passed" in _outcome({**env, URL_ENV: os.environ[URL_ENV], "CI": "true"})
