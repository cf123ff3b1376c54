"""Recovery stalls nothing (issue 39, item 1): a suspect runs in a worker process of its
own while the daemon keeps claiming, waking and firing; a drain's released runs are no
suspects; a crash is charged only when the isolated worker died and its daemon lived.

Real daemons (`--workers 1`, one process, where the stall was worst), real SIGKILLs, on
both stores (the `db` fixture).
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import wait_until

from flowctl.clock import SystemClock
from flowctl.daemon import DaemonConfig
from flowctl.daemon.spawn import child_settings, start_child
from flowctl.store import open_store

from .conftest import Daemons, read, start_runs, statuses, timeline

pytestmark = pytest.mark.crash

FLOWS = "tests/crash/recover_flows.py"


def start(db: str, name: str, inputs: list[dict[str, object]]) -> list[str]:
    return start_runs(db, "", inputs, target=f"{FLOWS}:{name}")


def bodies(effects: Path, run_id: str) -> list[int]:
    """The pids that started a step body of `run_id`, in order."""
    if not effects.exists():
        return []
    return [
        int(p) for r, _, p in (ln.split() for ln in effects.read_text().splitlines()) if r == run_id
    ]


def owner_pid(db: str, run_id: str) -> int | None:
    ((owner,),) = read(db, "SELECT lease_owner FROM runs WHERE run_id = ?", (run_id,))
    return int(owner.split("/")[1]) if owner else None


def kill_group(proc: object) -> None:
    pid = proc.pid  # type: ignore[attr-defined]
    os.killpg(pid, signal.SIGKILL)
    proc.wait()  # type: ignore[attr-defined]


def test_timers_wake_on_time_while_a_suspect_runs_alone(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    (suspect,) = start(db, "hold", [{"effects": str(effects), "seconds": 25}])
    first = daemons.start(db)
    wait_until(lambda: bodies(effects, suspect), timeout=30)
    kill_group(first)  # it died with the run in flight: a suspect now

    second = daemons.start(db)
    wait_until(lambda: len(bodies(effects, suspect)) == 2, timeout=30)  # it runs again, alone
    isolated = bodies(effects, suspect)[1]
    assert isolated not in (first.pid, second.pid)  # in a worker process of its own
    sleepers = start(db, "nap", [{"seconds": s} for s in (2, 4, 6)])
    waiters = start(db, "wait_go", [{"seconds": s} for s in (3, 5, 7)])
    timers = sleepers + waiters
    wait_until(lambda: all(statuses(db)[r] == "completed" for r in timers), timeout=20)
    assert statuses(db)[suspect] == "running"  # they all woke while its 25 s step ran
    for run_id in timers:
        (woke,) = timeline(db, run_id, "woke")
        assert woke["late_ms"] < 5000, (run_id, woke)

    wait_until(lambda: statuses(db)[suspect] == "completed", timeout=40)
    (reclaimed,) = timeline(db, suspect, "reclaimed")
    assert (reclaimed["alone"], reclaimed["crashes"]) == (True, 0)
    assert second.poll() is None  # the daemon served throughout
    assert not timeline(db, suspect, "crashed")


def test_quick_runs_queued_after_a_drain_finish_while_the_released_runs_run_again(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    released = start(db, "hold", [{"effects": str(effects), "seconds": 12}] * 4)
    first = daemons.start(db, "--grace", "1s")
    wait_until(lambda: all(bodies(effects, r) for r in released), timeout=30)
    first.send_signal(signal.SIGTERM)  # a drain past its grace hands the four back
    assert first.wait(timeout=30) == 0
    for run_id in released:
        assert owner_pid(db, run_id) is None
        assert [e["type"] for e in timeline(db, run_id)][-1] == "released"

    second = daemons.start(db)
    quick = start(db, "nap", [{"seconds": 0.01}] * 10)
    wait_until(lambda: all(statuses(db)[r] == "completed" for r in quick), timeout=30)
    now = statuses(db)
    assert [now[r] for r in released] == ["running"] * 4  # running again, side by side
    # No suspect: the daemon itself runs them again, with the quick ones, not one at a time.
    assert all(len(bodies(effects, r)) == 2 for r in released)
    assert {bodies(effects, r)[1] for r in released} == {second.pid}
    wait_until(lambda: all(statuses(db)[r] == "completed" for r in released), timeout=40)
    for run_id in released:
        assert not timeline(db, run_id, "suspect")
        assert read(db, "SELECT suspect, crashes FROM runs WHERE run_id = ?", (run_id,)) == [(0, 0)]


def test_a_crash_is_charged_only_when_the_isolated_worker_died_and_its_daemon_lived(
    db: str, tmp_path: Path, daemons: Daemons
) -> None:
    effects = tmp_path / "effects.log"
    (run_id,) = start(db, "hold", [{"effects": str(effects), "seconds": 120}])
    first = daemons.start(db)
    wait_until(lambda: bodies(effects, run_id), timeout=30)
    kill_group(first)

    second = daemons.start(db)
    wait_until(lambda: len(bodies(effects, run_id)) == 2, timeout=30)
    isolated = bodies(effects, run_id)[1]
    os.kill(isolated, signal.SIGKILL)  # its isolated worker dies; its daemon sees it
    wait_until(lambda: timeline(db, run_id, "crashed"), timeout=30)
    (crashed,) = timeline(db, run_id, "crashed")
    assert crashed["crashes"] == 1
    wait_until(lambda: len(bodies(effects, run_id)) == 3, timeout=30)  # isolated again

    kill_group(second)  # the daemon and its isolated worker at once: OOM, power loss
    third = daemons.start(db)
    wait_until(lambda: len(bodies(effects, run_id)) == 4, timeout=30)
    assert bodies(effects, run_id)[3] not in (third.pid, isolated)
    assert read(db, "SELECT crashes FROM runs WHERE run_id = ?", (run_id,)) == [(1,)]
    assert len(timeline(db, run_id, "crashed")) == 1
    assert third.poll() is None and second.poll() is not None


def test_an_isolated_worker_whose_daemon_is_gone_hands_its_run_back_unexecuted(
    db: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The daemon that isolated a suspect died before its worker reported the lease: that
    worker hands the run back at once, due to the next daemon, and does not execute it
    (nobody would see it die). Before, it logged an engine error with a traceback and left
    the lease to lapse, one more reclaim each time (seen under the crash loop's kills)."""
    effects = tmp_path / "effects.log"
    (run_id,) = start(db, "hold", [{"effects": str(effects), "seconds": 0}])
    clock = SystemClock()
    with open_store(db) as store:  # a worker on another host claims it, then dies
        now = clock.now()
        (claim,), _ = store.claim_due("elsewhere/4242/1/beef", now, now + timedelta(seconds=1), 1)
        settings = {**child_settings(store, DaemonConfig()), "run_id": run_id}

    def suspect_due() -> bool:
        with open_store(db) as store:
            return store.suspects_due(clock.now(), 1) == [run_id]

    wait_until(suspect_due, timeout=10)  # its 1 s lease lapsed

    popen, control, report = start_child("flowctl.daemon.isolated", settings)
    os.close(report)  # nobody reads the lease it claims: its daemon is gone
    try:
        assert popen.wait(timeout=60) == 0
    finally:
        os.close(control)

    ((owner, fence),) = read(db, "SELECT lease_owner, fence FROM runs WHERE run_id = ?", (run_id,))
    assert (statuses(db)[run_id], owner) == ("running", None)  # handed back, due now
    assert fence == claim.lease.fence + 1  # claimed once by the isolated worker
    released = timeline(db, run_id, "released")
    assert [e["reason"] for e in released] == ["its daemon stopped"]
    assert not effects.exists()  # not executed
    err = capfd.readouterr().err
    assert "engine error" not in err and "Traceback" not in err, err
    assert suspect_due()  # for the next daemon, to run alone
