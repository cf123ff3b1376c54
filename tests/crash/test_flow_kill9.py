"""Flow control under SIGKILL (issue 37, item 5): two daemons on one database (a SQLite
file, then a PostgreSQL database: the `db` fixture), one of them with two worker
processes (a restart picks one or two at random), SIGKILLed at random and restarted
while 24 runs over 3 users go through a per-user concurrency key of 1 and a named limit
of concurrency 1 shared by all of them.

From the bodies' own start/end lines (a body cut by a kill ends at the kill): no two
bodies under one key, nor under the limit, ever overlap, across both daemons and every
restart; every run completes exactly once; nothing is left held (no slot, no hold of the
limit is leaked by a crash: a dead daemon's are given back as its leases lapse).

The seed is printed (FLOWCTL_CRASH_SEED replays it).
"""

from __future__ import annotations

import collections
import itertools
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import wait_until

from flowctl.clock import SystemClock
from flowctl.store import open_store

from .conftest import Daemons, read, seeded_rng, start_runs, statuses, worker_pids

pytestmark = pytest.mark.crash

USERS = ("ann", "bob", "cy")
RUNS_PER_USER = 8
KILLS = 6
FLOWS = "tests/crash/flow_flows.py:per_user"


def intervals(effects: Path, kills: dict[int, float]) -> dict[str, list[tuple[float, float, str]]]:
    """(start, end, run) of every body, by what it held; an unfinished one ends at the kill
    of its process."""
    open_: dict[tuple[str, str, int], float] = {}
    out: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for line in effects.read_text().splitlines():
        at, kind, what, run_id, pid = line.split()
        key = (what, run_id, int(pid))
        if kind == "start":
            open_[key] = float(at)
        else:
            out[what].append((open_.pop(key), float(at), run_id))
    for (what, run_id, pid), start in open_.items():
        assert pid in kills, f"{run_id}'s body in live process {pid} never ended"
        out[what].append((start, kills[pid], run_id))
    return out


def overlaps(spans: list[tuple[float, float, str]]) -> list[tuple[str, str]]:
    spans = sorted(spans)
    return [(a[2], b[2]) for a, b in itertools.pairwise(spans) if b[0] < a[1]]


def test_keys_and_limits_hold_across_sigkilled_daemons(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    rng = seeded_rng()
    effects = tmp_path / "effects.log"
    with open_store(db) as store:
        store.set_limit("api", 1, None, SystemClock().now())
    inputs = [{"effects": str(effects), "user": u} for u in USERS for _ in range(RUNS_PER_USER)]
    run_ids = start_runs(db, "", inputs, target=FLOWS)

    def start(workers: str = "1") -> subprocess.Popen[bytes]:
        return daemons.start(
            db, "--workers", workers, "--concurrency", "4", "--lease", "1s", "--heartbeat", "0.2s"
        )

    live = [start("2"), start()]  # worker processes, and a daemon that runs its own
    kills: dict[int, float] = {}  # pid -> when it was killed (a daemon's workers with it)
    killed = 0
    while killed < KILLS and set(statuses(db).values()) != {"completed"}:
        lines = len(effects.read_text().splitlines()) if effects.exists() else 0
        wait_until(
            lambda n=lines: (
                (effects.exists() and len(effects.read_text().splitlines()) > n)
                or set(statuses(db).values()) == {"completed"}
            ),
            timeout=60,
        )
        time.sleep(rng.uniform(0.0, 0.1))
        victim = live.pop(rng.randrange(len(live)))
        workers = worker_pids(victim.pid)  # they stop at once with it
        os.kill(victim.pid, signal.SIGKILL)
        kills.update(dict.fromkeys([victim.pid, *workers], time.time()))
        killed += 1
        victim.wait()
        live.append(start(rng.choice(("1", "2"))))
    assert killed >= 3, "the work ran out before the kills; make it longer"

    wait_until(lambda: set(statuses(db).values()) == {"completed"}, timeout=180)
    for proc in live:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0

    assert statuses(db) == dict.fromkeys(run_ids, "completed")
    completed = collections.Counter(
        r for (r,) in read(db, "SELECT run_id FROM timeline WHERE type = 'completed'")
    )
    assert completed == dict.fromkeys(run_ids, 1)
    held = intervals(effects, kills)
    assert set(held) == {*(f"key:{u}" for u in USERS), "limit:api"}
    for what, spans in held.items():
        assert overlaps(spans) == [], f"{what} was held by two at once"
    assert read(db, "SELECT COUNT(*) FROM runs WHERE held_at IS NOT NULL")[0][0] == 0
    with open_store(db) as store:
        (api,) = store.limit_states(SystemClock().now())
        assert api.holders == [] and api.next_free is None
