"""`flowctl daemon --workers 2`: worker processes SIGKILLed at random lose nothing.

A real daemon with two worker processes executes 300 runs of five steps with durable
sleeps between them; a random live worker (its pid read from /proc) is SIGKILLed 15
times, each time once the file shows progress and at a random moment after. The daemon process
itself lives on and starts a worker in each dead one's place. Every run completes
exactly once, every step's result is journaled exactly once, a step body re-runs only
where its run was taken from a dead worker, and the file passes integrity_check. A run
whose own step kills its worker process is dead-lettered as poison while the daemon and
its healthy neighbours carry on. The daemon process SIGKILLed: its workers stop at once
and hand their runs back, and a new daemon completes them.

Both on a SQLite file and on a PostgreSQL database (the `db` fixture); the first test on
PostgreSQL with half the runs and kills, to keep CI's time.

The seed is printed (FLOWCTL_CRASH_SEED replays it).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import wait_until

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.store import open_store
from tests.dbs import is_url

from .conftest import (
    ROOT,
    Daemons,
    intact,
    read,
    seeded_rng,
    start_runs,
    statuses,
    timeline,
    worker_pids,
)

pytestmark = pytest.mark.crash

RUNS = 300
STEPS = 5  # s0, sleep, s1, ... s4: call indices 0, 2, 4, 6, 8
KILLS = 15
FLOWS = "tests/crash/core_flows.py"


def journal_steps(db: Path | str) -> int:
    return int(read(db, "SELECT COUNT(*) FROM journal WHERE kind = 'step'")[0][0])


def all_completed(db: Path | str) -> bool:
    return set(statuses(db).values()) == {"completed"}


def test_sigkilled_worker_processes_lose_no_run_and_journal_no_step_twice(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    rng = seeded_rng()
    effects = tmp_path / "effects.log"
    runs, kills_wanted = (RUNS // 2, KILLS // 2) if is_url(db) else (RUNS, KILLS)
    run_ids = start_runs(
        db,
        "",
        [{"effects": str(effects), "n": STEPS, "busy_ms": 10, "nap": 0.05}] * runs,
        target=f"{FLOWS}:steps",
    )
    # Two runs at once per worker: four in all, the pace the kills below are made for.
    daemon = daemons.start(db, "--workers", "2", "--concurrency", "2", "--lease", "3s")
    wait_until(lambda: len(worker_pids(daemon.pid)) == 2, timeout=30)
    killed: list[int] = []
    while len(killed) < kills_wanted and not all_completed(db):
        before = journal_steps(db)
        wait_until(lambda b=before: journal_steps(db) > b or all_completed(db), timeout=30)
        time.sleep(rng.uniform(0.0, 0.15))
        live = wait_until(lambda: [p for p in worker_pids(daemon.pid) if p not in killed], 30)
        victim = rng.choice(live)
        os.kill(victim, signal.SIGKILL)
        killed.append(victim)
        # The daemon replaces it meanwhile. The next kill does not wait for that (a worker
        # takes a while to start, more so under load, and the work would run out): it may
        # hit the other worker, or the new one as it starts, or leave none alive at once.
    print(f"{journal_steps(db)} of {runs * STEPS} steps journaled at the last kill")
    assert len(killed) == kills_wanted, (
        f"the work ran out after {len(killed)} kills; make it longer"
    )

    wait_until(lambda: all_completed(db), timeout=120)
    assert daemon.poll() is None, "the daemon process itself must outlive its workers"
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0

    # Every run completed, exactly once.
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

    # The runs a dead worker held were reclaimed (by the other worker, which lapses a dead
    # daemon's leases at once); a step body ran again only in a run taken over that way.
    reclaims = read(db, "SELECT COUNT(*) FROM timeline WHERE type = 'reclaimed'")[0][0]
    assert reclaims >= 1
    lines = collections.Counter(
        tuple(line.split()[:2]) for line in effects.read_text().splitlines()
    )
    assert set(lines) == {(r, name) for r in run_ids for _, name in expected}
    reran = sum(n - 1 for n in lines.values())
    assert reran <= reclaims
    # Step bodies ran in the worker processes, never in the daemon's.
    ran_in = {int(line.split()[2]) for line in effects.read_text().splitlines()}
    assert daemon.pid not in ran_in and set(killed) <= ran_in | set(killed)
    print(f"{len(killed)} kills; {reran} step bodies re-ran; {reclaims} runs reclaimed")
    assert intact(db)


def test_a_run_that_kills_its_worker_process_is_poisoned_and_the_daemon_carries_on(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    """On both stores: the dead worker's leases lapse with their crash charge kept (the
    other worker expires a dead daemon's leases), which is what lets the fifth crash alone
    dead-letter the run."""
    effects = tmp_path / "effects.log"
    with open_store(db) as store:
        guilty = ops.start(
            store, f"{FLOWS}:killer", {"effects": str(effects)}, clock=SystemClock(), cwd=str(ROOT)
        ).run.run_id
        healthy = [
            ops.start(
                store,
                f"{FLOWS}:healthy",
                {"effects": str(effects), "busy_ms": 300},
                clock=SystemClock(),
                cwd=str(ROOT),
            ).run.run_id
            for _ in range(3)
        ]
    daemon = daemons.start(db, "--workers", "2", "--lease", "3s")
    settled = ("completed", "dead")
    wait_until(lambda: all(s in settled for s in statuses(db).values()), timeout=60)
    assert daemon.poll() is None  # only worker processes died
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0

    final = statuses(db)
    assert [final[r] for r in healthy] == ["completed"] * 3
    assert final[guilty] == "dead"
    ((error,),) = read(db, "SELECT error FROM runs WHERE run_id = ?", (guilty,))
    assert json.loads(error)["type"] == "PoisonRunError"
    charges = [e["crashes"] for e in timeline(db, guilty) if e["type"] == "reclaimed"]
    assert charges == [0, 1, 2, 3, 4]  # its first crash shared, then five alone
    kills = [line for line in effects.read_text().splitlines() if line.startswith(guilty)]
    assert len(kills) == 6
    for run_id in healthy:
        assert read(db, "SELECT COUNT(*) FROM journal WHERE run_id = ?", (run_id,)) == [(1,)]


def test_a_sigkilled_daemon_takes_its_workers_with_it_and_a_new_one_completes_the_runs(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    run_ids = start_runs(
        db,
        "",
        [{"effects": str(effects), "n": STEPS, "busy_ms": 10, "nap": 0.05}] * 40,
        target=f"{FLOWS}:steps",
    )
    daemon = daemons.start(db, "--workers", "2", "--concurrency", "4", "--lease", "30s")
    workers = wait_until(lambda: w if len(w := worker_pids(daemon.pid)) == 2 else None, 30)
    wait_until(lambda: journal_steps(db) > 0, timeout=30)
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.wait(timeout=10)

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

    # No worker outlives its daemon: each stops at once and hands its runs back (their
    # leases are 30 s long: only that hand-back lets a new daemon take them now). A run a
    # worker still held is due now with `released` as its last event; one whose handler's
    # last write (its sleep) was committed as the worker stopped holds no lease at all.
    wait_until(lambda: all(gone(p) for p in workers), timeout=20)
    assert not all_completed(db)
    now_us = time.time_ns() // 1000
    held = read(db, "SELECT run_id, run_at FROM runs WHERE status = 'running'")
    assert [rid for rid, run_at in held if run_at > now_us] == []  # none waits for its lease
    assert all(timeline(db, rid)[-1]["type"] == "released" for rid, _ in held)
    again = daemons.start(db, "--lease", "30s")
    wait_until(lambda: all_completed(db), timeout=60)
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=30) == 0
    assert statuses(db) == dict.fromkeys(run_ids, "completed")
    assert intact(db)
