"""A PostgreSQL outage is waited out, never a reason to exit: two real daemons (each its
own FLOWCTL_HOST) ride out `pg_ctl restart -m fast` twice, and a backend killed with
SIGKILL (after which the server resets every session), and every run completes exactly
once; a CLI command meeting a restart retries, and one meeting a server that stays down
fails in one line.

The cluster is this module's own (tests/crash/pg_outage.py): the shared test server is
never restarted. Every check reads the server as an independent observer.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from tests.crash.test_fencing import intervals
from tests.crash.test_pg_fleet import daemons_registered, read, statuses

from .conftest import ROOT, Daemons, start_runs
from .pg_outage import Cluster, backends

pytestmark = pytest.mark.crash

HOSTS = ("host-a", "host-b")
STEPS = 3
DAEMON_ARGS = ("--concurrency", "4", "--lease", "15s", "--heartbeat", "500ms")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture
def outage_db(cluster: Cluster) -> Iterator[str]:
    url = cluster.database()
    yield url
    cluster.drop(url)


def two_daemons(
    daemons: Daemons, monkeypatch: pytest.MonkeyPatch, url: str
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for host in HOSTS:
        monkeypatch.setenv("FLOWCTL_HOST", host)  # inherited by that daemon only
        procs.append(daemons.start(url, *DAEMON_ARGS))
    monkeypatch.delenv("FLOWCTL_HOST")
    wait_until(lambda: daemons_registered(url) == len(HOSTS), timeout=60)
    return procs


def observed(fn: collections.abc.Callable[[], int]) -> collections.abc.Callable[[], int]:
    """A read for wait_until that counts a server still coming back as 'not yet'."""

    def once() -> int:
        try:
            return fn()
        except Exception as e:  # psycopg's OperationalError while the server restarts
            if "psycopg" not in type(e).__module__:
                raise
            return 0

    return once


def completed(url: str) -> int:
    return int(read(url, "SELECT COUNT(*) FROM runs WHERE status = 'completed'")[0][0])


def check_exactly_once(url: str, effects: Path, run_ids: list[str]) -> None:
    """Every run completed once, on its first attempt; each step journaled done once and
    its body run once."""
    assert set(statuses(url).values()) == {"completed"}
    attempts = dict(read(url, "SELECT run_id, attempt FROM runs"))
    assert set(attempts.values()) == {1}
    journaled = collections.Counter(
        (run_id, name)
        for run_id, name in read(
            url, "SELECT run_id, name FROM journal WHERE kind = 'step' AND state = 'done'"
        )
    )
    assert journaled == {(r, f"s{i}"): 1 for r in run_ids for i in range(STEPS)}
    # Beats that failed while the server was away lost no lease: no run was taken over.
    taken = read(
        url,
        "SELECT run_id, type, data::text FROM timeline WHERE type IN ('lease lost', 'released')",
    )
    assert taken == []
    ends = collections.Counter(
        read(url, "SELECT run_id FROM timeline WHERE type = 'completed'")  # type: ignore[arg-type]
    )
    assert ends == {(r,): 1 for r in run_ids}
    bodies = intervals(effects)
    assert {r: sorted(s for _, _, _, s in bodies[r]) for r in run_ids} == {
        r: [f"s{i}" for i in range(STEPS)] for r in run_ids
    }


def said(daemons: Daemons, proc: subprocess.Popen[bytes]) -> tuple[list[str], list[str]]:
    """The daemon's lines saying the database went away, and that it is back."""
    lines = daemons.log(proc).splitlines()
    went = [line for line in lines if " is unavailable: " in line and "; retrying" in line]
    return went, [line for line in lines if " is back after " in line]


def check_rode_it_out(daemons: Daemons, procs: list[subprocess.Popen[bytes]], outages: int) -> None:
    """Both daemons still serve, said each outage in one line going and one coming back
    (never a traceback), and drain and exit 0 when asked."""
    assert [p.poll() for p in procs] == [None, None]
    for p in procs:
        # "Back" is said once calls have got through for a second (outage.SETTLE_S).
        wait_until(lambda p=p: 1 <= len(said(daemons, p)[1]) == len(said(daemons, p)[0]))
        went, back = said(daemons, p)
        log = daemons.log(p)
        assert "Traceback" not in log, log
        assert 1 <= len(went) == len(back) <= outages, log
        assert not any("WARNING" in line or "ERROR" in line for line in went + back)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=60) for p in procs] == [0, 0]


def test_two_daemons_ride_out_two_fast_restarts_and_every_run_completes_once(
    cluster: Cluster,
    outage_db: str,
    tmp_path: Path,
    daemons: Daemons,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    effects = tmp_path / "effects.log"
    inputs = [{"effects": str(effects), "steps": STEPS, "busy_ms": 60, "nap": 0.05}] * 120
    run_ids = start_runs(outage_db, "hop", inputs)
    procs = two_daemons(daemons, monkeypatch, outage_db)
    done = observed(lambda: completed(outage_db))
    for at_least in (10, 40):  # each restart while runs are in flight
        wait_until(lambda n=at_least: done() >= n, timeout=120)
        cluster.restart_fast()
    wait_until(lambda: done() == len(run_ids), timeout=180)
    check_exactly_once(outage_db, effects, run_ids)
    check_rode_it_out(daemons, procs, outages=2)


def test_a_backend_killed_resets_every_session_and_the_daemons_ride_it_out(
    outage_db: str, tmp_path: Path, daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.log"
    inputs = [{"effects": str(effects), "steps": STEPS, "busy_ms": 60, "nap": 0.05}] * 80
    run_ids = start_runs(outage_db, "hop", inputs)
    procs = two_daemons(daemons, monkeypatch, outage_db)
    done = observed(lambda: completed(outage_db))
    wait_until(lambda: done() >= 10, timeout=120)
    victim = backends(outage_db, "host-a")[0]
    os.kill(victim, signal.SIGKILL)  # the server then ends every session and recovers
    wait_until(lambda: done() == len(run_ids), timeout=180)
    check_exactly_once(outage_db, effects, run_ids)
    check_rode_it_out(daemons, procs, outages=1)


def flowctl(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", url, *args],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        check=False,
    )


def test_a_long_outage_a_command_fails_in_one_line_and_a_daemon_waits_it_out(
    cluster: Cluster, outage_db: str, daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_runs(outage_db, "hop", [])  # the schema is made: `status` has a database to read
    monkeypatch.setenv("FLOWCTL_HOST", "host-a")
    daemon = daemons.start(outage_db, *DAEMON_ARGS)
    monkeypatch.delenv("FLOWCTL_HOST")
    wait_until(lambda: daemons_registered(outage_db) == 1, timeout=60)
    cluster.stop_fast()
    try:
        began = time.monotonic()
        down = flowctl(outage_db, "status", "--json")
        waited = time.monotonic() - began
        assert down.returncode == 1
        assert down.stdout == ""
        assert down.stderr.count("\n") == 1 and "Traceback" not in down.stderr
        assert down.stderr.startswith("flowctl: cannot connect to PostgreSQL at 127.0.0.1:")
        assert "(retried for 5 s)" in down.stderr
        assert waited > 3  # it retried for seconds, not failed at the first refusal
        # Down when the command starts, back while it retries: it goes on as if nothing
        # had happened.
        back = threading.Timer(1.0, cluster.start)
        back.start()
        ok = flowctl(outage_db, "status", "--json")
        back.join()
        assert ok.returncode == 0, ok.stderr
        assert ok.stderr == ""
    finally:  # up again for the module's other tests, whatever happened here
        if observed(lambda: len(read(cluster.url, "SELECT 1")))() == 0:
            cluster.start()

    # The daemon waited the outage out (longer than one call's retries), and says how
    # long in its registration, which `status` shows.
    def shown() -> dict[str, Any]:
        """The daemon as `status` shows it; {} while it is not registered again yet (a
        daemon silent through a long outage registers anew once it is over)."""
        out = flowctl(outage_db, "status", "--json")
        assert out.returncode == 0, out.stderr
        daemons = json.loads(out.stdout)["daemons"]
        assert len(daemons) <= 1, daemons
        return daemons[0] if daemons else {}  # type: ignore[no-any-return]

    wait_until(lambda: "outage_waited_s" in shown(), timeout=60)
    d = shown()
    assert d["alive"] is True and d["pid"] == daemon.pid
    assert d["outage_waited_s"] > 0
    (line,) = [x for x in flowctl(outage_db, "status").stdout.splitlines() if "host-a" in x]
    assert f"; waited {d['outage_waited_s']}s for the database until " in line
    log = daemons.log(daemon)
    assert "Traceback" not in log and "WARNING" not in log and "ERROR" not in log, log
    assert log.count("still no database (") == 1, log
    assert daemon.poll() is None
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=60) == 0
