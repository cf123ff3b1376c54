"""Two daemons on one database: never both on one run; a paused one's late writes are fenced
off. On a SQLite file and on a PostgreSQL database (the `db` fixture)."""

from __future__ import annotations

import collections
import os
import signal
import time
from itertools import pairwise
from pathlib import Path

import pytest
from helpers import wait_until

from .conftest import Daemons, intact, mid_write, read, start_runs, statuses, timeline

pytestmark = pytest.mark.crash


def intervals(effects: Path) -> dict[str, list[tuple[float, float, int, str]]]:
    """run_id -> [(start, end, pid, step)] from the side file's start/end lines."""
    starts: dict[tuple[str, str, int], float] = {}
    out: dict[str, list[tuple[float, float, int, str]]] = collections.defaultdict(list)
    for line in effects.read_text().splitlines():
        kind, run_id, step, pid, at = line.split()
        key = (run_id, step, int(pid))
        if kind == "start":
            starts[key] = float(at)
        else:
            out[run_id].append((starts.pop(key), float(at), int(pid), step))
    assert not starts, f"bodies that never ended: {starts}"
    return out


def test_two_daemons_never_run_one_run_at_once(db: str, tmp_path: Path, daemons: Daemons) -> None:
    effects = tmp_path / "effects.log"
    run_ids = start_runs(db, "hop", [{"effects": str(effects), "steps": 3, "nap": 0.1}] * 60)
    a = daemons.start(db, "--concurrency", "2")
    b = daemons.start(db, "--concurrency", "2")
    # Both work the file for a while; then one drains away mid-way, so the other must
    # wake and finish runs the first one started.
    wait_until(
        lambda: read(db, "SELECT COUNT(*) FROM journal WHERE kind = 'step'")[0][0] >= 60,
        timeout=30,
    )
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=30) == 0
    wait_until(lambda: set(statuses(db).values()) == {"completed"}, timeout=60)
    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=30) == 0

    by_run = intervals(effects)
    pids = {pid for spans in by_run.values() for _, _, pid, _ in spans}
    assert pids == {a.pid, b.pid}, "both daemons should have done some of the work"
    hopped = 0
    for run_id in run_ids:
        spans = sorted(by_run[run_id])
        assert [s for _, _, _, s in spans] == ["s0", "s1", "s2"]  # each body ran once
        for (_, end, _, _), (start, _, _, _) in pairwise(spans):
            assert end <= start, f"run {run_id}: two bodies overlapped"
        # Who took the run: its claims, and the reclaim of a run the drained daemon had
        # let rest (a rest taken back by its own handler is no claim).
        taken = [e for e in timeline(db, run_id) if e["type"] in ("claimed", "reclaimed")]
        claimers = {e["by"] for e in taken}
        hopped += len(claimers) > 1
        assert len(timeline(db, run_id, "completed")) == 1
    assert hopped > 0, "no run moved between daemons; the test proved nothing"
    assert intact(db)


def test_a_daemon_paused_past_its_lease_has_its_late_writes_rejected(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    fast_lease = ("--lease", "1s", "--heartbeat", "200ms", "--concurrency", "1")
    paused = daemons.start(db, *fast_lease)
    (run_id,) = start_runs(db, "probe", [{"effects": str(effects), "busy_ms": 1500}])
    wait_until(lambda: effects.exists() and "start" in effects.read_text())
    # Pause it mid-step, but never inside a write (the file's write lock, or on PostgreSQL
    # an open transaction's row locks, would make the other daemon wait for it).
    while True:
        os.kill(paused.pid, signal.SIGSTOP)
        if not mid_write(db, paused.pid):
            break
        os.kill(paused.pid, signal.SIGCONT)
        time.sleep(0.01)
    ((first_fence,),) = read(db, "SELECT fence FROM runs WHERE run_id = ?", (run_id,))

    other = daemons.start(db, *fast_lease)
    wait_until(lambda: statuses(db)[run_id] == "completed", timeout=30)
    os.kill(paused.pid, signal.SIGCONT)  # it wakes up believing it still holds the run
    wait_until(lambda: timeline(db, run_id, "lease lost"), timeout=15)

    (lost,) = timeline(db, run_id, "lease lost")
    assert lost["owner"].split("/")[1] == str(paused.pid)
    assert lost["fence"] == first_fence
    assert lost["current_fence"] == first_fence + 1
    (reclaimed,) = timeline(db, run_id, "reclaimed")  # by lease expiry: the paused pid lives
    # A suspect: the other daemon runs it alone, in a worker process of its own.
    winner = int(reclaimed["by"].split("/")[1])
    assert winner not in (paused.pid, other.pid) and reclaimed["alone"] is True

    spans = {pid: (start, end) for start, end, pid, _ in intervals(effects)[run_id]}
    assert set(spans) == {paused.pid, winner}
    # The paused daemon finished its body after the other one had journaled the step...
    ((value, recorded_at),) = read(
        db, "SELECT value, recorded_at FROM journal WHERE run_id = ? AND kind = 'step'", (run_id,)
    )
    assert spans[paused.pid][1] * 1e6 > recorded_at
    # ... and its result never landed: the journal and the run hold the other daemon's.
    assert int(value) == winner
    ((status, result, fence),) = read(
        db, "SELECT status, result, fence FROM runs WHERE run_id = ?", (run_id,)
    )
    assert (status, int(result), fence) == ("completed", winner, first_fence + 1)
    assert len(timeline(db, run_id, "completed")) == 1
    assert "lease lost" in daemons.log(paused)
    for p in (paused, other):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
