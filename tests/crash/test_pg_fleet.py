"""Real daemons on one PostgreSQL database: they come up together on an empty database,
share the work, and a daemon frozen past its lease has its late writes fenced off.

Every read here is an independent observer: its own psycopg connection, no flowctl code.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.ids import HOST
from flowctl.store import open_store
from flowctl.store.postgres.schema import SCHEMA_VERSION
from tests.crash.test_fencing import intervals

from .conftest import FLOWS, ROOT, Daemons

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


def start_runs(
    url: str, name: str, inputs: list[dict[str, Any]], *, target: str | None = None
) -> list[str]:
    """Queue runs of `name` in tests/crash/flows.py (or of `target`)."""
    store = open_store(url)
    try:
        return [
            ops.start(
                store, target or f"{FLOWS}:{name}", i, clock=SystemClock(), cwd=str(ROOT)
            ).run.run_id
            for i in inputs
        ]
    finally:
        store.close()


def daemons_registered(url: str) -> int:
    """Registered daemons; 0 while the schema is not there yet."""
    rows = read(url, "SELECT to_regclass('daemons') IS NOT NULL")
    return int(read(url, "SELECT COUNT(*) FROM daemons")[0][0]) if rows[0][0] else 0


def in_transaction(url: str, pid: int) -> bool:
    """Whether the daemon with this pid has a statement or transaction open on the server."""
    name = f"flowctl {HOST} {pid}"[:63]
    rows = read(
        url,
        "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'",
        (name,),
    )
    return bool(rows[0][0])


def test_two_daemons_starting_on_an_empty_database_at_once_both_come_up(
    pg_url: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    a = daemons.start(pg_url, "--concurrency", "2")  # type: ignore[arg-type]
    b = daemons.start(pg_url, "--concurrency", "2")  # type: ignore[arg-type]
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


def test_a_daemon_frozen_past_its_lease_has_its_late_writes_rejected(
    pg_url: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    fast_lease = ("--lease", "1s", "--heartbeat", "200ms", "--concurrency", "1")
    frozen = daemons.start(pg_url, *fast_lease)  # type: ignore[arg-type]
    (run_id,) = start_runs(pg_url, "probe", [{"effects": str(effects), "busy_ms": 1500}])
    wait_until(lambda: effects.exists() and "start" in effects.read_text(), timeout=30)
    # Freeze it mid-step, but never inside a transaction (its row locks would hold the run).
    while True:
        os.kill(frozen.pid, signal.SIGSTOP)
        if not in_transaction(pg_url, frozen.pid):
            break
        os.kill(frozen.pid, signal.SIGCONT)
        time.sleep(0.01)
    ((first_fence,),) = read(pg_url, "SELECT fence FROM runs WHERE run_id = %s", (run_id,))

    other = daemons.start(pg_url, *fast_lease)  # type: ignore[arg-type]
    wait_until(lambda: statuses(pg_url)[run_id] == "completed", timeout=30)
    os.kill(frozen.pid, signal.SIGCONT)  # it wakes believing it still holds the run
    wait_until(lambda: timeline(pg_url, run_id, "lease lost"), timeout=15)

    (lost,) = timeline(pg_url, run_id, "lease lost")
    assert lost["owner"].split("/")[1] == str(frozen.pid)
    assert (lost["fence"], lost["current_fence"]) == (first_fence, first_fence + 1)
    (reclaimed,) = timeline(pg_url, run_id, "reclaimed")  # by lease expiry: the pid lives
    assert reclaimed["by"].split("/")[1] == str(other.pid)

    spans = {pid: (start, end) for start, end, pid, _ in intervals(effects)[run_id]}
    assert set(spans) == {frozen.pid, other.pid}
    ((value, recorded_at),) = read(
        pg_url,
        "SELECT value::text, recorded_at FROM journal WHERE run_id = %s AND kind = 'step'",
        (run_id,),
    )
    assert spans[frozen.pid][1] * 1e6 > recorded_at  # it finished after the other journaled
    assert int(value) == other.pid  # ... and its result never landed
    ((status, result, fence),) = read(
        pg_url, "SELECT status, result::text, fence FROM runs WHERE run_id = %s", (run_id,)
    )
    assert (status, int(result), fence) == ("completed", other.pid, first_fence + 1)
    assert len(timeline(pg_url, run_id, "completed")) == 1
    assert "lease lost" in daemons.log(frozen)
    for p in (frozen, other):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
