"""A fleet of real daemons on one PostgreSQL database, each on its own FLOWCTL_HOST: a
schedule fires exactly once per slot however many daemons serve it (the revision
compare-and-set), and `flowctl status` lists every live daemon with host, pid, since and
runs held.

Every check reads the server as an independent observer (its own psycopg connection).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from flowctl.model import from_us, iso
from flowctl.schedule.calendar import ScheduleSpec
from tests.crash.test_pg_fleet import daemons_registered, read, start_runs, statuses

from .conftest import ROOT, Daemons

pytestmark = pytest.mark.crash

PING = """name: ping
steps:
  - id: pong
    run: [echo, pong]
"""


def flowctl(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", url, *args],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        check=False,
    )


def fleet(
    daemons: Daemons, monkeypatch: pytest.MonkeyPatch, url: str, hosts: list[str], *args: str
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for host in hosts:
        monkeypatch.setenv("FLOWCTL_HOST", host)  # inherited by that daemon only
        procs.append(daemons.start(url, *args))
    monkeypatch.delenv("FLOWCTL_HOST")
    wait_until(lambda: daemons_registered(url) == len(hosts), timeout=60)
    return procs


def test_a_schedule_fires_once_per_slot_however_many_daemons_serve_it(
    pg_url: str, tmp_path: Path, daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = fleet(daemons, monkeypatch, pg_url, ["host-a", "host-b", "host-c"])
    ping = tmp_path / "ping.yaml"
    ping.write_text(PING)
    # Added once all three serve: every fire below is raced by three schedulers.
    added = flowctl(
        pg_url, "schedule", "add", "beat", "--every", "1s", "--missed", "all",
        "--overlap", "allow", str(ping),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    def fires() -> list[int]:
        rows = read(pg_url, "SELECT scheduled_at FROM runs WHERE schedule = 'beat' ORDER BY 1")
        return [r[0] for r in rows]

    wait_until(lambda: len(fires()) >= 5, timeout=60)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        assert p.wait(timeout=60) == 0
    spec = ScheduleSpec.from_json(read(pg_url, "SELECT spec FROM schedules")[0][0])
    assert spec.anchor is not None
    first = round(spec.anchor.timestamp() * 1_000_000) + 1_000_000
    got = fires()
    assert got == [first + k * 1_000_000 for k in range(len(got))]  # each slot once, none lost
    history = read(
        pg_url,
        "SELECT fire_at, COUNT(*) FROM schedule_history WHERE schedule = 'beat'"
        " AND action = 'fired' GROUP BY fire_at ORDER BY fire_at",
    )
    assert history == [(at, 1) for at in got]
    revision = read(pg_url, "SELECT revision FROM schedules WHERE name = 'beat'")[0][0]
    assert revision >= 1 + len(got)  # one compare-and-set won per fire
    assert set(statuses(pg_url).values()) <= {"completed", "queued", "running"}


def test_status_lists_every_live_daemon_with_host_pid_since_and_runs_held(
    pg_url: str, tmp_path: Path, daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = fleet(daemons, monkeypatch, pg_url, ["host-a", "host-b"], "--concurrency", "1")
    effects = tmp_path / "effects.log"
    (run_id,) = start_runs(pg_url, "hold", [{"effects": str(effects), "seconds": 60}])
    wait_until(lambda: statuses(pg_url)[run_id] == "running", timeout=30)
    holder = read(pg_url, "SELECT lease_owner FROM runs WHERE run_id = %s", (run_id,))[0][0]
    registered = {
        r[0]: (r[1], r[2], r[3])
        for r in read(pg_url, "SELECT owner, host, pid, started_at FROM daemons")
    }
    out = flowctl(pg_url, "status", "--json")
    assert out.returncode == 0, out.stderr
    listed = {d["owner"]: d for d in json.loads(out.stdout)["daemons"]}
    assert set(listed) == set(registered)
    by_host = {d["host"]: d for d in listed.values()}
    assert set(by_host) == {"host-a", "host-b"}
    assert {by_host["host-a"]["pid"], by_host["host-b"]["pid"]} == {a.pid, b.pid}
    for owner, d in listed.items():
        host, pid, started_us = registered[owner]
        assert (d["host"], d["pid"], d["alive"]) == (host, pid, True)
        assert d["started_at"] == iso(from_us(started_us))
        assert d["runs_held"] == (1 if owner == holder else 0)
    text = flowctl(pg_url, "status")
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if line.startswith("daemon")]
    assert len(lines) == 2
    for owner, d in listed.items():
        (line,) = [x for x in lines if f"pid {d['pid']} on {d['host']} since " in x]
        assert line.endswith(f"holding {1 if owner == holder else 0} run(s)")
