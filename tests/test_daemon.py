"""The daemon on a FakeClock: timer wheel, wakes on time, change detection, drain, clock jumps.

`tick()` is driven directly; `run_forever()` runs in a thread whose waits go through the
FakeClock, so `advance()` moves it. Handlers coordinate with the test through a small
module installed in sys.modules (`flowctl_test_hooks`), because the daemon imports the
workflow file itself.
"""

from __future__ import annotations

import collections
import sqlite3
import sys
import threading
import time
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import query, wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.daemon.wheel import WHEEL_SIZE, TimerWheel
from flowctl.ids import HOST
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus, to_us
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = '''
import threading
import time

from flowctl import workflow


def hooks():
    import flowctl_test_hooks

    return flowctl_test_hooks.HOOKS


def count(name):
    h = hooks()
    with h.lock:
        h.counts[name] += 1
        return h.counts[name]


def hold(key):
    h = hooks()
    n = count(key)
    h.entered[key].set()
    if not h.release[key].wait(10):
        raise RuntimeError("the test never released " + key)
    return n


def hold_first(key):
    """Blocks the first execution only; returns how many executions came before."""
    h = hooks()
    n = count(key)
    if n == 1:
        h.entered[key].set()
        h.release[key].wait(10)
    return n - 1


def busy(ms):
    h = hooks()
    with h.lock:
        h.active += 1
        h.max_active = max(h.max_active, h.active)
    time.sleep(ms / 1000)
    with h.lock:
        h.active -= 1
    return ms


@workflow
def cancellable(ctx, key="k"):
    def spin():
        h = hooks()
        h.entered[key].set()
        for _ in range(2000):
            if ctx.cancelled:
                count("stopped")
                ctx.check()
            time.sleep(0.005)
        return "never cancelled"

    return ctx.step("spin", spin)


@workflow
def quick(ctx, tag="x"):
    ctx.step("one", count, "quick")
    return tag


@workflow
def napper(ctx, seconds=1.0):
    ctx.sleep(seconds)
    ctx.step("after", count, "napper")
    return seconds


@workflow
def two_steps(ctx):
    ctx.step("one", count, "one")
    ctx.step("two", count, "two")
    return "done"


@workflow
def held(ctx, key="k"):
    return ctx.step("hold", hold, key)


@workflow
def held_once(ctx, key="k"):
    return ctx.step("hold", hold_first, key)


@workflow
def napper_busy(ctx, seconds=1.0):
    ctx.sleep(seconds)
    return ctx.step("busy", busy, 20)
'''


class Hooks:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.entered: collections.defaultdict[str, threading.Event] = collections.defaultdict(
            threading.Event
        )
        self.release: collections.defaultdict[str, threading.Event] = collections.defaultdict(
            threading.Event
        )
        self.active = 0
        self.max_active = 0


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    mod = types.ModuleType("flowctl_test_hooks")
    mod.HOOKS = h  # type: ignore[attr-defined]
    sys.modules["flowctl_test_hooks"] = mod
    yield h
    for ev in list(h.release.values()):
        ev.set()
    sys.modules.pop("flowctl_test_hooks", None)


@pytest.fixture
def flows(tmp_path: Path, hooks: Hooks) -> str:
    path = tmp_path / "daemon_flows.py"
    path.write_text(FLOWS)
    return str(path)


def start(store: Store, clock: FakeClock, flows: str, name: str, **input: Any) -> str:
    return ops.start(store, f"{flows}:{name}", input, clock=clock).run.run_id


def events(store: Store, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [{"at": e.at, **e.data} for e in store.timeline(run_id) if e.type == type_]


class Serving:
    """run_forever in a thread; stopped hard at teardown if the test did not stop it."""

    def __init__(self, daemon: Daemon, **kwargs: Any) -> None:
        self.daemon = daemon
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, **kwargs: Any) -> None:
        self.code = self.daemon.run_forever(**kwargs)

    def finished(self) -> bool:
        return not self.thread.is_alive()


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Serving] = []

    def go(daemon: Daemon, **kwargs: Any) -> Serving:
        s = Serving(daemon, **kwargs)
        started.append(s)
        return s

    yield go
    for s in started:
        if not s.finished():
            s.daemon.stop(drain=False)
            s.thread.join(5)


def woke_order(db: Path) -> list[str]:
    """Run ids in the order they woke: by the time of their "woke" events, and within one
    instant (one claim's transaction) by deadline, the order that claim reads them in (a
    timeline's seq numbers one run's events only, since migration 19)."""
    return [
        r[0]
        for r in query(
            db,
            "SELECT run_id FROM timeline WHERE type = 'woke'"
            " ORDER BY at, json_extract(data, '$.scheduled')",
        )
    ]


def advance_until(clock: FakeClock, predicate: Any, step: float = POLL_INTERVAL) -> None:
    """Advance fake time a poll interval at a time until predicate() holds (real timeout 10 s)."""

    def moved() -> Any:
        if predicate():
            return True
        clock.advance(step)
        return False

    wait_until(moved, timeout=10)


# ---------------------------------------------------------------------------
# TimerWheel


def test_wheel_pops_in_time_order_and_ignores_entries_beyond_its_horizon(
    store: Store, fake_clock: FakeClock, flows: str
) -> None:
    now = fake_clock.now()
    wheel = TimerWheel(size=4)
    for minutes in (9, 3, 7, 1, 5, 2):  # six queued runs, out of order
        ops.start(
            store, f"{flows}:quick", {}, clock=fake_clock, run_at=now + timedelta(minutes=minutes)
        )
    wheel.refill(store)
    assert len(wheel) == 4  # only the soonest WHEEL_SIZE are held
    assert wheel.horizon == to_us(now + timedelta(minutes=5))
    wheel.push(now + timedelta(minutes=8), "beyond")  # past the horizon: the index keeps it
    assert len(wheel) == 4
    wheel.push(now + timedelta(minutes=4), "inside")
    assert len(wheel) == 5
    assert wheel.next_at() == to_us(now + timedelta(minutes=1))
    assert wheel.pop_due(to_us(now + timedelta(minutes=3))) == 3  # 1, 2, 3
    assert wheel.next_at() == to_us(now + timedelta(minutes=4))
    assert wheel.pop_due(to_us(now + timedelta(minutes=5))) == 2
    assert wheel.needs_refill()  # empty, but more wait in the database
    wheel.refill(store)  # the index still has all six queued runs
    assert wheel.next_at() == to_us(now + timedelta(minutes=1))


def test_wheel_holds_everything_when_it_fits(
    store: Store, fake_clock: FakeClock, flows: str
) -> None:
    for minutes in (2, 1):
        ops.start(
            store,
            f"{flows}:quick",
            {},
            clock=fake_clock,
            run_at=fake_clock.now() + timedelta(minutes=minutes),
        )
    wheel = TimerWheel(size=4)
    wheel.refill(store)
    assert wheel.horizon is None
    wheel.pop_due(to_us(fake_clock.now() + timedelta(hours=1)))
    assert not wheel.needs_refill()


def test_more_sleepers_than_the_wheel_holds_all_wake_in_order(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str, serve: Any
) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2))
    daemon.wheel = TimerWheel(size=3)
    ids = {start(store, fake_clock, flows, "napper", seconds=float(s)): s for s in range(1, 11)}
    s = serve(daemon)
    advance_until(
        fake_clock,
        lambda: all(store.get_run(r).status is RunStatus.COMPLETED for r in ids),
        step=0.25,
    )
    daemon.stop()
    wait_until(s.finished)
    assert s.code == 0
    assert [ids[r] for r in woke_order(db_path)] == list(range(1, 11))  # deadline order
    for r in ids:
        (woke,) = events(store, r, "woke")
        assert woke["late_ms"] <= 250  # within one step of fake time


def test_a_full_size_wheel_refills_past_its_horizon(
    tmp_path: Path, fake_clock: FakeClock, flows: str, serve: Any, hooks: Hooks
) -> None:
    n = WHEEL_SIZE + 40
    with Store(tmp_path / "big.db", durability="normal") as store:
        t0 = fake_clock.now()
        for i in range(n):  # due one second apart, created in reverse order
            ops.start(
                store,
                f"{flows}:quick",
                {},
                clock=fake_clock,
                run_at=t0 + timedelta(seconds=n - i),
            )
        daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=4))
        s = serve(daemon)
        assert daemon.serving.wait(5)
        assert len(daemon.wheel) == WHEEL_SIZE and daemon.wheel.horizon is not None
        fake_clock.advance(n + 1)
        advance_until(fake_clock, lambda: store.count_by_status()[RunStatus.COMPLETED] == n)
        daemon.stop()
        wait_until(s.finished)
    assert hooks.counts["quick"] == n


# ---------------------------------------------------------------------------
# tick(): wakes at the deadline, not before


def test_tick_wakes_a_thirty_day_sleep_at_its_deadline_not_before(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon, hooks: Hooks
) -> None:
    run_id = start(store, fake_clock, flows, "napper", seconds=30 * 86400)
    daemon.tick()
    assert store.get_run(run_id).status is RunStatus.SLEEPING
    wake_at = store.journal(run_id)[0].wake_at
    assert wake_at == fake_clock.now() + timedelta(days=30)

    fake_clock.advance(timedelta(days=30) - timedelta(microseconds=1))
    assert daemon.tick() == 0
    assert store.get_run(run_id).status is RunStatus.SLEEPING
    assert hooks.counts["napper"] == 0

    fake_clock.advance(timedelta(microseconds=1))
    assert daemon.tick() == 1
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED
    sleep = store.journal(run_id)[0]
    assert sleep.wake_at == wake_at  # the recorded deadline stands
    assert sleep.resolved_at == wake_at
    (woke,) = events(store, run_id, "woke")
    assert woke["scheduled"] == wake_at.isoformat(timespec="microseconds")
    assert woke["at"] == wake_at
    assert woke["late_ms"] == 0


def test_every_wake_records_scheduled_and_actual_time_and_status_reports_percentiles(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon
) -> None:
    t0 = fake_clock.now()
    ids = [start(store, fake_clock, flows, "napper", seconds=float(i)) for i in range(1, 101)]
    daemon.tick()
    fake_clock.advance(100)  # run i wakes (100 - i) s late: lateness 0 .. 99 s
    assert daemon.tick() == 100
    for i, run_id in enumerate(ids, start=1):
        (woke,) = events(store, run_id, "woke")
        assert woke["scheduled"] == (t0 + timedelta(seconds=i)).isoformat(timespec="microseconds")
        assert woke["at"] == t0 + timedelta(seconds=100)
        assert woke["late_ms"] == (100 - i) * 1000
    lateness = ops.status(store, clock=fake_clock).lateness
    assert lateness["wakes"] == 100
    assert 49_000 <= lateness["p50_ms"] <= 50_000  # type: ignore[operator]
    assert lateness["p99_ms"] >= 98_000  # type: ignore[operator]
    assert lateness["max_ms"] == 99_000


# ---------------------------------------------------------------------------
# run_forever: change detection, until-idle, drain


def test_a_run_inserted_by_another_connection_is_noticed_within_one_poll(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str, serve: Any, hooks: Hooks
) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2))
    s = serve(daemon)
    assert daemon.serving.wait(5)  # it has read data_version and gone to sleep
    with Store(db_path) as other:  # the CLI, the TUI, another daemon
        run_id = start(other, fake_clock, flows, "quick")
    fake_clock.advance(POLL_INTERVAL)  # one data_version poll; no further fake time passes
    wait_until(lambda: store.get_run(run_id).status is RunStatus.COMPLETED, timeout=5)
    assert hooks.counts["quick"] == 1
    daemon.stop()
    wait_until(s.finished)
    assert s.code == 0


def test_until_idle_runs_what_is_due_and_exits_leaving_future_sleepers(
    store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks
) -> None:
    quick = [start(store, fake_clock, flows, "quick", tag=str(i)) for i in range(3)]
    sleeper = start(store, fake_clock, flows, "napper", seconds=3600)
    later = ops.start(
        store, f"{flows}:quick", {}, clock=fake_clock, run_at=fake_clock.now() + timedelta(hours=2)
    ).run.run_id
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2))
    assert daemon.run_forever(until_idle=True) == 0
    assert [store.get_run(r).status for r in quick] == [RunStatus.COMPLETED] * 3
    assert store.get_run(sleeper).status is RunStatus.SLEEPING
    assert store.get_run(later).status is RunStatus.QUEUED
    assert store.daemons() == []  # unregistered on exit


def test_until_idle_waits_for_a_running_handler(
    store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    run_id = start(store, fake_clock, flows, "held", key="idle")
    s = serve(Daemon(store, fake_clock, DaemonConfig(concurrency=1)), until_idle=True)
    assert hooks.entered["idle"].wait(5)
    fake_clock.advance(1)
    time.sleep(0.1)  # give a wrong implementation the chance to exit early
    assert not s.finished()
    hooks.release["idle"].set()
    wait_until(s.finished)
    assert s.code == 0
    assert store.get_run(run_id).status is RunStatus.COMPLETED


def test_stop_drains_no_new_claims_running_handlers_finish_under_a_kept_lease(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    run_id = start(store, fake_clock, flows, "held", key="drain")
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2, lease=15, heartbeat=1))
    s = serve(daemon)
    assert hooks.entered["drain"].wait(5)
    fence = store.get_run(run_id).fence
    daemon.stop()
    with Store(db_path) as other:
        queued = start(other, fake_clock, flows, "quick")
    for _ in range(40):  # 20 s of fake time: longer than the 15 s lease
        fake_clock.advance(0.5)
        time.sleep(0.005)
    assert not s.finished()
    run = store.get_run(run_id)
    assert run.status is RunStatus.RUNNING
    assert run.fence == fence  # never reclaimed: heartbeats kept the lease alive
    assert run.lease_until is not None and run.lease_until > fake_clock.now()
    hooks.release["drain"].set()
    wait_until(s.finished)
    assert s.code == 0
    assert store.get_run(run_id).status is RunStatus.COMPLETED
    assert store.get_run(run_id).fence == fence
    assert store.get_run(queued).status is RunStatus.QUEUED  # no new claims while draining
    assert hooks.counts["quick"] == 0


def test_a_second_stop_exits_at_once_and_hands_the_run_back(
    store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    run_id = start(store, fake_clock, flows, "held", key="hard")
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1, grace=3600))
    s = serve(daemon)
    assert hooks.entered["hard"].wait(5)
    daemon.stop()
    daemon.stop()
    wait_until(s.finished, timeout=2)  # the handler is still blocked: nothing waited for it
    assert s.code == 1
    run = store.get_run(run_id)
    assert run.status is RunStatus.RUNNING
    assert run.run_at is not None and run.run_at <= fake_clock.now()  # reclaimable now
    (released,) = events(store, run_id, "released")
    assert released["by"] == daemon.owner
    hooks.release["hard"].set()


def test_grace_period_over_interrupts_and_hands_the_run_back(
    store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    run_id = start(store, fake_clock, flows, "held", key="grace")
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1, grace=5))
    s = serve(daemon)
    assert hooks.entered["grace"].wait(5)
    daemon.stop()
    advance_until(fake_clock, s.finished, step=0.5)
    assert s.code == 0
    run = store.get_run(run_id)
    assert run.status is RunStatus.RUNNING  # not failed, cancelled or timed out
    assert run.error is None
    assert events(store, run_id, "released")[0]["reason"] == "grace period over"
    hooks.release["grace"].set()


# ---------------------------------------------------------------------------
# Crash recovery and fencing, in process


def test_a_dead_owners_run_is_reclaimed_at_once_and_journaled_steps_do_not_rerun(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon, hooks: Hooks
) -> None:
    run_id = start(store, fake_clock, flows, "two_steps")
    dead = f"{HOST}/999999999/1/dead"  # no such pid: provably gone
    now = fake_clock.now()
    (claim,), _ = store.claim_due(dead, now, now + timedelta(minutes=10), 1)
    store.record_entry(
        claim.lease,
        JournalEntry(run_id, 0, CallKind.STEP, "one", EntryState.DONE, 1),
        now,
    )
    assert daemon.tick() == 1  # long before the 10-minute lease runs out
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED
    assert hooks.counts == {"two": 1}  # step one was journaled by the dead worker: not re-run
    (reclaimed,) = events(store, run_id, "reclaimed")
    assert reclaimed["from"] == dead
    assert reclaimed["at"] == now


def test_a_live_owners_run_waits_for_its_lease(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon
) -> None:
    run_id = start(store, fake_clock, flows, "quick")
    other = Daemon(store, fake_clock).owner  # this very process: alive
    now = fake_clock.now()
    store.claim_due(other, now, now + timedelta(seconds=15), 1)
    assert daemon.tick() == 0
    fake_clock.advance(15)
    assert daemon.tick() == 1
    assert store.get_run(run_id).status is RunStatus.COMPLETED


def test_a_worker_that_lost_its_lease_has_its_late_write_rejected_and_noted(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    run_id = start(store, fake_clock, flows, "held_once", key="late")
    # The slow worker is paused (think SIGSTOP): its own time stands still, so it sends no
    # more heartbeats, while everyone else's time moves past its lease.
    paused = FakeClock(fake_clock.now())
    slow = Daemon(store, paused, DaemonConfig(concurrency=1, lease=15, heartbeat=1))
    s = serve(slow)
    assert hooks.entered["late"].wait(5)
    first_fence = store.get_run(run_id).fence
    fake_clock.advance(16)
    with Store(db_path) as other_db:
        fast = Daemon(other_db, fake_clock)
        assert fast.tick() == 1
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.fence == first_fence + 1
    assert run.result == 1  # the second execution's result
    hooks.release["late"].set()  # the slow worker wakes up and tries to journal its step
    wait_until(lambda: events(store, run_id, "lease lost"))
    (lost,) = events(store, run_id, "lease lost")
    assert lost["owner"] == slow.owner
    assert lost["fence"] == first_fence
    assert lost["current_fence"] == first_fence + 1
    step = store.journal(run_id)[0]
    assert step.value == 1  # the late write (value 0) changed nothing
    assert store.get_run(run_id).status is RunStatus.COMPLETED
    slow.stop()
    wait_until(s.finished)


# ---------------------------------------------------------------------------
# Clock jumps, host suspend, and the overdue stampede


def test_a_wall_clock_jump_is_written_to_the_timeline_of_runs_it_passed_over(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon
) -> None:
    ids = {h: start(store, fake_clock, flows, "napper", seconds=h * 3600.0) for h in (1, 2, 5)}
    daemon.tick()
    fake_clock.set(fake_clock.now() + timedelta(hours=3), monotonic_too=False)  # clock stepped
    daemon.tick()
    for h in (1, 2):
        (jump,) = events(store, ids[h], "clock jumped")
        assert jump["jump_s"] == pytest.approx(3 * 3600)
        assert store.get_run(ids[h]).status is RunStatus.COMPLETED
    assert events(store, ids[5], "clock jumped") == []
    assert store.get_run(ids[5]).status is RunStatus.SLEEPING


def test_host_suspend_is_told_apart_from_a_jump_and_noted_on_overdue_runs(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon
) -> None:
    ids = {h: start(store, fake_clock, flows, "napper", seconds=h * 3600.0) for h in (1, 5)}
    daemon.tick()
    fake_clock.suspend(timedelta(hours=2))  # wall and boot time move; monotonic does not
    daemon.tick()
    (resumed,) = events(store, ids[1], "host resumed")
    assert resumed["suspended_s"] == pytest.approx(7200)
    assert events(store, ids[1], "clock jumped") == []
    assert events(store, ids[5], "host resumed") == []


def test_small_clock_noise_is_not_reported(
    store: Store, fake_clock: FakeClock, flows: str, daemon: Daemon
) -> None:
    run_id = start(store, fake_clock, flows, "napper", seconds=1.0)
    daemon.tick()
    fake_clock.set(fake_clock.now() + timedelta(seconds=1.5), monotonic_too=False)
    daemon.tick()
    assert events(store, run_id, "clock jumped") == []


def test_overdue_wakes_after_a_suspend_are_released_in_deadline_order_with_bounded_concurrency(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    seconds = [7, 3, 11, 1, 9, 5, 12, 2, 8, 4, 10, 6]  # created out of deadline order
    ids = {start(store, fake_clock, flows, "napper_busy", seconds=float(x)): x for x in seconds}
    Daemon(store, fake_clock, DaemonConfig(concurrency=4)).tick()  # all asleep now
    assert all(store.get_run(r).status is RunStatus.SLEEPING for r in ids)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=3))
    s = serve(daemon)
    assert daemon.serving.wait(5)
    fake_clock.suspend(timedelta(minutes=5))
    # Waits measure monotonic time, which a suspend does not move: they end as time goes on.
    advance_until(
        fake_clock, lambda: all(store.get_run(r).status is RunStatus.COMPLETED for r in ids)
    )
    daemon.stop()
    wait_until(s.finished)
    for run_id in ids:
        assert len(events(store, run_id, "woke")) == 1
        assert events(store, run_id, "host resumed")  # the suspend is in its timeline
    assert hooks.max_active <= 3  # never a stampede past the worker pool
    assert hooks.max_active >= 2  # ...but it did run them concurrently
    # Claimed, and so woken, in deadline order: no claim took a run due after one a later
    # claim took.
    assert [ids[r] for r in woke_order(db_path)] == sorted(seconds)


# ---------------------------------------------------------------------------
# Group commit (the store mode the daemon turns on for several workers)


def in_one_group(
    db_path: Path, store: Store, write: Any, n: int, queued: int | None = None
) -> None:
    """Run write(0..n-1) on n threads that all queue up behind another connection's write
    lock (`queued` of them, when the others fail before they write), so that they share
    one group-commit transaction; return once they are done."""
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        threads = [threading.Thread(target=write, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        wait_until(lambda: store.pending_writes() == (n if queued is None else queued))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    for t in threads:
        t.join(5)


def test_group_commit_shares_one_commit_and_each_write_is_durable_when_it_returns(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str
) -> None:
    ids = [start(store, fake_clock, flows, "quick") for _ in range(8)]
    before = store.commit_stats()
    store.set_group_commit(True)
    durable_on_return: list[bool] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            if i == 3:  # one writer fails mid-transaction: only its own changes roll back
                with pytest.raises(TypeError):
                    store.add_event(ids[i], "probe", {"bad": object()}, fake_clock.now())
            store.add_event(ids[i], "probe", {"i": i}, fake_clock.now())
            n = query(
                db_path,
                "SELECT COUNT(*) FROM timeline WHERE run_id = ? AND type = 'probe'",
                (ids[i],),
            )[0][0]
            durable_on_return.append(n == 1)  # an independent reader sees it already
        except BaseException as e:
            errors.append(e)

    in_one_group(db_path, store, write, 8)
    store.set_group_commit(False)
    after = store.commit_stats()
    assert errors == []
    assert durable_on_return == [True] * 8
    # eight good writes (the failed one rolled back to its savepoint) ...
    assert after.writes - before.writes == 8
    assert after.commits - before.commits < 8  # ... sharing fewer COMMITs than writes
    rows = query(db_path, "SELECT data FROM timeline WHERE type = 'probe'")
    assert len(rows) == 8 and all("bad" not in r[0] for r in rows)


def test_checkpoints_in_a_shared_group_fail_alone_without_a_savepoint(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str
) -> None:
    """A checkpoint is one INSERT, so under group commit it takes no SAVEPOINT: a value
    that is not JSON (fails before it waits for the lock: its row is made before the
    write), a NULL name (SQLite undoes the failed
    statement) and a lost lease (inserts nothing) change nothing of their own, and every
    other writer sharing that transaction is committed and durable when it returns."""
    from dataclasses import replace

    from flowctl.errors import SerializationError

    ids = [start(store, fake_clock, flows, "quick") for _ in range(8)]
    now = fake_clock.now()
    claims, _ = store.claim_due("me", now, now + timedelta(seconds=60), 8)
    assert len(claims) == 8
    lease = {c.run.run_id: c.lease for c in claims}
    before = store.commit_stats()
    store.set_group_commit(True)
    outcomes: dict[int, object] = {}

    def entry(i: int, value: object = 1, name: str | None = "s") -> JournalEntry:
        return JournalEntry(ids[i], 0, CallKind.STEP, name, EntryState.DONE, value)  # type: ignore[arg-type]

    def write(i: int) -> None:
        try:
            if i == 1:
                store.record_entry(lease[ids[i]], entry(i, value=object()), now, suspicion=False)
            elif i == 2:
                store.record_entry(lease[ids[i]], entry(i, name=None), now, suspicion=False)
            elif i == 3:
                stale = replace(lease[ids[i]], fence=lease[ids[i]].fence - 1)
                outcomes[i] = store.record_entry(stale, entry(i), now, suspicion=False)
                return
            else:
                outcomes[i] = store.record_entry(lease[ids[i]], entry(i), now, suspicion=False)
            rows = query(db_path, "SELECT COUNT(*) FROM journal WHERE run_id = ?", (ids[i],))
            outcomes[i] = (outcomes.get(i), rows[0][0])  # durable: another reader sees it
        except BaseException as e:
            outcomes[i] = type(e)

    in_one_group(db_path, store, write, 8, queued=7)
    store.set_group_commit(False)
    after = store.commit_stats()
    assert outcomes[1] is SerializationError
    assert outcomes[2] is sqlite3.IntegrityError
    assert outcomes[3] is False
    assert all(outcomes[i] == (True, 1) for i in (0, 4, 5, 6, 7)), outcomes
    written = {r[0] for r in query(db_path, "SELECT run_id FROM journal")}
    assert written == {ids[i] for i in (0, 4, 5, 6, 7)}
    assert after.writes - before.writes == 6  # the five good ones and the refused one
    assert after.commits - before.commits < 6


def test_a_cancel_from_another_process_reaches_a_running_handler_within_one_poll(
    db_path: Path, store: Store, fake_clock: FakeClock, flows: str, hooks: Hooks, serve: Any
) -> None:
    run_id = start(store, fake_clock, flows, "cancellable", key="c")
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1, heartbeat=1))
    s = serve(daemon)
    assert hooks.entered["c"].wait(5)
    with Store(db_path) as other:
        assert ops.cancel(other, run_id, clock=fake_clock).status is RunStatus.RUNNING
    fake_clock.advance(POLL_INTERVAL)  # one poll; far from the next heartbeat
    wait_until(lambda: store.get_run(run_id).status is RunStatus.CANCELLED, timeout=5)
    assert hooks.counts["stopped"] == 1  # the handler saw ctx.cancelled and stopped
    daemon.stop()
    wait_until(s.finished)
