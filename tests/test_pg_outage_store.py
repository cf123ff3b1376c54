"""What the PostgreSQL store calls an outage, and how one call rides it out: sessions the
server ends (pg_terminate_backend, a real AdminShutdown, on the shared test server's
database of this test alone: the server itself is never restarted here) are an outage;
a write retries through it and happens once; a login refused is not one. The retry's
budget and backoff, and the one line going and one back, on an injected clock.

Whole restarts under real daemons: tests/crash/test_pg_outage.py.
"""

from __future__ import annotations

import logging
import socket
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from flowctl.daemon.lifecycle import OUTAGE_CAP_S, outage_wait
from flowctl.errors import DatabaseUnavailable
from flowctl.store.postgres import outage
from flowctl.store.postgres.connect import ServerDownError, connect
from flowctl.store.postgres.outage import (
    OUTAGE_RETRY_S,
    SETTLE_S,
    Availability,
    is_outage,
    retry_wait,
    ride_out,
)
from flowctl.store.postgres.store import PostgresStore

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def end_sessions(url: str) -> int:
    """End every other session on this test's database, as a fast shutdown does."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def driver_error(fn: Any) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as raised:
        fn()
    return raised.value


def test_a_session_the_server_ended_is_an_outage_and_a_login_refused_is_not(
    pg_url: str,
) -> None:
    conn = psycopg.connect(pg_url, autocommit=True)
    end_sessions(pg_url)
    ended = driver_error(lambda: conn.execute("SELECT 1"))
    assert is_outage(ended), repr(ended)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = driver_error(lambda: psycopg.connect(f"postgresql://u:p@127.0.0.1:{port}/x"))
    assert is_outage(refused), repr(refused)
    parts = urlsplit(pg_url)
    netloc = f"nobody_here:wrong@{parts.hostname}:{parts.port}"
    bad_login = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    refused_login = driver_error(lambda: psycopg.connect(bad_login))
    assert not is_outage(refused_login), repr(refused_login)
    with pytest.raises(ServerDownError) as down:
        connect(f"postgresql://u:p@127.0.0.1:{port}/x")
    assert isinstance(down.value, DatabaseUnavailable)
    assert str(down.value).startswith(f"cannot connect to PostgreSQL at 127.0.0.1:{port}/x: ")


def test_a_write_rides_out_sessions_the_server_ended_and_happens_once(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=outage.__name__)
    with PostgresStore(pg_url) as store:
        store.register_daemon("host-b/1/1/0001", "host-b", 1, None, T0, {"lease": 15})
        assert end_sessions(pg_url) >= 1  # every pooled connection (and the LISTEN one)
        store.register_daemon("host-c/2/2/0002", "host-c", 2, None, T0, {"lease": 15})
        later = T0 + timedelta(seconds=1)
        store.heartbeat("host-b/1/1/0001", [], later, later)
        assert sorted((d.owner, d.seen_at) for d in store.daemons()) == [
            ("host-b/1/1/0001", later),
            ("host-c/2/2/0002", T0),
        ]
    went = [r.getMessage() for r in caplog.records if "is unavailable" in r.getMessage()]
    assert len(went) == 1, went  # one line, however many calls met it
    # What the server said, or (a pipelined transaction reads it after its socket closed)
    # what libpq saw of it.
    assert any(
        why in went[0]
        for why in ("terminating connection due to administrator command", "server closed")
    ), went[0]


class Ticks:
    """A monotonic clock that only moves when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_one_call_retries_for_the_budget_with_capped_backoff_then_fails_in_one_line() -> None:
    ticks = Ticks()
    calls = 0

    def down() -> None:
        nonlocal calls
        calls += 1
        raise DatabaseUnavailable("PostgreSQL at h:5432/d is unavailable: x")

    with pytest.raises(DatabaseUnavailable) as raised:
        ride_out(down, "w", monotonic=lambda: ticks.now, sleep=ticks.sleep)
    assert str(raised.value) == (
        f"PostgreSQL at h:5432/d is unavailable: x (retried for {OUTAGE_RETRY_S:g} s)"
    )
    assert ticks.slept == [retry_wait(i + 1) for i in range(len(ticks.slept))]
    assert max(ticks.slept) == outage.CAP_WAIT_S and ticks.now <= OUTAGE_RETRY_S
    assert calls == len(ticks.slept) + 1
    unsure = 0

    def in_doubt() -> None:
        nonlocal unsure
        unsure += 1
        raise DatabaseUnavailable("lost during COMMIT", unsure=True)

    with pytest.raises(DatabaseUnavailable, match="lost during COMMIT"):
        ride_out(in_doubt, "w", monotonic=lambda: ticks.now, sleep=ticks.sleep)
    assert unsure == 1  # a write that may have been made is never run again blindly
    flaky = iter([DatabaseUnavailable("x"), DatabaseUnavailable("x"), None])

    def back_soon() -> str:
        error = next(flaky)
        if error is not None:
            raise error
        return "written"

    assert ride_out(back_soon, "w", monotonic=lambda: ticks.now, sleep=ticks.sleep) == "written"


def test_an_outage_is_said_once_going_and_once_back_after_calls_get_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=outage.__name__)
    ticks = Ticks()
    seen = Availability("h:5432/d", monotonic=lambda: ticks.now)
    assert seen.lost(DatabaseUnavailable("PostgreSQL at h:5432/d is unavailable: gone"))
    ticks.sleep(0.01)
    seen.answered()  # one call got through while the server was still ending sessions
    assert not seen.lost(DatabaseUnavailable("PostgreSQL at h:5432/d is unavailable: gone"))
    ticks.sleep(2.0)
    seen.answered()  # back: calls get through from here on
    ticks.sleep(SETTLE_S / 2)
    seen.answered()
    ticks.sleep(SETTLE_S / 2)
    seen.answered()
    seen.answered()
    assert [r.getMessage() for r in caplog.records] == [
        "PostgreSQL at h:5432/d is unavailable: gone; retrying",
        "PostgreSQL at h:5432/d is back after 2.0s",
    ]


def test_the_daemon_waits_longer_outages_out_with_capped_doubling() -> None:
    waits = [outage_wait(n) for n in range(1, 12)]
    assert waits == sorted(waits) and waits[0] < 1 and waits[-1] == OUTAGE_CAP_S
    assert all(b in (a * 2, OUTAGE_CAP_S) for a, b in pairwise(waits))
