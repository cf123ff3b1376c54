"""kill -9 in the middle of a fan-out (issue 36): a branch whose checkpoint was written never
runs again, none is lost, every run completes once.

The daemon process (`--workers 1`: it runs the handlers) or a worker process (`--workers
2`) is SIGKILLed at random moments while runs are inside one `ctx.map` of many branches.
At each kill the test notes which branches were journaled and how often each body had run;
at the end every one of those ran no more often, every branch is journaled once as done,
and every run completed once. Both on a SQLite file and on PostgreSQL (the `db` fixture).

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

from .conftest import Daemons, intact, read, seeded_rng, start_runs, statuses
from .test_workers_kill9 import worker_pids

pytestmark = pytest.mark.crash

FLOWS = "tests/crash/fanout_flows.py"
RUNS = 6
BRANCHES = 60
KILLS = 6


def journaled(db: Path | str) -> set[tuple[str, str]]:
    return {
        (r, n)
        for r, n in read(
            db, "SELECT run_id, name FROM journal WHERE kind = 'step' AND state = 'done'"
        )
    }


def body_runs(effects: Path) -> collections.Counter[tuple[str, str]]:
    if not effects.exists():
        return collections.Counter()
    return collections.Counter(
        (line.split()[0], f"fan[{line.split()[1]}]") for line in effects.read_text().splitlines()
    )


def all_completed(db: Path | str) -> bool:
    return set(statuses(db).values()) == {"completed"}


@pytest.mark.parametrize("victim", ["daemon", "worker"])
def test_kill9_mid_fan_out_never_reruns_a_journaled_branch_and_loses_none(
    db: str, tmp_path: Path, daemons: Daemons, victim: str
) -> None:
    rng = seeded_rng()
    effects = tmp_path / "effects.log"
    inputs = [
        {"effects": str(effects), "busy_ms": [rng.randint(20, 200) for _ in range(BRANCHES)]}
        for _ in range(RUNS)
    ]
    run_ids = start_runs(db, "", inputs, target=f"{FLOWS}:fan")
    workers = ("--workers", "2") if victim == "worker" else ()
    snapshots: list[tuple[set[tuple[str, str]], collections.Counter[tuple[str, str]]]] = []
    daemon = None
    while len(snapshots) < KILLS and not all_completed(db):
        if daemon is None or victim == "daemon":
            daemon = daemons.start(db, *workers, "--concurrency", "4", "--lease", "3s")
        before = len(journaled(db))
        wait_until(lambda b=before: len(journaled(db)) > b or all_completed(db), timeout=30)
        time.sleep(rng.uniform(0.0, 0.3))
        if victim == "daemon":
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.wait()
        else:
            live = wait_until(lambda d=daemon: worker_pids(d.pid), timeout=30)
            os.kill(rng.choice(live), signal.SIGKILL)
            time.sleep(0.05)  # its in-flight bodies are gone with it
        snapshots.append((journaled(db), body_runs(effects)))
    assert len(snapshots) == KILLS, f"the work ran out after {len(snapshots)} kills"

    final = daemon if victim == "worker" and daemon is not None else daemons.start(db)
    wait_until(lambda: all_completed(db), timeout=120)
    final.send_signal(signal.SIGTERM)
    assert final.wait(timeout=30) == 0

    names = [f"fan[{k}]" for k in range(BRANCHES)]
    # Every run completed once, with every branch's result in order.
    completions = collections.Counter(
        r for (r,) in read(db, "SELECT run_id FROM timeline WHERE type = 'completed'")
    )
    assert completions == dict.fromkeys(run_ids, 1)
    steps = collections.defaultdict(list)
    for run_id, kind, name, state in read(
        db, "SELECT run_id, kind, name, state FROM journal ORDER BY run_id, call_index"
    ):
        assert state == "done"
        steps[run_id].append((kind, name))
    expected = [("fanout", "fan"), *(("step", n) for n in names), ("step", "last")]
    assert dict(steps) == dict.fromkeys(run_ids, expected)
    # No branch lost: each body ran; none journaled at a kill ran again afterwards.
    runs = body_runs(effects)
    assert set(runs) == {(r, n) for r in run_ids for n in names}
    for done, counted in snapshots:
        again = {b: (counted[b], runs[b]) for b in done if runs[b] != counted[b]}
        assert again == {}, f"journaled branches ran again: {again}"
    reran = sum(n - 1 for n in runs.values())
    print(f"{len(snapshots)} kills; {reran} branch bodies ran again (cut mid-flight)")
    assert intact(db)


def test_kill9_mid_children_never_starts_a_child_twice(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    rng = seeded_rng()
    effects = tmp_path / "effects.log"
    count = 30
    inputs = [
        {"effects": str(effects), "busy_ms": [rng.randint(20, 150) for _ in range(count)]}
        for _ in range(2)
    ]
    parents = start_runs(db, "", inputs, target=f"{FLOWS}:kids")

    def runs_now() -> int:
        return int(read(db, "SELECT COUNT(*) FROM runs")[0][0])

    kills = 0
    while kills < KILLS and not all_completed(db):
        daemon = daemons.start(db, "--concurrency", "4", "--lease", "3s")
        before = runs_now() + len(journaled(db))
        wait_until(
            lambda b=before: runs_now() + len(journaled(db)) > b or all_completed(db), timeout=30
        )
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
        kills += 1
    assert kills == KILLS, f"the work ran out after {kills} kills"
    final = daemons.start(db, "--concurrency", "4")
    wait_until(lambda: all_completed(db), timeout=120)
    final.send_signal(signal.SIGTERM)
    assert final.wait(timeout=30) == 0

    for parent in parents:
        keys = [k for (k,) in read(db, "SELECT key FROM runs WHERE parent_run_id = ?", (parent,))]
        assert len(keys) == count, f"{parent} started {len(keys)} children for {count} inputs"
        assert len(set(keys)) == count
        ((result,),) = read(db, "SELECT result FROM runs WHERE run_id = ?", (parent,))
        assert json.loads(result) == list(range(count))
    assert int(read(db, "SELECT COUNT(*) FROM runs")[0][0]) == 2 + 2 * count
    print(f"{kills} kills")
    assert intact(db)
