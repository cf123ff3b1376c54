"""The crash loop on PostgreSQL: three daemons, each on its own FLOWCTL_HOST, SIGKILLed at
random and restarted while they run 200 workflows. Every run completes exactly once, every
step's result is journaled exactly once. A daemon killed on one "host" is known to the
others only by its lease lapsing; its own host's next daemon sees its pid gone at once.

The seed is printed (FLOWCTL_CRASH_SEED replays it).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import wait_until

from tests.crash.test_pg_fleet import read, start_runs, statuses

from .conftest import Daemons, seeded_rng

pytestmark = pytest.mark.crash

RUNS = 200
STEPS = 4  # s0, sleep, s1, ...: call indices 0, 2, 4, 6
KILLS = 15
HOSTS = ("host-a", "host-b", "host-c")


def journal_steps(url: str) -> int:
    return int(read(url, "SELECT COUNT(*) FROM journal WHERE kind = 'step'")[0][0])


def all_completed(url: str) -> bool:
    return set(statuses(url).values()) == {"completed"}


# Its own waits allow 180 s for the runs left after the last kill, but pytest's 120 s
# default cut the whole test short there once on the 2-core development machine.
@pytest.mark.timeout(420)
def test_three_hosts_under_sigkills_complete_every_run_exactly_once(
    pg_url: str, tmp_path: Path, daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = seeded_rng()
    effects = tmp_path / "effects.log"
    flows = "tests/crash/core_flows.py:steps"
    run_ids = start_runs(
        pg_url,
        "",
        [{"effects": str(effects), "n": STEPS, "busy_ms": 10, "nap": 0.05}] * RUNS,
        target=flows,
    )

    def start(host: str) -> subprocess.Popen[bytes]:
        monkeypatch.setenv("FLOWCTL_HOST", host)  # inherited by the daemon process
        return daemons.start(pg_url, "--concurrency", "4", "--lease", "2s")

    fleet = [start(h) for h in HOSTS]
    kills = 0
    while kills < KILLS and not all_completed(pg_url):
        i = rng.randrange(len(HOSTS))
        before = journal_steps(pg_url)
        wait_until(lambda b=before: journal_steps(pg_url) > b or all_completed(pg_url), timeout=60)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(fleet[i].pid, signal.SIGKILL)
        fleet[i].wait()
        kills += 1
        fleet[i] = start(HOSTS[i])
    assert kills == KILLS, f"the work ran out after {kills} kills; make it longer"

    wait_until(lambda: all_completed(pg_url), timeout=180)
    # Each live daemon registered under its own host. A daemon registers after it installs
    # its signal handlers, so once its pid is listed SIGTERM drains it (before, a daemon
    # restarted just now could be stopped mid-import and exit -15).
    live = {(h, p.pid) for h, p in zip(HOSTS, fleet, strict=True)}
    wait_until(lambda: live <= set(read(pg_url, "SELECT host, pid FROM daemons")), timeout=60)
    for proc in fleet:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in fleet] == [0, 0, 0]

    assert statuses(pg_url) == dict.fromkeys(run_ids, "completed")
    completions = collections.Counter(
        r for (r,) in read(pg_url, "SELECT run_id FROM timeline WHERE type = 'completed'")
    )
    assert completions == dict.fromkeys(run_ids, 1)
    steps = collections.defaultdict(list)
    for run_id, index, name, state in read(
        pg_url,
        "SELECT run_id, call_index, name, state FROM journal WHERE kind = 'step'"
        " ORDER BY run_id, call_index",
    ):
        assert state == "done"
        steps[run_id].append((index, name))
    expected = [(2 * i, f"s{i}") for i in range(STEPS)]
    assert dict(steps) == {run_id: expected for run_id in run_ids}
    lines = collections.Counter(
        tuple(line.split()[:2]) for line in effects.read_text().splitlines()
    )
    assert set(lines) == {(r, f"s{i}") for r in run_ids for i in range(STEPS)}
    reclaims = read(pg_url, "SELECT COUNT(*) FROM timeline WHERE type = 'reclaimed'")[0][0]
    assert sum(n - 1 for n in lines.values()) <= reclaims  # a body re-ran only if reclaimed
