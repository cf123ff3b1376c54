"""Real daemons on one PostgreSQL database: they come up together on an empty database and
share the work. (A daemon frozen past its lease, its late writes fenced off, is
tests/crash/test_fencing.py, on both stores.)

Every read here is an independent observer: its own psycopg connection, no flowctl code.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from flowctl.store.postgres.schema import SCHEMA_VERSION
from tests.crash.test_fencing import intervals

from .conftest import Daemons, start_runs

pytestmark = pytest.mark.crash


def read(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def statuses(url: str) -> dict[str, str]:
    return dict(read(url, "SELECT run_id, status FROM runs"))  # type: ignore[arg-type]


def timeline(url: str, run_id: str, type_: str) -> list[dict[str, Any]]:
    rows = read(
        url,
        "SELECT data::text FROM timeline WHERE run_id = %s AND type = %s ORDER BY seq",
        (run_id, type_),
    )
    return [json.loads(data or "{}") for (data,) in rows]


def daemons_registered(url: str) -> int:
    """Registered daemons; 0 while the schema is not there yet."""
    rows = read(url, "SELECT to_regclass('daemons') IS NOT NULL")
    return int(read(url, "SELECT COUNT(*) FROM daemons")[0][0]) if rows[0][0] else 0


def test_two_daemons_starting_on_an_empty_database_at_once_both_come_up(
    pg_url: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    a = daemons.start(pg_url, "--concurrency", "2")
    b = daemons.start(pg_url, "--concurrency", "2")
    wait_until(lambda: daemons_registered(pg_url) == 2, timeout=30)
    assert a.poll() is None and b.poll() is None
    # Each migration was applied once, by whichever took the advisory lock first.
    versions = read(pg_url, "SELECT version FROM flowctl_schema ORDER BY version")
    assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    pids = {int(r[0]) for r in read(pg_url, "SELECT pid FROM daemons")}
    assert pids == {a.pid, b.pid}
    run_ids = start_runs(pg_url, "hop", [{"effects": str(effects), "steps": 2, "nap": 0.05}] * 20)
    wait_until(lambda: set(statuses(pg_url).values()) == {"completed"}, timeout=60)
    for run_id in run_ids:
        assert [s for _, _, _, s in sorted(intervals(effects)[run_id])] == ["s0", "s1"]
        assert len(timeline(pg_url, run_id, "completed")) == 1
    for p in (a, b):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    assert read(pg_url, "SELECT COUNT(*) FROM daemons") == [(0,)]
