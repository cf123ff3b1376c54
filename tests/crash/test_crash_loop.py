"""The fault campaign's crash loop as a test: 300 runs, two daemons on one file, 30 SIGKILLs
at random moments, each killed daemon restarted at once; each daemon alone (`--workers 1`)
and supervising two worker processes (`--workers 2`, the same runs in flight in all),
which stop at once and hand their runs back when their daemon is SIGKILLed. Every run completes exactly once,
every step's result is journaled exactly once, a step body re-runs only where a kill cut it
mid-flight, no healthy run is poisoned, and the file passes integrity_check.

On a SQLite file and on a PostgreSQL database (the `db` fixture); on PostgreSQL with half
the kills, to keep CI's time (test_pg_crash_loop.py adds three hosts).

The seed is printed (FLOWCTL_CRASH_SEED replays it).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import wait_until

from tests.dbs import is_url

from .conftest import Daemons, intact, read, registered, seeded_rng, start_runs, statuses

pytestmark = pytest.mark.crash

RUNS = 300
STEPS = 5  # s0, sleep, s1, ... s4: call indices 0, 2, 4, 6, 8
KILLS = 30
CONCURRENCY = 4


def journal_steps(db: Path | str) -> int:
    return int(read(db, "SELECT COUNT(*) FROM journal WHERE kind = 'step'")[0][0])


def all_completed(db: Path | str) -> bool:
    return set(statuses(db).values()) == {"completed"}


# The whole test's budget, and the final wait's. On PostgreSQL with `--workers 1` the runs
# left after the last kill took 90 to 118 s on the 2-core development machine (the same
# seed on ac37523 and on the tree after it): pytest's 120 s default timed it out once.
BUDGET = 300
SETTLE = 240


@pytest.mark.timeout(BUDGET)
@pytest.mark.parametrize("workers", [1, 2])
def test_two_daemons_under_thirty_sigkills_complete_three_hundred_runs_exactly_once(
    db: str, tmp_path: Path, daemons: Daemons, workers: int
) -> None:
    rng = seeded_rng()
    effects = tmp_path / "effects.log"
    # PostgreSQL: half the kills (CI's time) but all the runs: under load its daemons got
    # through up to 93% of half the runs before the last of half the kills.
    runs, kills_wanted = RUNS, KILLS // 2 if is_url(db) else KILLS
    run_ids = start_runs(
        db,
        "",
        [{"effects": str(effects), "n": STEPS, "busy_ms": 10, "nap": 0.05}] * runs,
        target="tests/crash/core_flows.py:steps",
    )

    def start() -> subprocess.Popen[bytes]:
        # Each worker executes its own --concurrency: the same runs in flight either way,
        # the pace the kills below are made for.
        each = str(CONCURRENCY // workers)
        return daemons.start(db, "--concurrency", each, "--lease", "3s", "--workers", str(workers))

    pair = [start(), start()]
    kills = 0
    killed: list[int] = []
    while kills < kills_wanted and not all_completed(db):
        i = rng.randrange(2)
        before = journal_steps(db)
        # Kill it only once the file shows progress, at a random moment of its work.
        wait_until(lambda b=before: journal_steps(db) > b or all_completed(db), timeout=30)
        time.sleep(rng.uniform(0.0, 0.15))
        victim = pair[i]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        killed.append(victim.pid)
        kills += 1
        pair[i] = start()
    print(f"{journal_steps(db)} of {runs * STEPS} steps journaled at the last kill")
    assert kills == kills_wanted, f"the work ran out after {kills} kills; make it longer"

    wait_until(lambda: all_completed(db), timeout=SETTLE)
    wait_until(lambda: {p.pid for p in pair} <= registered(db), timeout=60)
    for proc in pair:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in pair] == [0, 0]

    # Every run completed, exactly once; none was poisoned.
    assert statuses(db) == dict.fromkeys(run_ids, "completed")
    completions = collections.Counter(
        r for (r,) in read(db, "SELECT run_id FROM timeline WHERE type = 'completed'")
    )
    assert completions == dict.fromkeys(run_ids, 1)

    # Every step's result journaled exactly once, at its call index, as done.
    steps = collections.defaultdict(list)
    for run_id, index, name, state in read(
        db,
        "SELECT run_id, call_index, name, state FROM journal WHERE kind = 'step'"
        " ORDER BY run_id, call_index",
    ):
        assert state == "done"
        steps[run_id].append((index, name))
    expected = [(2 * i, f"s{i}") for i in range(STEPS)]
    assert dict(steps) == dict.fromkeys(run_ids, expected)

    # A body ran again only where its run was taken from a worker mid-flight (a reclaim:
    # nearly always from a killed daemon; a lease lapsing under load counts too).
    killed_pids = {str(pid) for pid in killed}

    def owner_pid(data: str | None) -> str:
        owner = str(json.loads(data or "{}").get("from") or "")
        return owner.split("/")[1] if owner.count("/") >= 2 else ""

    reclaims = sum(
        owner_pid(data) in killed_pids
        for (data,) in read(db, "SELECT data FROM timeline WHERE type = 'reclaimed'")
    )
    all_reclaims = read(db, "SELECT COUNT(*) FROM timeline WHERE type = 'reclaimed'")[0][0]
    lines = collections.Counter(
        tuple(line.split()[:2]) for line in effects.read_text().splitlines()
    )
    assert set(lines) == {(r, name) for r in run_ids for _, name in expected}
    reran = sum(n - 1 for n in lines.values())
    assert reran <= all_reclaims
    assert reclaims <= kills * CONCURRENCY  # no more than the killed daemons could hold
    print(f"{kills} kills; {reran} step bodies re-ran; {reclaims} runs reclaimed from them")

    assert intact(db)
