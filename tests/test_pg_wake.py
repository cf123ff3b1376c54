"""Wake-ups on a PostgreSQL fleet: a daemon that meets another daemon's claim in flight
still claims every other due run at once, and hears of work it skipped by NOTIFY.

A claim locks a run only when it comes to it (FOR UPDATE SKIP LOCKED per candidate):
locking every candidate up front made a second daemon skip runs the first would never
claim in that transaction, and drop them from its wheel until the next change notice.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from helpers import wait_until

from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import NewRun
from flowctl.store.postgres.store import PostgresStore
from tests.conftest import ROOT

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
LEASE = timedelta(seconds=15)


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two daemons on two hosts hold them."""
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    yield a, b
    a.close()
    b.close()


def sleepers(store: PostgresStore, n: int, wake_at: datetime) -> list[str]:
    ids = [f"r{i}" for i in range(n)]
    for rid in ids:
        store.create_run(NewRun(rid, "wf", "wf.py:wf", "python", {}, run_at=wake_at), T0)
    return ids


def test_a_claim_in_flight_holds_only_the_run_it_claims(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    ids = sleepers(a, 3, T0)
    with a._write():  # daemon A's claim transaction, not yet committed
        (mine,), _ = a.claim_due("host-a/1/1/0001", T0, T0 + LEASE, 1)
        theirs, _ = b.claim_due("host-b/2/2/0002", T0, T0 + LEASE, 8)
        # B skips only the run A's claim holds; the others it claims now, not after A commits.
        assert sorted(c.run.run_id for c in theirs) == sorted(set(ids) - {mine.run.run_id})
    owners = {r.run_id: r.lease_owner for r in a.list_runs(limit=10)}
    assert owners[mine.run.run_id] == "host-a/1/1/0001"
    assert sorted(rid for rid, o in owners.items() if o == "host-b/2/2/0002") == sorted(
        c.run.run_id for c in theirs
    )


def test_a_daemon_that_lost_the_claim_race_wakes_the_next_run_when_due(
    two: tuple[PostgresStore, PostgresStore], fake_clock: FakeClock
) -> None:
    """Daemon B loses the race for the first sleeper (A holds it mid-claim): B drops it from
    its wheel, yet wakes the second sleeper on its deadline, and claims nothing twice."""
    a, b = two
    now = fake_clock.now()
    first = NewRun("first", "wf", "wf.py:wf", "python", {}, run_at=now)
    second = NewRun("second", "wf", "wf.py:wf", "python", {}, run_at=now + timedelta(seconds=30))
    a.create_runs([first, second], now)
    daemon_b = Daemon(b, fake_clock, DaemonConfig(concurrency=1, lease=15, heartbeat=1))
    ran: list[str] = []
    daemon_b._dispatch = lambda claim: ran.append(claim.run.run_id)  # type: ignore[method-assign]
    with a._write():
        (held,), _ = a.claim_due("host-a/1/1/0001", now, now + 4 * LEASE, 1)
        assert daemon_b.tick() == 0  # "first" is locked by A's claim: skipped, not waited for
    assert held.run.run_id == "first" and ran == []
    fake_clock.advance(timedelta(seconds=30))
    assert daemon_b.tick() == 1
    assert ran == ["second"]
    assert b.get_run("first").lease_owner == "host-a/1/1/0001"


def test_a_run_created_on_another_host_reaches_a_waiting_daemon_by_notify(
    two: tuple[PostgresStore, PostgresStore], fake_clock: FakeClock, pg_url: str
) -> None:
    """The daemon's only news of a run another process creates is the NOTIFY its commit
    sends (another process: this one's own stores tell each other in process)."""
    _, b = two
    daemon_b = Daemon(b, fake_clock, DaemonConfig(concurrency=1, lease=15, heartbeat=1))
    ran: list[str] = []
    daemon_b._dispatch = lambda claim: ran.append(claim.run.run_id)  # type: ignore[method-assign]
    assert daemon_b.tick() == 0
    seen = b.data_version()
    at = fake_clock.now().isoformat()
    code = (
        "import sys; from datetime import datetime; from flowctl.store import NewRun;"
        " from flowctl.store.postgres.store import PostgresStore;"
        " s = PostgresStore(sys.argv[1]); t = datetime.fromisoformat(sys.argv[2]);"
        " s.create_run(NewRun('elsewhere', 'wf', 'wf.py:wf', 'python', {}, run_at=t), t);"
        " s.close()"
    )
    subprocess.run([sys.executable, "-c", code, pg_url, at], cwd=ROOT, check=True)
    wait_until(lambda: b.data_version() != seen, timeout=10)  # the notice crosses a socket
    assert daemon_b.tick() == 1  # no clock advance: not the backstop re-read
    assert ran == ["elsewhere"]
    assert b.get_run("elsewhere").status is RunStatus.RUNNING
