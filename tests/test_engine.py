"""Whole runs on a FakeClock: complete, fail, retry, dead-letter, redrive, deadline,
execution timeout, cancellation, and late writes from a handler that lost its lease.

Step bodies in durable_flows count their calls; HOOKS run inside a step while the
handler is live, which is where a heartbeat delivers deadlines and cancellations.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import durable_flows as flows
import pytest
from durable_flows import CALLS, HOOKS, KNOBS, SEEN, calls, events, start
from helpers import wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import InvalidStateError, UsageError
from flowctl.ids import HOST, make_owner, new_run_id, proc_start
from flowctl.model import EntryState, RunStatus
from flowctl.runtime.engine import Engine, Outcome
from flowctl.store import NewRun
from flowctl.store.sqlite import SqliteStore as Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def error_of(store: Store, run_id: str) -> dict[str, object]:
    """The run's recorded error without its (long, path-dependent) traceback."""
    error = store.get_run(run_id).error
    assert error is not None
    return {k: v for k, v in error.items() if k not in ("traceback", "py_type", "args")}


# ---------------------------------------------------------------- the engine on its own


def test_execute_returns_the_outcome_of_one_claimed_run(
    store: Store, fake_clock: FakeClock, engine: Engine
) -> None:
    rid = start(store, fake_clock, "two_steps", {"x": 1})
    claims, ended = store.claim_due("tester/1/1", T0, T0 + 15 * SECOND, 10)
    assert (len(claims), ended) == (1, [])
    outcome = engine.execute(claims[0])
    assert outcome == Outcome(rid, RunStatus.COMPLETED, result={"a": 2, "b": 20})
    run = store.get_run(rid)
    assert (run.status, run.lease_owner, run.finished_at) == (RunStatus.COMPLETED, None, T0)


def test_a_target_that_no_longer_loads_waits_for_it_without_spending_attempts(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    """A workflow that does not load is the code's fault, not the run's: the same attempt
    is tried again, 1 s doubling, however few attempts the run has (here one), and each
    failure is in its timeline."""
    rid = new_run_id()
    store.create_run(
        NewRun(
            rid, "gone", "durable_flows:gone", "python", {}, cwd=flows.TESTS_DIR, max_attempts=1
        ),
        T0,
    )
    for failures, wait in ((1, 1), (2, 2), (3, 4)):
        daemon.tick()
        run = store.get_run(rid)
        assert (run.status, run.attempt) == (RunStatus.QUEUED, 1)
        assert run.run_at == fake_clock.now() + wait * SECOND
        error = error_of(store, rid)
        assert (error["type"], error["kind"]) == ("TargetError", "load")
        assert error["load_failures"] == failures
        assert str(error["message"]).startswith("module durable_flows has no function 'gone'")
        fake_clock.advance(wait * SECOND)
    assert [e.type for e in store.timeline(rid)].count("load failed") == 3


def test_a_target_that_never_loads_ends_at_its_deadline(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = new_run_id()
    store.create_run(
        NewRun(
            rid,
            "gone",
            "durable_flows:gone",
            "python",
            {},
            cwd=flows.TESTS_DIR,
            deadline=T0 + 10 * SECOND,
        ),
        T0,
    )
    while store.get_run(rid).status is RunStatus.QUEUED:
        daemon.tick()
        fake_clock.advance(SECOND)
        assert fake_clock.now() < T0 + 20 * SECOND
    assert store.get_run(rid).status is RunStatus.DEAD
    assert error_of(store, rid)["kind"] == "deadline"


# ---------------------------------------------------------------- a new attempt


def test_a_new_attempt_truncates_the_journal_at_the_first_step_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:b"] = 1
    rid = start(store, fake_clock, "three_steps")
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt, run.run_at) == (RunStatus.QUEUED, 2, T0 + SECOND)
    assert calls(store, rid) == [(0, "step", "a", "done")]
    assert error_of(store, rid) == {
        "type": "RuntimeError",
        "message": "b failed on call 1",
        "kind": "raised",
        "attempt": 1,
    }
    fake_clock.advance(SECOND)
    daemon.tick()
    assert store.get_run(rid).result == ["A", "B", "C"]
    assert CALLS == {"a": 1, "b": 2, "c": 1}


def test_truncation_starts_at_the_first_error_even_if_the_workflow_caught_it(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:b"] = True
    KNOBS["fail:d"] = 1
    rid = start(store, fake_clock, "catch_then_fail")
    daemon.tick()
    assert calls(store, rid) == [(0, "step", "a", "done")]
    fake_clock.advance(SECOND)
    daemon.tick()
    assert store.get_run(rid).result == "done"
    assert CALLS == {"a": 1, "b": 2, "c": 2, "d": 2}
    assert calls(store, rid) == [
        (0, "step", "a", "done"),
        (1, "step", "b", "error"),
        (2, "step", "c", "done"),
        (3, "step", "d", "done"),
    ]


# ---------------------------------------------------------------- per-step retries


def test_a_step_retries_after_a_durable_backoff_holding_no_worker(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:flaky"] = 2
    rid = start(store, fake_clock, "retrying")
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.run_at, run.attempt) == (RunStatus.QUEUED, T0 + 10 * SECOND, 1)
    assert (run.lease_owner, run.lease_until) == (None, None)
    entry = store.journal(rid)[0]
    assert (entry.state, entry.tries, entry.wake_at) == (
        EntryState.RETRYING,
        1,
        T0 + 10 * SECOND,
    )
    assert entry.value["message"] == "flaky failed on call 1"
    assert store.timeline(rid)[-1].type == "step retry scheduled"
    assert store.timeline(rid)[-1].data == {
        "name": "flaky",
        "index": 0,
        "try": 2,
        "at": "2026-03-29T00:59:10.000000+00:00",  # stored event data keeps its spelling
        "error": "RuntimeError: flaky failed on call 1",
    }
    fake_clock.advance(10 * SECOND - timedelta(microseconds=1))
    assert daemon.tick() == 0
    fake_clock.advance(timedelta(microseconds=1))
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.run_at) == (RunStatus.QUEUED, T0 + 30 * SECOND)  # 10s, then 20s
    assert store.journal(rid)[0].tries == 2
    fake_clock.advance(20 * SECOND)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    entry = store.journal(rid)[0]
    assert (entry.state, entry.tries, entry.value) == (EntryState.DONE, 3, "ok")
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == "ok"
    assert CALLS == {"flaky": 3, "after": 1}  # the replay after the sleep did not re-run it
    assert store.get_run(rid).attempt == 1


def test_a_step_that_exhausts_its_retries_fails_the_attempt(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:flaky"] = True
    rid = start(store, fake_clock, "retrying")
    daemon.tick()
    fake_clock.advance(10 * SECOND)
    daemon.tick()
    fake_clock.advance(20 * SECOND)
    daemon.tick()
    assert CALLS == {"flaky": 3}
    run = store.get_run(rid)
    assert (run.status, run.attempt, run.run_at) == (
        RunStatus.QUEUED,
        2,
        T0 + 31 * SECOND,
    )
    assert error_of(store, rid)["message"] == "flaky failed on call 3"
    assert store.journal(rid) == {}  # the new attempt starts the step's tries afresh


@pytest.mark.parametrize(
    ("exc", "status", "entry_state"),
    [(KeyError, RunStatus.DEAD, "error"), (RuntimeError, RunStatus.QUEUED, "retrying")],
)
def test_non_retryable_step_errors_fail_at_once(
    store: Store,
    fake_clock: FakeClock,
    daemon: Daemon,
    exc: type[Exception],
    status: RunStatus,
    entry_state: str,
) -> None:
    KNOBS["fail:picky"] = True
    KNOBS["exc:picky"] = exc
    rid = start(store, fake_clock, "picky_flow")
    daemon.tick()
    run = store.get_run(rid)
    assert CALLS == {"picky": 1}
    assert run.status is status
    if entry_state == "error":  # listed as non-retryable: no retry at all, the run is dead
        assert (run.attempt, run.run_at) == (1, None)
        assert calls(store, rid) == [(0, "step", "picky", "error")]
        assert error_of(store, rid)["type"] == "KeyError"
        assert run.error is not None and run.error["kind"] == "non_retryable"
    else:  # retried by the step's policy, in the same attempt
        assert (run.attempt, run.run_at) == (1, T0 + 10 * SECOND)
        assert calls(store, rid) == [(0, "step", "picky", "retrying")]


# ---------------------------------------------------------------- per-run attempts


def test_a_run_that_exhausts_its_attempts_is_dead_lettered_with_its_last_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:b"] = True
    rid = start(store, fake_clock, "three_steps")
    daemon.tick()
    assert store.get_run(rid).run_at == T0 + SECOND
    fake_clock.advance(SECOND)
    daemon.tick()
    assert store.get_run(rid).run_at == T0 + 3 * SECOND
    fake_clock.advance(2 * SECOND)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt, run.run_at) == (RunStatus.DEAD, 3, None)
    assert run.finished_at == T0 + 3 * SECOND
    assert error_of(store, rid) == {
        "type": "RuntimeError",
        "message": "b failed on call 3",
        "kind": "raised",
        "attempt": 3,
        "dead_reason": "attempts exhausted (3/3)",
    }
    assert run.error is not None
    traceback = run.error["traceback"]
    assert "durable_flows.py" in traceback
    assert "durable_flows.py" in traceback.splitlines()[1]  # from the user's frame on
    assert traceback.splitlines()[-1] == "RuntimeError: b failed on call 3"
    assert CALLS == {"a": 1, "b": 3}
    assert events(store, rid) == [
        "created",
        "claimed",
        "step failed",
        "failed",
        "retry scheduled",
        "woke",
        "claimed",
        "step failed",
        "failed",
        "retry scheduled",
        "woke",
        "claimed",
        "step failed",
        "failed",
        "dead-lettered",
    ]
    assert store.timeline(rid)[-1].data == {
        "kind": "raised",
        "error": "RuntimeError: b failed on call 3",
    }


def test_run_backoff_doubles_from_one_second_and_is_capped_at_ten_minutes(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:a"] = True
    rid = start(store, fake_clock, "two_steps", max_attempts=12)
    waits = []
    for _ in range(11):
        daemon.tick()
        run = store.get_run(rid)
        assert run.status is RunStatus.QUEUED
        assert run.run_at is not None
        wait = run.run_at - fake_clock.now()
        waits.append(wait.total_seconds())
        fake_clock.advance(wait)
    daemon.tick()
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600]
    assert store.get_run(rid).status is RunStatus.DEAD
    assert CALLS == {"a": 12}


def test_a_workflow_can_set_its_own_attempts_and_backoff(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:a"] = True
    rid = start(store, fake_clock, "custom_backoff")
    assert store.get_run(rid).max_attempts == 2
    daemon.tick()
    assert store.get_run(rid).run_at == T0 + 30 * SECOND
    fake_clock.advance(30 * SECOND)
    daemon.tick()
    assert error_of(store, rid)["dead_reason"] == "attempts exhausted (2/2)"


# ---------------------------------------------------------------- redrive


def test_redrive_gives_a_fresh_budget_and_keeps_completed_checkpoints(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:b"] = True
    rid = start(store, fake_clock, "three_steps", max_attempts=1)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.DEAD
    assert calls(store, rid) == [(0, "step", "a", "done"), (1, "step", "b", "error")]
    fake_clock.advance(HOUR)
    run = ops.redrive(store, rid, clock=fake_clock, by="ana")
    assert (run.status, run.attempt, run.run_at, run.finished_at) == (
        RunStatus.QUEUED,
        1,
        T0 + HOUR,
        None,
    )
    assert calls(store, rid) == [(0, "step", "a", "done")]
    last = store.timeline(rid)[-1]
    assert (last.type, last.at, last.data) == ("redriven", T0 + HOUR, {"by": "ana", "was": "dead"})
    KNOBS["fail:b"] = False
    daemon.tick()
    assert store.get_run(rid).result == ["A", "B", "C"]
    assert CALLS == {"a": 1, "b": 2, "c": 1}


def test_redrive_with_no_deadline_clears_it_and_keeps_the_recorded_sleep(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper", deadline=T0 + 30 * 60 * SECOND)
    daemon.tick()
    fake_clock.advance(30 * 60 * SECOND)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.DEAD
    with pytest.raises(UsageError, match="is past its deadline"):  # never silently dropped
        ops.redrive(store, rid, clock=fake_clock, by="ana")
    run = ops.redrive(store, rid, clock=fake_clock, by="ana", no_deadline=True)
    assert run.deadline is None
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.run_at) == (RunStatus.SLEEPING, T0 + HOUR)  # the recorded wake_at
    fake_clock.advance(30 * 60 * SECOND)
    daemon.tick()
    assert store.get_run(rid).result == 2
    assert CALLS == {"before": 1, "after": 1}


def test_a_second_wake_of_a_due_sleeper_writes_nothing(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    woken = ops.wake_now(store, rid, clock=fake_clock, by="ana")
    timeline = store.timeline(rid)
    assert [e.type for e in timeline].count("woken by operator") == 1
    fake_clock.advance(SECOND)
    assert ops.wake_now(store, rid, clock=fake_clock, by="ana") == store.get_run(rid) == woken
    assert store.timeline(rid) == timeline
    daemon.tick()
    assert store.get_run(rid).result == 2


def test_redrive_of_a_cancelled_run_drops_the_cancel_as_its_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    ops.cancel(store, rid, clock=fake_clock, reason="not now", by="ana")
    daemon.tick()
    cancelled = store.get_run(rid)
    assert cancelled.status is RunStatus.CANCELLED and cancelled.error is not None
    run = ops.redrive(store, rid, clock=fake_clock, by="ana")
    assert (run.status, run.error) == (RunStatus.QUEUED, None)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING


@pytest.mark.parametrize("status", ["completed", "sleeping"])
def test_only_dead_or_cancelled_runs_can_be_redriven(
    store: Store, fake_clock: FakeClock, daemon: Daemon, status: str
) -> None:
    rid = start(store, fake_clock, "two_steps" if status == "completed" else "sleeper")
    daemon.tick()
    before = store.get_run(rid)
    with pytest.raises(InvalidStateError) as exc:
        ops.redrive(store, rid, clock=fake_clock, by="ana")
    assert str(exc.value) == f"run {rid} is {status}: only dead or cancelled runs can be redriven"
    assert store.get_run(rid) == before


# ---------------------------------------------------------------- deadlines


def test_a_deadline_passing_while_sleeping_dead_letters_without_waking_the_handler(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    deadline = T0 + 30 * 60 * SECOND
    rid = start(store, fake_clock, "sleeper", deadline=deadline)
    daemon.tick()
    assert store.get_run(rid).run_at == deadline  # due at the deadline, not the 1h wake
    fake_clock.advance(30 * 60 * SECOND)
    note = ops.show_run(store, rid, clock=fake_clock).notes
    assert note == [
        "deadline passed at 2026-03-29 01:29:00 UTC (now);"
        " the next daemon to run on this database dead-letters it"
    ]
    # With a live daemon serving the database, show says that daemon acts on it.
    store.register_daemon(
        make_owner(), HOST, os.getpid(), proc_start(os.getpid()), fake_clock.now(), {}
    )
    (served,) = ops.show_run(store, rid, clock=fake_clock).notes
    assert served.endswith("; the daemon dead-letters it at its next claim"), served
    assert daemon.tick() == 0  # ended by the claim, no handler ran
    run = store.get_run(rid)
    assert (run.status, run.attempt, run.finished_at) == (RunStatus.DEAD, 1, deadline)
    assert error_of(store, rid) == {
        "type": "DeadlineExceededError",
        "kind": "deadline",
        "message": "deadline 2026-03-29 01:29:00 UTC passed",
    }
    assert CALLS == {"before": 1}
    assert events(store, rid)[-2:] == ["sleep started", "dead-lettered"]


def test_a_deadline_passing_during_a_live_handler_aborts_it_at_its_next_durable_call(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "busy", deadline=T0 + 60 * SECOND)

    def past_the_deadline() -> None:
        fake_clock.advance(90 * SECOND)
        daemon.heartbeat_once()

    HOOKS["work"] = past_the_deadline
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt) == (RunStatus.DEAD, 1)  # never retried
    assert error_of(store, rid) == {
        "type": "DeadlineExceededError",
        "kind": "deadline",
        # one text per ending: the same as a claim past the deadline records
        "message": "deadline 2026-03-29 01:00:00 UTC passed",
    }
    assert CALLS == {"work": 1}
    assert calls(store, rid) == [(0, "step", "work", "done")]


def test_a_handler_told_of_its_deadline_that_returns_anyway_is_still_dead(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "one_step", deadline=T0 + 60 * SECOND)

    def past_the_deadline() -> None:
        fake_clock.advance(90 * SECOND)
        daemon.heartbeat_once()

    HOOKS["work"] = past_the_deadline
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.DEAD, None)
    assert error_of(store, rid)["kind"] == "deadline"


# ---------------------------------------------------------------- execution timeout


def advance_in(step: str, clock: FakeClock, seconds: float) -> None:
    HOOKS[step] = lambda: clock.advance(seconds) and None


def test_time_asleep_spends_none_of_the_execution_budget(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "busy_sleeper", timeout="10s")
    advance_in("work 1", fake_clock, 6)
    advance_in("work 2", fake_clock, 3)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.exec_spent, run.timeout) == (RunStatus.SLEEPING, 6.0, 10.0)
    fake_clock.advance(timedelta(days=1))
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.exec_spent) == (RunStatus.COMPLETED, 9.0)


def test_an_exhausted_budget_fails_the_attempt_as_a_timeout_and_retries(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "busy_sleeper", timeout="10s")
    advance_in("work 1", fake_clock, 6)
    advance_in("work 2", fake_clock, 5)
    daemon.tick()
    fake_clock.advance(timedelta(days=1))
    daemon.tick()  # work 2 spends the rest; the call after it is refused
    run = store.get_run(rid)
    now = T0 + timedelta(days=1, seconds=11)
    assert (run.status, run.attempt, run.run_at, run.exec_spent) == (
        RunStatus.QUEUED,
        2,
        now + SECOND,
        0.0,
    )
    assert error_of(store, rid) == {
        "type": "ExecutionTimeoutError",
        "kind": "timeout",
        # one text per ending: the same as a claim of a run whose dead worker spent it
        "message": "attempt 1 used its execution budget of 10s",
        "attempt": 1,
    }
    timed_out = [e for e in store.timeline(rid) if e.type in ("timed out", "failed")]
    assert [(e.type, e.data["kind"]) for e in timed_out] == [("timed out", "timeout")]
    del HOOKS["work 2"]
    fake_clock.advance(SECOND)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.COMPLETED
    assert CALLS == {"work 1": 1, "work 2": 1, "work 3": 1}  # journaled steps did not re-run


def test_a_timeout_on_the_last_attempt_dead_letters_with_kind_timeout(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "busy", timeout="5s", max_attempts=1)
    advance_in("work", fake_clock, 5)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.DEAD
    error = error_of(store, rid)
    assert (error["kind"], error["dead_reason"]) == ("timeout", "attempts exhausted (1/1)")
    assert CALLS == {"work": 1}


def test_execution_time_is_persisted_at_each_heartbeat(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "busy", timeout="60s")

    def beat() -> None:
        fake_clock.advance(4)
        daemon.heartbeat_once()
        run = store.get_run(rid)
        flows.see("beat", (run.status, run.exec_spent, run.lease_until))

    HOOKS["work"] = beat
    daemon.tick()
    assert SEEN["beat"] == [(RunStatus.RUNNING, 4.0, T0 + 19 * SECOND)]
    assert store.get_run(rid).status is RunStatus.COMPLETED


def test_the_budget_spent_before_a_crash_counts_after_the_reclaim(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "busy", timeout="10s")
    (claim,), _ = store.claim_due("elsewhere/1/1/0000", T0, T0 + 15 * SECOND, 1)
    fake_clock.advance(8)
    store.heartbeat("elsewhere/1/1/0000", [(claim.lease, 8.0)], T0 + 23 * SECOND, T0 + 8 * SECOND)
    fake_clock.advance(15)  # the worker died; its lease lapses
    advance_in("work", fake_clock, 3)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 2)
    assert error_of(store, rid)["kind"] == "timeout"
    assert CALLS == {"work": 1}


# ---------------------------------------------------------------- cancellation


@pytest.mark.parametrize(
    ("flow", "status"),
    [
        ("two_steps", RunStatus.QUEUED),
        ("sleeper", RunStatus.SLEEPING),
        ("waiter", RunStatus.WAITING),
    ],
)
def test_cancelling_a_run_that_is_not_running_ends_it_at_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon, flow: str, status: RunStatus
) -> None:
    rid = start(store, fake_clock, flow)
    if status is not RunStatus.QUEUED:
        daemon.tick()
    assert store.get_run(rid).status is status
    fake_clock.advance(60 * SECOND)
    run = ops.cancel(store, rid, clock=fake_clock, reason="no longer needed", by="ana")
    assert (run.status, run.run_at, run.finished_at) == (
        RunStatus.CANCELLED,
        None,
        T0 + 60 * SECOND,
    )
    assert run.error == {
        "type": "Cancelled",
        "kind": "cancelled",
        "message": "no longer needed",
        "by": "ana",
    }
    fake_clock.advance(timedelta(days=1))
    assert daemon.tick() == 0
    assert events(store, rid)[-1] == "cancelled"


def test_a_running_handler_learns_of_a_cancel_at_the_next_heartbeat(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "cooperative")

    def cancel_then_beat() -> None:
        run = ops.cancel(store, rid, clock=fake_clock, reason="stop", by="ana")
        flows.see("requested", (run.status, run.cancel_requested))
        flows.see("cancelled", flows.CAPTURED[0].cancelled)  # not told yet
        daemon.heartbeat_once()

    HOOKS["work"] = cancel_then_beat
    daemon.tick()
    assert SEEN["requested"] == [(RunStatus.RUNNING, True)]
    assert SEEN["cancelled"] == [False, True]
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.CANCELLED, None)
    assert error_of(store, rid) == {  # who asked, recorded when the handler stopped
        "type": "Cancelled", "kind": "cancelled", "message": "stop", "by": "ana",
    }  # fmt: skip
    assert events(store, rid)[-2:] == ["cancel requested", "cancelled"]
    assert store.journal(rid) == {}  # ctx.check() inside the step: nothing recorded


def test_a_handler_that_returns_after_being_told_ends_cancelled(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "returns_when_cancelled")

    def cancel_then_beat() -> None:
        ops.cancel(store, rid, clock=fake_clock, by="ana")
        daemon.heartbeat_once()

    HOOKS["work"] = cancel_then_beat
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.CANCELLED, None)
    # no reason given: the one default text, as a cancel that ends a run at once records
    assert error_of(store, rid)["message"] == "cancelled by operator"


def test_a_handler_ignoring_a_cancel_runs_until_its_lease_lapses_and_its_late_write_is_refused(
    store: Store, db_path: Path, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "blocking")
    release = threading.Event()
    HOOKS["block"] = lambda: release.wait(10) and None
    worker = threading.Thread(target=daemon.tick)
    worker.start()
    try:
        wait_until(lambda: CALLS["block"] == 1, timeout=5)
        with Store(db_path) as other:
            run = ops.cancel(other, rid, clock=fake_clock, by="ana")
            assert (run.status, run.cancel_requested) == (RunStatus.RUNNING, True)
            daemon.heartbeat_once()  # told; the step body does not look
            fake_clock.advance(15 * SECOND - timedelta(microseconds=1))
            second = Daemon(other, fake_clock, DaemonConfig(lease=15, heartbeat=1))
            assert second.tick() == 0
            assert other.get_run(rid).status is RunStatus.RUNNING  # lease still held
            fake_clock.advance(timedelta(microseconds=1))
            assert second.tick() == 0
            assert other.get_run(rid).status is RunStatus.CANCELLED
    finally:
        release.set()
        worker.join(10)
    assert not worker.is_alive()
    run = store.get_run(rid)
    assert run.status is RunStatus.CANCELLED
    assert store.journal(rid) == {}  # the step's late result was refused
    assert CALLS == {"block": 1}
    assert "completed" not in events(store, rid)


def test_a_handler_that_lost_its_lease_cannot_overwrite_the_newer_run(
    store: Store, db_path: Path, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "blocking")
    release = threading.Event()
    HOOKS["block"] = lambda: (CALLS["block"] == 1 and release.wait(10)) and None
    worker = threading.Thread(target=daemon.tick)
    worker.start()
    try:
        wait_until(lambda: CALLS["block"] == 1, timeout=5)
        fake_clock.advance(16 * SECOND)  # no heartbeat: the first worker's lease lapses
        with Store(db_path) as other:
            second = Daemon(other, fake_clock, DaemonConfig(lease=15, heartbeat=1))
            assert second.tick() == 1
            assert other.get_run(rid).result == "call 2"
    finally:
        release.set()
        worker.join(10)
    run = store.get_run(rid)
    assert (run.status, run.result, run.fence, run.attempt) == (
        RunStatus.COMPLETED,
        "call 2",
        2,
        1,
    )
    assert store.journal(rid)[0].value == "call 2"
    assert CALLS == {"block": 2, "after": 1}
    assert events(store, rid).count("completed") == 1
    assert "reclaimed" in events(store, rid)


# ---------------------------------------------------------------- JSON only


def test_a_step_result_that_is_not_json_fails_the_step_with_a_clear_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "not_json", max_attempts=1)
    daemon.tick()
    message = (
        "the result of step 'obj' is not JSON-serialisable (Object of type set is not JSON"
        " serializable); return str, int, float, bool, None, lists and dicts of those"
    )
    assert error_of(store, rid) == {
        "type": "SerializationError",
        "message": message,
        "kind": "non_retryable",
        "attempt": 1,
        "non_retryable": True,
        "dead_reason": "not retried: no retry can fix this error",
    }
    entry = store.journal(rid)[0]
    assert (entry.state, entry.value["type"], entry.value["message"]) == (
        EntryState.ERROR,
        "SerializationError",
        message,
    )


def test_a_workflow_result_that_is_not_json_fails_the_attempt(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "not_json_result", max_attempts=1)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.DEAD, None)
    assert error_of(store, rid)["message"] == (
        "the workflow's result is not JSON-serialisable (Object of type datetime is not JSON"
        " serializable); return str, int, float, bool, None, lists and dicts of those"
    )


# ---------------------------------------------------------------- child runs


def test_a_child_run_is_started_once_and_its_result_journaled_in_the_parent(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "parent")
    assert daemon.tick() == 3  # parent suspends, child completes, parent wakes and completes
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.COMPLETED, {"a": 2, "b": 20})
    (child,) = [r for r in store.list_runs() if r.run_id != rid]
    assert (child.parent_run_id, child.key, child.status) == (
        rid,
        f"child:{rid}:0",
        RunStatus.COMPLETED,
    )
    assert calls(store, rid) == [(0, "step", "workflow durable_flows:two_steps", "done")]
    assert CALLS == {"a": 1, "b": 1}


def test_a_child_that_dies_raises_its_error_in_the_parent(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:b"] = True
    rid = start(store, fake_clock, "parent_catches")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.WAITING
    fake_clock.advance(SECOND)
    daemon.tick()
    fake_clock.advance(2 * SECOND)
    daemon.tick()  # the child's third attempt fails: it is dead, the parent wakes
    assert store.get_run(rid).result == "child failed: b failed on call 3"
    entry = store.journal(rid)[0]
    assert entry.state is EntryState.ERROR
    assert entry.value["child_run_id"] != rid


def test_publish_shows_a_status_value_and_replay_does_not_rewrite_it(tmp_path, db) -> None:
    from flowctl import ops
    from flowctl.testing import WorkflowEnvironment

    (tmp_path / "pub.py").write_text(
        "def progress(ctx):\n"
        "    for i in range(3):\n"
        "        ctx.step(f'part-{i}', lambda: i)\n"
        "        ctx.publish('progress', f'{i + 1}/3')\n"
        "        ctx.sleep('1h')\n"
        "    return 'done'\n"
    )
    with WorkflowEnvironment(db=db, cwd=tmp_path) as env:
        run_id = env.start("pub.py:progress")
        detail = ops.show_run(env.store, run_id, clock=env.clock)
        assert {k: v for k, (v, _) in detail.published.items()} == {"progress": "1/3"}
        first_at = detail.published["progress"][1]
        env.advance("1h")
        detail = ops.show_run(env.store, run_id, clock=env.clock)
        assert detail.published["progress"][0] == "2/3"
        assert detail.to_json()["published"]["progress"]["value"] == "2/3"
        assert detail.published["progress"][1] > first_at
        env.advance("1h")
        env.advance("1h")
        assert env.get(run_id).result == "done"
