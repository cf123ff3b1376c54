"""Poison is charged only to the run whose execution kills its daemon (issue 11, item 1).

The issue's reproduction under a restart loop: one run whose step calls os._exit(7),
three runs with 300 ms steps, and `flowctl daemon --lease 3s` started again each time it
dies. Before, every run in flight was charged each crash, and all four ended dead with
PoisonRunError after six starts. Now the first crash (four runs in flight) is charged to
nobody: all four become suspects, and each runs alone in a worker process of its own
(issue 39), beside which the daemon lives on. The three healthy runs complete; the guilty
one kills only its isolated worker, each death is charged to it by the daemon that saw
it, and the fifth dead-letters it, with that second daemon still serving.
On both stores (the `db` fixture): on PostgreSQL the dead daemon is on this host, where
the pid check applies, so its runs are reclaimed at once there too.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from helpers import wait_until

from .conftest import Daemons, read, start_runs, statuses, timeline

pytestmark = pytest.mark.crash

FLOWS = "tests/crash/core_flows.py"
MAX_STARTS = 10


def start(db: str, name: str, inputs: list[dict[str, object]]) -> list[str]:
    return start_runs(db, "", inputs, target=f"{FLOWS}:{name}")


def settled(db: str) -> bool:
    return all(s in ("completed", "dead", "cancelled") for s in statuses(db).values())


def test_only_the_run_that_kills_its_daemon_is_poisoned_the_others_complete(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    (guilty,) = start(db, "killer", [{"effects": str(effects)}])
    healthy = start(db, "healthy", [{"effects": str(effects), "busy_ms": 300}] * 3)

    exits = []
    for _ in range(MAX_STARTS):  # the restart loop of a supervisor
        proc = daemons.start(db, "--lease", "3s")
        wait_until(lambda p=proc: p.poll() is not None or settled(db), timeout=30)
        if proc.poll() is None:  # everything settled and the daemon is still up: stop it
            proc.send_signal(signal.SIGTERM)
            exits.append(proc.wait(timeout=30))
            break
        exits.append(proc.returncode)

    assert settled(db)
    final = statuses(db)
    assert [final[r] for r in healthy] == ["completed"] * 3
    assert final[guilty] == "dead"
    ((error,),) = read(db, "SELECT error FROM runs WHERE run_id = ?", (guilty,))
    assert json.loads(error)["type"] == "PoisonRunError"
    # One crash with all four in flight kills the first daemon; the second runs each
    # suspect in a process of its own, sees the guilty one's die five times, and lives.
    assert exits == [7, 0]
    charges = [e["crashes"] for e in timeline(db, guilty) if e["type"] == "reclaimed"]
    assert charges == [0, 1, 2, 3, 4]  # crashes charged before each isolated worker runs it
    crashed = [e["crashes"] for e in timeline(db, guilty) if e["type"] == "crashed"]
    assert crashed == [1, 2, 3, 4, 5]
    # Each healthy run's step is journaled once; it ran at most twice (once in the crash).
    for run_id in healthy:
        assert read(db, "SELECT COUNT(*) FROM journal WHERE run_id = ?", (run_id,)) == [(1,)]
        ran = [line for line in effects.read_text().splitlines() if line.startswith(run_id)]
        assert 1 <= len(ran) <= 2
        assert not [e for e in timeline(db, run_id) if e["type"] == "suspect" and e["crashes"]]
    kills = [line for line in effects.read_text().splitlines() if line.startswith(guilty)]
    assert len(kills) == 6
