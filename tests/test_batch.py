"""The batch runner (flowctl.daemon.batch): the daemon's handlers as greenlets on one thread,
a round's checkpoints in one COMMIT, step bodies that block kept off that thread.

The daemon runs for real (`run_forever` in a thread, on a FakeClock); what is checked is
what a user sees: runs complete with every checkpoint, a waiting step body does not hold
up the others, a step's prints and `flowctl.current()` work wherever the body runs.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import ROOT, logged_daemon, wait_until

from flowctl import ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.batch import INLINE_UNDER, SLOW_INLINE, BatchRunner, Placement
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.daemon.slots import Slots
from flowctl.model import EntryState, RunStatus
from flowctl.retry import blocking
from flowctl.store import Claim
from flowctl.store.round import WriteRound
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """
import os
import sqlite3
import time

from flowctl import workflow
from flowctl.runtime.context import current


def add(a, b):
    return a + b


@workflow
def three(ctx, n=0):
    a = ctx.step("one", add, n, 1)
    b = ctx.step("two", add, a, 1)
    return ctx.step("three", add, b, 1)


def wait_for(path):
    # Polls for a file another run's step creates: if this body ran on the runner's
    # thread, that other step could never run, and this gives up after 20 s.
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if os.path.exists(path):
            return "saw it"
        time.sleep(0.01)
    return "gave up"


@workflow
def waiter(ctx, path):
    return ctx.step("wait", wait_for, path)


@workflow
def maker(ctx, path):
    return ctx.step("make", lambda: open(path, "w").close() or "made")


@workflow(concurrency={"limit": 1, "key": "${{ input.user }}"})
def keyed(ctx, user, n=0):
    return ctx.step("one", add, n, 1)


def talk():
    print("hello from the step")
    return current().run_id


def write_lock_free(path):
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return "free"
    except sqlite3.OperationalError:
        return "locked"
    finally:
        conn.close()


@workflow
def prober(ctx, path):
    # Handler code, run inline on the runner's thread: the runs of one round each look
    # whether another process could write now, then write their own ending.
    return write_lock_free(path)


@workflow
def talker(ctx):
    first = ctx.step("first", talk)
    second = ctx.step("second", talk)  # by now `talk` may run inline: both must work
    return [first, second]
"""


@pytest.fixture
def flows(tmp_path: Path) -> str:
    path = tmp_path / "batch_flows.py"
    path.write_text(FLOWS)
    return str(path)


@pytest.fixture
def batched(db_path: Path, fake_clock: FakeClock) -> Iterator[Daemon]:
    """A daemon serving with its batch runner, on a connection of its own."""
    daemon = Daemon(Store(db_path), fake_clock, DaemonConfig(concurrency=8, heartbeat=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    assert daemon.serving.wait(5)
    assert {t.name for t in threading.enumerate()} >= {"flowctl-runner"}
    yield daemon
    daemon.stop(drain=False)
    thread.join(5)
    daemon.store.close()
    assert not thread.is_alive()


def started(
    db_path: Path, clock: FakeClock, target: str, inputs: list[dict[str, object]]
) -> list[str]:
    with Store(db_path) as s:
        return [ops.start(s, target, i, clock=clock).run.run_id for i in inputs]


def finished(db_path: Path, run_ids: list[str]) -> bool:
    with Store(db_path) as s:
        return all(s.get_run(r).status.is_terminal for r in run_ids)


def test_runs_complete_with_every_checkpoint_and_share_commits(
    db_path: Path, fake_clock: FakeClock, flows: str, batched: Daemon
) -> None:
    ids = started(db_path, fake_clock, f"{flows}:three", [{"n": i} for i in range(40)])
    fake_clock.advance(POLL_INTERVAL)
    wait_until(lambda: finished(db_path, ids), timeout=20)
    with Store(db_path) as s:
        for i, rid in enumerate(ids):
            run = s.get_run(rid)
            assert (run.status, run.result) == (RunStatus.COMPLETED, i + 3)
            journal = s.journal(rid)
            assert [journal[k].value for k in sorted(journal)] == [i + 1, i + 2, i + 3]
            assert all(e.state is EntryState.DONE for e in journal.values())
    stats = batched.store.commit_stats()
    # 40 runs x (2 checkpoints + 1 completion) written by handlers, besides claims: with
    # up to 8 handlers per round, far fewer COMMITs than writes.
    assert stats.writes >= 120
    assert stats.commits < stats.writes / 2


def test_the_write_lock_is_free_while_a_rounds_handlers_run_their_python(
    db_path: Path, fake_clock: FakeClock, flows: str, batched: Daemon
) -> None:
    """A run's ending waits for its round's writes rather than taking the write lock at
    once, so the runs after it in the round (and another daemon on the file) find it
    free: they wrote "locked" while an ending held the lock through the round."""
    ids = started(db_path, fake_clock, f"{flows}:prober", [{"path": str(db_path)}] * 8)
    fake_clock.advance(POLL_INTERVAL)
    wait_until(lambda: finished(db_path, ids), timeout=20)
    with Store(db_path) as s:
        assert [s.get_run(r).result for r in ids] == ["free"] * 8


def test_a_step_body_that_waits_does_not_hold_up_the_other_runs(
    db_path: Path, fake_clock: FakeClock, flows: str, batched: Daemon, tmp_path: Path
) -> None:
    marker = str(tmp_path / "marker")
    [waiting] = started(db_path, fake_clock, f"{flows}:waiter", [{"path": marker}])
    fake_clock.advance(POLL_INTERVAL)
    with Store(db_path) as s:
        wait_until(lambda: s.get_run(waiting).status is RunStatus.RUNNING, timeout=5)
    [making] = started(db_path, fake_clock, f"{flows}:maker", [{"path": marker}])
    fake_clock.advance(POLL_INTERVAL)
    wait_until(lambda: finished(db_path, [waiting, making]), timeout=30)
    with Store(db_path) as s:
        assert s.get_run(making).result == "made"
        assert s.get_run(waiting).result == "saw it"


def test_a_steps_prints_and_context_work_on_the_pool_and_inline(
    db_path: Path, fake_clock: FakeClock, flows: str, batched: Daemon
) -> None:
    ids = started(db_path, fake_clock, f"{flows}:talker", [{}, {}, {}])
    fake_clock.advance(POLL_INTERVAL)
    wait_until(lambda: finished(db_path, ids), timeout=20)
    with Store(db_path) as s:
        for rid in ids:
            run = s.get_run(rid)
            assert (run.status, run.result) == (RunStatus.COMPLETED, [rid, rid])
            printed = [c.text for c in s.output(rid)]
            assert printed == ["hello from the step\n"] * 2


def quick() -> int:
    return 1


def slow() -> int:
    return 2


def test_placement_pools_the_unknown_and_the_slow_and_inlines_the_quick() -> None:
    p = Placement()
    assert not p.inline(quick)  # never seen: the pool
    p.observed(quick, INLINE_UNDER / 2, inline=False)
    assert p.inline(quick)  # quick on the pool: inline from now on
    p.observed(slow, INLINE_UNDER * 2, inline=False)
    assert not p.inline(slow)  # not quick enough: the pool still
    p.observed(quick, SLOW_INLINE * 2, inline=True)
    assert not p.inline(quick)  # blocked inline once: the pool for good
    p.observed(quick, INLINE_UNDER / 2, inline=False)
    assert not p.inline(quick)


def test_placement_keys_closures_by_their_code_and_keeps_blocking_bodies_on_the_pool() -> None:
    p = Placement()

    def made(i: int) -> object:
        return lambda: i

    p.observed(made(1), INLINE_UNDER / 2, inline=False)
    assert p.inline(made(2))  # a closure made anew per call is the same code

    def command() -> None:
        return None

    marked = blocking(command)
    p.observed(marked, INLINE_UNDER / 2, inline=False)
    assert not p.inline(marked)

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self) -> int:
            return 3

    odd = Unhashable()
    p.observed(odd, INLINE_UNDER / 2, inline=False)
    assert not p.inline(odd)


@pytest.mark.parametrize(
    ("flags", "said"), [((), "as greenlets on one thread"), (("--threads",), "on threads")]
)
def test_flowctl_daemon_runs_handlers_as_said_and_threads_opts_out(
    tmp_path: Path, flows: str, flags: tuple[str, ...], said: str
) -> None:
    db = tmp_path / "cli.db"
    with Store(db) as s:
        ids = [
            ops.start(s, f"{flows}:three", {"n": i}, clock=SystemClock()).run.run_id
            for i in range(5)
        ]
    proc = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--until-idle", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"(concurrency 64 {said}," in proc.stderr
    with Store(db) as s:
        assert [s.get_run(r).result for r in ids] == [3, 4, 5, 6, 7]


def test_a_wake_that_comes_during_a_round_goes_before_the_handlers_left_in_it(
    db_path: Path,
) -> None:
    """Wakes come first (issue 40, item 3): a handler resting in the runner whose wake
    comes while a round resumes busy handlers (each holding the thread 0.1 s, as a
    saturated daemon's handlers do in turn) is resumed next, not after all of them."""
    clock, order, failures = SystemClock(), list[str](), list[BaseException]()
    rested, gate_up, gate = threading.Event(), threading.Event(), threading.Event()

    def execute(claim: Any, live: Any) -> None:
        if claim.name == "sleeper":
            rests = runner.rests
            assert rests is not None
            until = clock.now() + timedelta(seconds=0.1)
            assert rests.may_rest(until) is not None
            rested.set()
            woke = rests.rest(live, until)
            rests.settled()
            order.append("woke" if woke else "stopped")
        elif claim.name == "gate":  # holds the runner until the busy handlers are queued
            gate_up.set()
            gate.wait(10)
        else:
            time.sleep(0.1)
            order.append(claim.name)

    with Store(db_path) as store:
        runner = BatchRunner(store, execute, ended=lambda: None, failed=failures.append)
        runner.allow_rests(clock, Slots(8), lease=30, heartbeat=1)
        runner.start()
        runner.submit(*job("sleeper"))
        assert rested.wait(5)
        runner.submit(*job("gate"))
        assert gate_up.wait(5)
        busy = [f"busy{i}" for i in range(10)]
        for name in busy:
            runner.submit(*job(name))
        gate.set()  # the busy ones make one round of 1 s; the wake is due 0.1 s in
        wait_until(lambda: len(order) == len(busy) + 1)
        runner.close()
        wait_until(lambda: "flowctl-runner" not in {t.name for t in threading.enumerate()})
    assert not failures
    assert sorted(order) == sorted([*busy, "woke"])
    # Before, a wake waited for the round: it was resumed after every busy handler.
    assert order.index("woke") < order.index("busy9"), order


def job(name: str, *, wakes: bool = False) -> tuple[Any, Any]:
    """A claim and its live run as the runner sees them (it reads no more of either)."""
    claim = SimpleNamespace(name=name, run=SimpleNamespace(workflow="w"), wakes=wakes)
    return claim, SimpleNamespace(run_id=name)


def test_a_claimed_wake_starts_before_the_fresh_claims_that_came_with_it(db_path: Path) -> None:
    """Wakes come first (issue 40, item 3) for a sleeper parked in the database too: its
    claim (`Claim.wakes`) starts before fresh claims submitted before it, which would
    otherwise each run a turn first, as in a daemon saturated with fresh work."""
    order, failures = list[str](), list[BaseException]()
    gate_up, gate = threading.Event(), threading.Event()

    def execute(claim: Any, live: Any) -> None:
        if claim.name == "gate":  # holds the runner while the others are submitted
            gate_up.set()
            gate.wait(10)
        else:
            order.append(claim.name)

    with Store(db_path) as store:
        runner = BatchRunner(store, execute, ended=lambda: None, failed=failures.append)
        runner.start()
        runner.submit(*job("gate"))
        assert gate_up.wait(5)
        fresh = [f"fresh{i}" for i in range(5)]
        for name in fresh:
            runner.submit(*job(name))
        runner.submit(*job("woke", wakes=True))
        runner.submit(*job("late"))
        gate.set()
        wait_until(lambda: len(order) == len(fresh) + 2)
        runner.close()
        wait_until(lambda: "flowctl-runner" not in {t.name for t in threading.enumerate()})
    assert not failures
    # Before, claims started in the order they came: the wake after the five fresh ones.
    assert order == ["woke", *fresh, "late"]


class CommitBreaks(Store):
    """A store whose write round breaks when committed: what a bug in the runner's round
    looks like."""

    @contextmanager
    def write_round(self, wait: Callable[[], None]) -> Iterator[WriteRound]:
        with super().write_round(wait) as writes:

            def broken() -> int:
                raise RuntimeError("the round broke")

            writes.commit = broken  # type: ignore[method-assign]
            yield writes


def test_a_broken_runner_stops_the_daemon_and_hands_its_runs_back(
    db_path: Path, fake_clock: FakeClock, flows: str
) -> None:
    [rid] = started(db_path, fake_clock, f"{flows}:three", [{"n": 1}])
    daemon = Daemon(CommitBreaks(db_path), fake_clock, DaemonConfig(concurrency=4, heartbeat=1))
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(daemon.run_forever()), daemon=True)
    thread.start()
    fake_clock.advance(POLL_INTERVAL)
    thread.join(10)
    daemon.store.close()
    assert codes == [1]  # stopped, not left extending the lease of a handler that never ends
    with Store(db_path) as s:
        run = s.get_run(rid)
        assert run.status is RunStatus.RUNNING  # handed back, nothing invented
        assert run.run_at is not None and run.run_at <= fake_clock.now()  # due for reclaim
        assert [e.type for e in s.timeline(rid)][-1] == "released"


HOGS = """
import time

from flowctl import workflow


@workflow
def hog(ctx):
    time.sleep(0.2)  # slow work in the handler itself, outside any step
    return ctx.step("after", lambda: "done")
"""


def test_a_handler_holding_the_runner_is_named_once_in_the_log(
    db_path: Path,
    fake_clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(BatchRunner, "hold_warn", 0.1)
    hogs = tmp_path / "hogs.py"
    hogs.write_text(HOGS)
    ids = started(db_path, fake_clock, f"{hogs}:hog", [{}, {}])
    daemon = Daemon(Store(db_path), fake_clock, DaemonConfig(concurrency=4, heartbeat=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    with caplog.at_level("WARNING", logger="flowctl.daemon.batch"):
        thread.start()
        fake_clock.advance(POLL_INTERVAL)
        wait_until(lambda: finished(db_path, ids), timeout=20)
        daemon.stop(drain=False)
        thread.join(5)
    daemon.store.close()
    said = [m for m in caplog.messages if "held the daemon's batch runner" in m]
    assert len(said) == 1  # two runs held it; the workflow is named once
    assert "workflow 'hog'" in said[0] and "--threads" in said[0]


def test_a_real_daemon_runs_every_durable_call_through_its_batch_runner(
    db_path: Path, tmp_path: Path
) -> None:
    """Steps (one printing), a durable sleep, now/uuid/version, publish, a child run and a
    signal, in runs that share rounds; and values that are not JSON, refused."""
    clock = SystemClock()
    target = "tests/workers_flows.py"
    with Store(db_path) as s:
        ids = [
            ops.start(s, f"{target}:everything", {"x": i}, clock=clock, cwd=str(ROOT)).run.run_id
            for i in range(6)
        ]
        bad = ops.start(s, f"{target}:not_json_result", {}, clock=clock, cwd=str(ROOT))
    proc = logged_daemon(db_path, tmp_path / "daemon.log", "--workers", "1")
    try:
        with Store(db_path) as s:
            wait_until(lambda: all(s.get_run(r).status is RunStatus.WAITING for r in ids), 30)
            for i, run_id in enumerate(ids):
                ops.send_signal(s, run_id, "go", {"i": i}, clock=clock)
            wait_until(lambda: all(s.get_run(r).status.is_terminal for r in ids), timeout=30)
            wait_until(lambda: s.get_run(bad.run.run_id).status.is_terminal, timeout=30)
            runs = [s.get_run(r) for r in ids]
            dead = s.get_run(bad.run.run_id)
            printed = "".join(c.text for c in s.output(ids[0]))
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    for i, run in enumerate(runs):
        assert run.status is RunStatus.COMPLETED, run.error
        result = run.result
        assert result["a"] == i + 1 and result["doubled"] == 2 * (i + 1)
        assert result["version"] == 2 and result["signal"] == {"i": i}
        assert result["pid"] == proc.pid  # in the daemon's own process, not a worker
    assert "step says hello" in printed
    assert dead.status is RunStatus.DEAD and dead.error is not None
    assert "not JSON-serialisable" in dead.error["message"]
    text = (tmp_path / "daemon.log").read_text()
    assert "as greenlets on one thread" in text and "Traceback" not in text


def test_a_postgresql_daemon_runs_its_handlers_on_the_batch_runner_sharing_commits(
    pg_url: str, fake_clock: FakeClock, flows: str
) -> None:
    """The batch runner is not SQLite's: on PostgreSQL the daemon picks it too (the store
    offers the write round through its protocol), and a round's checkpoints share COMMITs."""
    from flowctl.daemon.executor import Greenlets
    from flowctl.store.postgres.store import PostgresStore

    daemon = Daemon(PostgresStore(pg_url), fake_clock, DaemonConfig(concurrency=8, heartbeat=1))
    assert isinstance(daemon.executor, Greenlets)
    with PostgresStore(pg_url) as observer:
        ids = [
            ops.start(observer, f"{flows}:three", {"n": i}, clock=fake_clock).run.run_id
            for i in range(40)
        ]
        thread = threading.Thread(target=daemon.run_forever, daemon=True)
        thread.start()
        try:
            assert daemon.serving.wait(10)
            assert "flowctl-runner" in {t.name for t in threading.enumerate()}
            fake_clock.advance(POLL_INTERVAL)
            done = lambda: all(observer.get_run(r).status.is_terminal for r in ids)  # noqa: E731
            wait_until(done, timeout=30)
            for i, rid in enumerate(ids):
                run = observer.get_run(rid)
                assert (run.status, run.result) == (RunStatus.COMPLETED, i + 3)
                journal = observer.journal(rid)
                assert [journal[k].value for k in sorted(journal)] == [i + 1, i + 2, i + 3]
        finally:
            daemon.stop(drain=False)
            thread.join(10)
    stats = daemon.store.commit_stats()
    daemon.store.close()
    assert not thread.is_alive()
    assert stats.writes >= 120
    assert stats.commits < stats.writes / 2


def test_the_next_run_of_a_key_is_claimed_in_the_runners_round_not_by_the_loop(
    db_path: Path, fake_clock: FakeClock, flows: str, batched: Daemon
) -> None:
    """Issue 37: a run of a key that ends makes the key's next held run due, and the batch
    runner claims it with its next round's writes; the loop is not woken for it (on this
    fake clock it waits, so every claim after the first is the runner's). The key's limit
    holds throughout: each run starts after the one before it ended."""
    by_thread: list[tuple[str, int]] = []
    claim = batched.claim

    def spy(now: datetime, limit: int) -> list[Claim]:
        got = claim(now, limit)
        by_thread.append((threading.current_thread().name, len(got)))
        return got

    batched.claim = spy  # type: ignore[method-assign]
    ids = started(
        db_path, fake_clock, f"{flows}:keyed", [{"user": "zed", "n": i} for i in range(6)]
    )
    fake_clock.advance(POLL_INTERVAL)
    wait_until(lambda: finished(db_path, ids), timeout=20)
    claimed = {name: sum(n for t, n in by_thread if t == name) for name, _ in by_thread}
    runner = claimed.pop("flowctl-runner", 0)
    assert (runner, list(claimed.values())) == (5, [1])  # the loop (the fixture's thread): 1
    with Store(db_path) as s:
        runs = [s.get_run(r) for r in ids]
    assert [r.result for r in runs] == [i + 1 for i in range(6)]
    for before, after in itertools.pairwise(runs):
        assert before.finished_at is not None and after.started_at is not None
        assert after.started_at >= before.finished_at


def test_slots_reserved_by_one_claimer_are_not_free_to_another() -> None:
    """The loop and the batch runner both claim for one daemon's slots: what one counts on
    is not free to the other, so together they never take more than `concurrency`."""
    slots = Slots(4)
    assert slots.reserve(3) == 3
    assert slots.free() == 1
    assert slots.reserve(8) == 1  # only what is left
    assert slots.reserve(1) == 0
    slots.unreserve(3)
    assert slots.free() == 3
    slots.unreserve(1)
    assert slots.free() == 4


def test_a_claim_in_the_round_as_the_daemon_stops_hands_its_runs_back(
    db_path: Path, fake_clock: FakeClock, flows: str
) -> None:
    """The runner claims on its own thread; the daemon's stop closes the slots and hands
    back what they hold on another. A run claimed in that window is handed back by the
    claim itself, due now for any daemon, not left to wait out its lease."""
    (rid,) = started(db_path, fake_clock, f"{flows}:three", [{"n": 1}])
    with Store(db_path) as store:
        daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=8, lease=30))
        daemon.timers.refill()
        daemon.slots.close()  # the stop, between the claim's start and its slots
        assert daemon.claim_in_round(True)
        run = store.get_run(rid)
        assert (run.status, run.lease_owner) == (RunStatus.RUNNING, None)
        assert run.run_at is not None and run.run_at <= fake_clock.now()
        assert [e.type for e in store.timeline(rid)][-2:] == ["claimed", "released"]
        assert len(daemon.slots) == 0
