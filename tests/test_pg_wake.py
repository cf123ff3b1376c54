"""Wake-ups on a PostgreSQL fleet: a daemon that meets another daemon's claim in flight
still claims every other due run at once, wakes its next sleeper on time, and hears of
runs other processes create by NOTIFY.

A claim locks a run only when it comes to it (FOR UPDATE SKIP LOCKED per candidate):
locking every candidate up front made a second daemon skip runs the first would never
claim in that transaction, and drop them from its wheel until the next change notice.

A claim "in flight" is held open by an observer that locks the timeline table: the claim
has locked and updated its run and waits to write its `claimed` event.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.store import NewRun
from flowctl.store.postgres.store import PostgresStore
from tests.conftest import ROOT

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
LEASE = timedelta(seconds=15)
OWNER_A = "host-a/1/1/0001"
FLOW = """
from flowctl import workflow

@workflow
def nap(ctx) -> str:
    return ctx.run_id
"""


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two daemons on two hosts hold them."""
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    yield a, b
    a.close()
    b.close()


def lock_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
        assert row is not None
        return int(row[0])


@contextmanager
def in_flight(url: str, claim: Callable[[], Any]) -> Iterator[list[Any]]:
    """Run `claim` in a thread and hold it mid-transaction (after its row locks, before its
    timeline write) for the block; it commits when the block ends."""
    out: list[Any] = []
    with psycopg.connect(url) as observer:
        observer.execute("LOCK TABLE timeline IN SHARE MODE")
        t = threading.Thread(target=lambda: out.append(claim()))
        t.start()
        try:
            wait_until(lambda: lock_waiters(url) == 1, timeout=30)
            yield out
        finally:
            observer.rollback()
            t.join(30)


def test_a_claim_in_flight_holds_only_the_run_it_claims(
    two: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    a, b = two
    ids = [f"r{i}" for i in range(3)]
    for rid in ids:
        a.create_run(NewRun(rid, "wf", "wf.py:wf", "python", {}), T0)
    with in_flight(pg_url, lambda: a.claim_due(OWNER_A, T0, T0 + LEASE, 1)) as got:
        # B skips only the run A's claim holds, and claims the others now, not after A commits.
        b_got: list[Any] = []  # B's own list: A's and B's claims finish in either order
        theirs = threading.Thread(
            target=lambda: b_got.append(b.claim_due("host-b/2/2/0002", T0, T0 + LEASE, 8))
        )
        theirs.start()
        wait_until(lambda: lock_waiters(pg_url) == 2, timeout=30)  # B waits to write events
    theirs.join(30)
    assert len(got) == 1 and len(b_got) == 1
    (mine,), _ = got[0]
    owners = {r.run_id: r.lease_owner for r in a.list_runs(limit=10)}
    assert owners == {rid: OWNER_A if rid == mine.run.run_id else "host-b/2/2/0002" for rid in ids}
    assert sorted(c.run.run_id for c in b_got[0][0]) == sorted(set(ids) - {mine.run.run_id})


def test_a_daemon_that_lost_the_claim_race_wakes_its_next_sleeper_when_due(
    two: tuple[PostgresStore, PostgresStore],
    pg_url: str,
    fake_clock: FakeClock,
    flows_dir: Path,
) -> None:
    """Daemon B loses the race for the first run (A holds it mid-claim): B skips it without
    waiting, yet wakes the sleeper due 30 s later on its deadline, and claims nothing twice."""
    a, b = two
    (flows_dir / "flows.py").write_text(FLOW)
    target = f"{flows_dir / 'flows.py'}:nap"
    now = fake_clock.now()
    first = ops.start(a, target, {}, clock=fake_clock).run.run_id
    second = ops.start(a, target, {}, clock=fake_clock, run_at=now + timedelta(seconds=30))
    daemon_b = Daemon(b, fake_clock, DaemonConfig(concurrency=1, lease=15, heartbeat=1))
    with in_flight(pg_url, lambda: a.claim_due(OWNER_A, now, now + 4 * LEASE, 1)):
        assert daemon_b.tick() == 0  # the first run is A's: skipped, not waited for
    fake_clock.advance(timedelta(seconds=30))
    assert daemon_b.tick() == 1
    woke = [e for e in b.timeline(second.run.run_id) if e.type in ("woke", "claimed")]
    due = now + timedelta(seconds=30)
    assert [(e.type, e.at) for e in woke] == [("woke", due), ("claimed", due)]
    assert woke[1].data["by"] == daemon_b.owner
    assert b.get_run(second.run.run_id).status.value == "completed"
    assert b.get_run(first).lease_owner == OWNER_A  # never claimed by B
    assert [e.data["by"] for e in b.timeline(first) if e.type == "claimed"] == [OWNER_A]


def test_a_run_created_on_another_host_reaches_a_waiting_daemon_by_notify(
    two: tuple[PostgresStore, PostgresStore],
    fake_clock: FakeClock,
    pg_url: str,
    flows_dir: Path,
) -> None:
    """The daemon's only news of a run another process creates is the NOTIFY its commit
    sends (this process's own stores tell each other in process)."""
    _, b = two
    (flows_dir / "flows.py").write_text(FLOW)
    daemon_b = Daemon(b, fake_clock, DaemonConfig(concurrency=1, lease=15, heartbeat=1))
    assert daemon_b.tick() == 0
    seen = b.data_version()
    code = (
        "import sys; from datetime import datetime; from flowctl import ops;"
        " from flowctl.clock import FakeClock; from flowctl.store import open_store;"
        " s = open_store(sys.argv[1]);"
        " r = ops.start(s, sys.argv[3], {}, clock=FakeClock(datetime.fromisoformat(sys.argv[2])));"
        " print(r.run.run_id); s.close()"
    )
    made = subprocess.run(
        [sys.executable, "-c", code, pg_url, fake_clock.now().isoformat(), f"{flows_dir}/flows.py:nap"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    run_id = made.stdout.strip()
    wait_until(lambda: b.data_version() != seen, timeout=10)  # the notice crosses a socket
    assert daemon_b.tick() == 1  # the clock stood still: not the backstop re-read
    (claimed,) = [e for e in b.timeline(run_id) if e.type == "claimed"]
    assert claimed.data["by"] == daemon_b.owner
