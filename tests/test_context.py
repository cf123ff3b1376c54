"""The replay table of DESIGN.md, call by call: journal row absent, present, mismatched.

Runs are driven by `daemon.tick()` on a FakeClock (2026-03-29T00:59Z); step bodies in
durable_flows count their calls, so "fn not run" is a counter that did not move.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import durable_flows as flows
import pytest
from durable_flows import CALLS, KNOBS, SEEN, calls, events, start
from helpers import execute, wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.errors import (
    CommandFailedError,
    DurableCallError,
    StepFailedError,
    UsageError,
)
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus, to_us
from flowctl.runtime.context import error_dict, rebuild_error
from flowctl.runtime.engine import Engine
from flowctl.store import Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def nudge_due(store: Store, run_id: str, at: datetime) -> None:
    """Make a run claimable before its wake time, as a second daemon with a fast clock might.

    Nothing in flowctl's own API does this on purpose, hence the raw write, made the way
    another process would make it: on its own connection to the file.
    """
    url = store.location
    if url.startswith("postgres"):  # PostgreSQL: a connection of its own, as another host would use
        import psycopg

        before = store.data_version()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", (to_us(at), run_id))
        # Its NOTIFY arrives a moment after the commit (SQLite's data_version: at once).
        wait_until(lambda: store.data_version() != before, timeout=5)
        return
    execute(
        Path(store.path),
        "UPDATE runs SET run_at = ? WHERE run_id = ?",
        (int(at.timestamp() * 1e6), run_id),
    )


# ---------------------------------------------------------------- ctx.step


def test_step_absent_runs_the_body_and_records_its_result(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "two_steps", {"x": 4})
    assert daemon.tick() == 1
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED
    assert run.result == {"a": 5, "b": 50}
    assert CALLS == {"a": 1, "b": 1}
    journal = store.journal(rid)
    assert calls(store, rid) == [(0, "step", "a", "done"), (1, "step", "b", "done")]
    assert [journal[0].value, journal[1].value] == [5, 50]
    assert [journal[0].tries, journal[1].tries] == [1, 1]
    assert journal[0].recorded_at == T0


def test_step_present_returns_the_recorded_result_without_running(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    assert CALLS == {"before": 1}
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.COMPLETED
    assert store.get_run(rid).result == 2
    assert CALLS == {"before": 1, "after": 1}


def test_a_step_returns_its_json_value_on_the_first_run_as_on_replay(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "tuple_result")
    daemon.tick()
    fake_clock.advance(HOUR)
    daemon.tick()
    assert SEEN["pair"] == [[1, {"2": "two"}], [1, {"2": "two"}]]
    assert store.get_run(rid).result == [1, {"2": "two"}]


# ---------------------------------------------------------------- ctx.sleep


def test_sleep_absent_records_its_deadline_and_frees_the_worker(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.SLEEPING
    assert run.run_at == T0 + HOUR
    assert (run.lease_owner, run.lease_until) == (None, None)
    entry = store.journal(rid)[1]
    assert (entry.kind, entry.name, entry.state) == ("sleep", "sleep", EntryState.PENDING)
    assert entry.wake_at == T0 + HOUR
    assert entry.resolved_at is None
    assert events(store, rid) == ["created", "claimed", "sleep started"]
    assert store.timeline(rid)[-1].data == {
        "index": 1,
        "wake_at": "2026-03-29T01:59:00.000000+00:00",
        "for": "1h00m",
    }


def test_sleep_present_and_passed_returns_and_records_when_it_woke(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    fake_clock.advance(HOUR + timedelta(seconds=7))
    assert daemon.tick() == 1
    entry = store.journal(rid)[1]
    assert entry.state is EntryState.DONE
    assert entry.wake_at == T0 + HOUR
    assert entry.resolved_at == T0 + HOUR + timedelta(seconds=7)
    assert store.get_run(rid).status is RunStatus.COMPLETED
    woke = [e for e in store.timeline(rid) if e.type == "woke"]
    assert [w.data["late_ms"] for w in woke] == [7000.0]


def test_a_code_change_to_a_duration_does_not_move_a_recorded_deadline(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["sleep"] = "1h"
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    KNOBS["sleep"] = "5m"  # the deploy
    fake_clock.advance(timedelta(minutes=5))
    assert daemon.tick() == 0
    assert store.get_run(rid).status is RunStatus.SLEEPING
    fake_clock.advance(timedelta(minutes=55))
    assert daemon.tick() == 1
    assert store.get_run(rid).status is RunStatus.COMPLETED


def test_sleep_present_and_not_yet_due_suspends_again_until_the_recorded_deadline(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["sleep"] = "1h"
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    KNOBS["sleep"] = "5m"
    fake_clock.advance(timedelta(minutes=10))  # past the new duration, not the recorded one
    nudge_due(store, rid, fake_clock.now())
    assert daemon.tick() == 1  # replayed early...
    run = store.get_run(rid)
    assert run.status is RunStatus.SLEEPING  # ...and back to sleep
    assert run.run_at == T0 + HOUR
    assert store.journal(rid)[1].wake_at == T0 + HOUR
    assert store.timeline(rid)[-1].type == "sleep resumed"
    assert CALLS == {"before": 1}
    fake_clock.advance(timedelta(minutes=50) - timedelta(microseconds=1))
    assert daemon.tick() == 0
    fake_clock.advance(timedelta(microseconds=1))
    assert daemon.tick() == 1
    assert store.get_run(rid).status is RunStatus.COMPLETED


def test_sleeps_already_due_record_a_resolved_checkpoint_and_never_suspend(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "fast_sleeps", {"past": (T0 - HOUR).isoformat()})
    assert daemon.tick() == 1
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED
    assert run.result == "done"
    journal = store.journal(rid)
    assert calls(store, rid) == [
        (0, "sleep", "sleep", "done"),
        (1, "sleep", "sleep", "done"),
        (2, "sleep", "sleep", "done"),
        (3, "step", "after", "done"),
    ]
    assert [journal[i].wake_at for i in range(3)] == [T0, T0 - timedelta(seconds=5), T0 - HOUR]
    assert [journal[i].resolved_at for i in range(3)] == [T0, T0, T0]
    assert "sleep started" not in events(store, rid)


def test_sleep_until_epoch_seconds_wakes_at_that_instant(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    at = T0 + timedelta(days=2, microseconds=250)
    rid = start(store, fake_clock, "sleep_until_epoch", {"at": at.timestamp()})
    daemon.tick()
    assert store.get_run(rid).run_at == at
    fake_clock.advance(at - T0)
    daemon.tick()
    assert store.get_run(rid).result == "woke"


def test_sleep_until_a_naive_datetime_is_refused_with_a_clear_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "naive_sleep_until", max_attempts=1)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None
    assert run.error["type"] == "UsageError"
    assert run.error["message"] == (
        "ctx.sleep_until() needs a timezone-aware datetime, got naive 2026-04-01T09:00:00;"
        " use e.g. datetime(..., tzinfo=UTC) or ZoneInfo('Europe/Paris')"
    )
    assert store.journal(rid) == {}


def test_each_iteration_of_a_loop_gets_its_own_timer(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleep_loop", {"n": 3})
    for hour in (1, 2, 3):
        assert daemon.tick() == 1
        assert store.get_run(rid).run_at == T0 + hour * HOUR
        fake_clock.advance(HOUR)
    assert daemon.tick() == 1
    assert store.get_run(rid).result == 3
    assert calls(store, rid) == [
        (0, "sleep", "sleep", "done"),
        (1, "step", "tick 0", "done"),
        (2, "sleep", "sleep", "done"),
        (3, "step", "tick 1", "done"),
        (4, "sleep", "sleep", "done"),
        (5, "step", "tick 2", "done"),
    ]
    journal = store.journal(rid)
    assert [journal[i].wake_at for i in (0, 2, 4)] == [T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR]
    assert CALLS == {"tick 0": 1, "tick 1": 1, "tick 2": 1}


def test_a_thirty_day_sleep_wakes_at_its_deadline_not_a_millisecond_before(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "thirty_days")
    daemon.tick()
    fake_clock.advance(timedelta(days=30) - timedelta(milliseconds=1))
    assert daemon.tick() == 0
    assert store.get_run(rid).status is RunStatus.SLEEPING
    assert CALLS == {}
    fake_clock.advance(timedelta(milliseconds=1))
    assert daemon.tick() == 1
    assert store.get_run(rid).status is RunStatus.COMPLETED
    assert store.journal(rid)[0].resolved_at == T0 + timedelta(days=30)


# ---------------------------------------------------------------- now / uuid / random


def test_now_uuid_and_random_are_recorded_and_replayed(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "recorder")
    daemon.tick()
    fake_clock.advance(HOUR)
    daemon.tick()
    first, second = SEEN["values"]
    assert first == second
    assert first["now"] == "2026-03-29T00:59:00+00:00"
    assert len(first["uuid"]) == 36
    assert 0 <= first["random"] < 1
    assert store.get_run(rid).result == first
    journal = store.journal(rid)
    assert calls(store, rid)[:3] == [
        (0, "now", "now", "done"),
        (1, "uuid", "uuid", "done"),
        (2, "random", "random", "done"),
    ]
    assert journal[0].value == "2026-03-29T00:59:00.000000+00:00"
    assert journal[1].value == first["uuid"]
    assert journal[2].value == first["random"]


# ---------------------------------------------------------------- signals


def test_a_signal_sent_before_the_wait_is_buffered_and_consumed(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "waiter")
    ops.send_signal(store, rid, "approved", {"by": "ana"}, clock=fake_clock)
    assert store.get_run(rid).status is RunStatus.QUEUED
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED
    assert run.result == {"by": "ana"}
    entry = store.journal(rid)[0]
    assert (entry.kind, entry.name, entry.state) == ("signal", "approved", EntryState.DONE)
    assert entry.value == {"payload": {"by": "ana"}, "timed_out": False}
    assert store.pending_signals(rid) == []


def test_a_signal_arriving_later_wakes_the_waiting_run(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "waiter")
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.WAITING
    assert (run.run_at, run.lease_owner) == (None, None)  # no timeout: only a signal wakes it
    assert store.journal(rid)[0].state is EntryState.PENDING
    fake_clock.advance(timedelta(days=3))
    assert daemon.tick() == 0
    ops.send_signal(store, rid, "approved", {"by": "ana"}, clock=fake_clock)
    assert store.get_run(rid).run_at == T0 + timedelta(days=3)
    assert daemon.tick() == 1
    assert store.get_run(rid).result == {"by": "ana"}
    assert SEEN["payload"] == [{"by": "ana"}]


def test_a_signal_of_another_name_does_not_end_the_wait(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "waiter")
    daemon.tick()
    ops.send_signal(store, rid, "rejected", 1, clock=fake_clock)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.WAITING
    assert [(n, p) for n, p, _ in store.pending_signals(rid)] == [("rejected", 1)]


def test_buffered_signals_are_consumed_in_the_order_sent(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "two_signals")
    ops.send_signal(store, rid, "approved", "first", clock=fake_clock)
    ops.send_signal(store, rid, "approved", "second", clock=fake_clock)
    daemon.tick()
    assert store.get_run(rid).result == ["first", "second"]


def test_a_signal_timeout_without_default_raises_signal_timeout_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "waiter_catches_timeout")
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.run_at) == (RunStatus.WAITING, T0 + HOUR)
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == "caught: no signal 'approved' arrived before the timeout"
    entry = store.journal(rid)[0]
    assert entry.value == {"payload": None, "timed_out": True}
    assert (entry.wake_at, entry.resolved_at) == (T0 + HOUR, T0 + HOUR)


def test_a_signal_timeout_with_default_returns_the_default(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "waiter", {"timeout": "2h", "use_default": True})
    daemon.tick()
    fake_clock.advance(2 * HOUR - timedelta(microseconds=1))
    assert daemon.tick() == 0
    fake_clock.advance(timedelta(microseconds=1))
    daemon.tick()
    assert store.get_run(rid).result == {"by": "nobody"}
    # A signal after the timeout changes nothing: the recorded timeout stands.
    assert store.timeline(rid)[-2].type == "signal timed out"


def test_a_signal_before_the_timeout_wins(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "waiter", {"timeout": "2h"})
    daemon.tick()
    fake_clock.advance(HOUR)
    ops.send_signal(store, rid, "approved", "yes", clock=fake_clock)
    daemon.tick()
    assert store.get_run(rid).result == "yes"


def test_a_signal_never_completes_a_sleep(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleep_then_signal")
    daemon.tick()
    ops.send_signal(store, rid, "approved", "early", clock=fake_clock)
    run = store.get_run(rid)
    assert (run.status, run.run_at) == (RunStatus.SLEEPING, T0 + HOUR)
    assert daemon.tick() == 0
    assert store.journal(rid)[0].state is EntryState.PENDING
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == "early"
    assert CALLS == {"after sleep": 1}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("_flowctl", "is reserved: names beginning with '_' are for flowctl itself"),
        ("_", "is reserved: names beginning with '_' are for flowctl itself"),
        ("", "is empty: give the name the run waits for (e.g. approved)"),
        ("  ", "is empty: give the name the run waits for (e.g. approved)"),
        ("a\nb", "holds a control character: give printable text, e.g. approved"),
        ("a\x01b", "holds a control character: give printable text, e.g. approved"),
    ],
)
def test_reserved_or_empty_signal_names_are_refused_and_nothing_is_written(
    store: Store, fake_clock: FakeClock, name: str, why: str
) -> None:
    rid = start(store, fake_clock, "waiter")
    before = store.timeline(rid)
    with pytest.raises(UsageError) as exc:
        ops.send_signal(store, rid, name, {"x": 1}, clock=fake_clock)
    assert str(exc.value) == f"signal name {name!r} {why}"
    assert store.pending_signals(rid) == []
    assert store.timeline(rid) == before


# ---------------------------------------------------------------- non-determinism


@pytest.mark.parametrize(
    ("shape", "now_makes"),
    [("sleep", "sleep 'sleep'"), ("step c", "step 'c'")],
)
def test_replay_meeting_another_call_dead_letters_the_run_naming_both_calls(
    store: Store, fake_clock: FakeClock, daemon: Daemon, shape: str, now_makes: str
) -> None:
    rid = start(store, fake_clock, "shape_changing")
    daemon.tick()
    KNOBS["shape"] = shape
    fake_clock.advance(HOUR)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.attempt == 1  # not retried: replaying again would meet the same mismatch
    assert run.error is not None
    assert run.error["type"] == "NonDeterminismError"
    assert run.error["kind"] == "nondeterminism"
    assert run.error["message"] == (
        f"run {rid}: call #1 was recorded as step 'b' but the workflow now makes {now_makes};"
        " let old runs finish, or guard the change with ctx.version()"
    )
    assert CALLS == {"a": 1, "b": 1}


def test_a_non_determinism_error_caught_by_user_code_still_stops_the_run(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "swallow_nondeterminism")
    daemon.tick()
    KNOBS["changed"] = True
    fake_clock.advance(HOUR)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None
    assert run.error["type"] == "NonDeterminismError"
    assert CALLS == {"a": 1, "b": 1}
    assert calls(store, rid) == [
        (0, "step", "a", "done"),
        (1, "step", "b", "done"),
        (2, "sleep", "sleep", "done"),
    ]


# ---------------------------------------------------------------- ctx.version


def test_version_at_the_frontier_records_max_and_takes_no_call_index(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["version_at"] = "before sleep"
    rid = start(store, fake_clock, "versioned")
    daemon.tick()
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == 2
    assert SEEN["version"] == [2]
    assert store.versions(rid) == {"new-email": 2}
    assert calls(store, rid) == [
        (0, "step", "a", "done"),
        (1, "sleep", "sleep", "done"),
        (2, "step", "b", "done"),
    ]


def test_a_run_that_passed_the_point_under_old_code_gets_min(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "versioned")  # old code: no version call
    daemon.tick()
    KNOBS["version_at"] = "before sleep"  # new code: a version call before the sleep
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == 1
    assert store.versions(rid) == {"new-email": 1}
    assert calls(store, rid)[1] == (1, "sleep", "sleep", "done")  # the sleep kept its index


def test_a_run_that_had_not_reached_the_point_gets_max(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "versioned")  # old code, suspended at the sleep
    daemon.tick()
    KNOBS["version_at"] = "after sleep"
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == 2


def test_a_recorded_version_stands_and_is_keyed_by_change_id(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "version_twice")
    daemon.tick()
    KNOBS["max"] = 4  # support grew; the run keeps what it recorded
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == [3, 3]
    assert store.versions(rid) == {"change": 3}


def test_a_recorded_version_outside_the_supported_range_is_non_determinism(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "version_twice")
    daemon.tick()
    KNOBS["min"] = 4
    KNOBS["max"] = 5
    fake_clock.advance(HOUR)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None
    assert run.error["message"] == (
        f"run {rid}: version 'change' was recorded as 3, outside the supported range 4..5"
    )


# ---------------------------------------------------------------- where durable calls work


def test_a_durable_call_outside_a_running_handler_is_refused(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    start(store, fake_clock, "capture")
    daemon.tick()
    (ctx,) = flows.CAPTURED
    with pytest.raises(DurableCallError) as exc:
        ctx.now()
    assert str(exc.value) == (
        "ctx.now() called outside a running handler; durable calls work only while flowctl"
        " runs the workflow"
    )
    with pytest.raises(DurableCallError):
        ctx.step("late", flows.effect, "late")
    assert CALLS == {}


def test_a_durable_call_inside_a_step_fails_the_attempt_and_records_nothing(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "nested", max_attempts=1)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None
    assert run.error["type"] == "DurableCallError"
    assert run.error["message"] == (
        "ctx.sleep() called inside step 'outer': steps do not nest; make durable calls from"
        " the workflow function, not from a step"
    )
    assert store.journal(rid) == {}


def test_a_step_that_swallows_its_nested_call_error_still_fails(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "nested_swallowed", max_attempts=1)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None
    assert run.error["message"].startswith("ctx.now() called inside step 'outer'")
    assert store.journal(rid) == {}


def test_a_durable_call_from_another_thread_is_refused(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "from_thread")
    daemon.tick()
    assert store.get_run(rid).result == [
        "DurableCallError: ctx.now() called from another thread than the handler's"
    ]
    assert store.journal(rid) == {}


# ---------------------------------------------------------------- suspension vs user code


def test_except_exception_cannot_swallow_a_suspension(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "swallow")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == "slept"


def test_even_except_base_exception_cannot_turn_a_sleep_into_a_no_op(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "swallow_everything")
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.run_at, run.result) == (RunStatus.SLEEPING, T0 + HOUR, None)
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).result == "slept"


# ---------------------------------------------------------------- step errors within an attempt


@pytest.mark.parametrize(
    ("exc", "branch"),
    [
        (ValueError, "caught ValueError: boom failed on call 1"),
        (KeyError, "caught KeyError: 'boom failed on call 1'"),
        (flows.Rejected, "caught Rejected: boom failed on call 1"),
    ],
)
def test_a_recorded_step_error_is_re_raised_as_the_same_type_on_replay(
    store: Store, fake_clock: FakeClock, daemon: Daemon, exc: type[Exception], branch: str
) -> None:
    KNOBS["fail:boom"] = True
    KNOBS["exc:boom"] = exc
    rid = start(store, fake_clock, "catcher")
    daemon.tick()
    fake_clock.advance(HOUR)
    daemon.tick()
    assert SEEN["branch"] == [branch, branch]
    assert CALLS == {"boom": 1, "after": 1}
    assert store.get_run(rid).result == branch
    error = store.journal(rid)[0].value
    assert error["type"] == exc.__name__
    assert error["py_type"] == f"{exc.__module__}:{exc.__qualname__}"
    assert f"{exc.__name__}: " in error["traceback"]


def test_step_failed_event_names_the_step(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:boom"] = True
    KNOBS["exc:boom"] = ValueError
    rid = start(store, fake_clock, "catcher")
    daemon.tick()
    failed = [e.data for e in store.timeline(rid) if e.type == "step failed"]
    assert failed == [{"name": "boom", "index": 0, "error": "ValueError: boom failed on call 1"}]


class TwoArgs(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


@pytest.mark.parametrize(
    ("original", "rebuilt_type", "text"),
    [
        (ValueError("bad"), ValueError, "bad"),
        (KeyError("k"), KeyError, "'k'"),
        (OSError(2, "No such file"), FileNotFoundError, "[Errno 2] No such file"),
        (RuntimeError(), RuntimeError, ""),
        (TwoArgs(7, "seven"), StepFailedError, "TwoArgs: 7: seven"),
        (CommandFailedError(3, "oops\n"), CommandFailedError, "command exited with code 3: oops"),
    ],
)
def test_rebuild_error_gives_the_same_type_when_it_can_else_step_failed(
    original: Exception, rebuilt_type: type[Exception], text: str
) -> None:
    try:
        raise original
    except Exception as e:
        recorded = error_dict(e)
    rebuilt = rebuild_error(recorded)
    assert type(rebuilt) is rebuilt_type
    assert str(rebuilt) == text


def test_an_error_from_an_unloaded_module_comes_back_as_step_failed() -> None:
    rebuilt = rebuild_error({"type": "Gone", "message": "m", "py_type": "no_such_mod:Gone"})
    assert isinstance(rebuilt, StepFailedError)
    assert (rebuilt.type_name, rebuilt.message, str(rebuilt)) == ("Gone", "m", "Gone: m")


def test_error_dict_records_type_message_args_and_traceback() -> None:
    try:
        raise ValueError("bad", 3)
    except ValueError as e:
        recorded = error_dict(e)
    assert recorded["type"] == "ValueError"
    assert recorded["message"] == "('bad', 3)"
    assert recorded["args"] == ["bad", 3]
    assert recorded["py_type"] == "builtins:ValueError"
    assert recorded["traceback"].splitlines()[-1] == "ValueError: ('bad', 3)"


def test_error_dict_leaves_out_args_that_are_not_json() -> None:
    recorded = error_dict(ValueError(object()), with_traceback=False)
    assert "args" not in recorded
    assert "traceback" not in recorded


def test_error_dict_records_args_as_a_json_round_trip_gives_them_back() -> None:
    """Plain strings, ints, booleans and None are kept as they are; a tuple comes back a
    list and a float stays a float; NaN, which JSON cannot hold, leaves the args out."""
    assert error_dict(KeyError("k", 7, True, None))["args"] == ["k", 7, True, None]
    assert error_dict(ValueError((1, 2), 1.5, {"a": 1}))["args"] == [[1, 2], 1.5, {"a": 1}]
    assert "args" not in error_dict(ValueError(float("nan")))


# ---------------------------------------------------------------- golden journals

JOURNALS = sorted((Path(__file__).parent / "journals").glob("*.json"))


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


@pytest.mark.parametrize("path", JOURNALS, ids=[p.stem for p in JOURNALS])
def test_golden_journal_replays_as_recorded(
    store: Store, fake_clock: FakeClock, engine: Engine, path: Path
) -> None:
    """Journals written by an earlier engine must replay the same way with this one.

    Each file gives the journal rows, versions and buffered signals; the run is claimed,
    the rows are written under its fence, and the handler is executed once at `now`.
    """
    golden = json.loads(path.read_text())
    KNOBS.update(golden.get("knobs", {}))
    rid = start(store, fake_clock, golden["workflow"], golden.get("input", {}))
    fake_clock.set(datetime.fromisoformat(golden["now"]))
    now = fake_clock.now()
    claims, _ = store.claim_due("golden/1/1/0000", now, now + timedelta(seconds=15), 1)
    (claim,) = claims
    for row in golden["journal"]:
        entry = JournalEntry(
            rid,
            row["index"],
            CallKind(row["kind"]),
            row["name"],
            EntryState(row["state"]),
            row.get("value"),
            wake_at=_when(row.get("wake_at")),
            resolved_at=_when(row.get("resolved_at")),
            tries=row.get("tries", 0),
        )
        assert store.record_entry(claim.lease, entry, now)
    for change_id, version in golden.get("versions", {}).items():
        assert store.record_version(claim.lease, change_id, version, now)
    for signal in golden.get("signals", []):
        store.send_signal(rid, signal["name"], signal["payload"], now)
    # The rows were written after the claim, which may say it saw none (a fresh run's claim
    # spares the replay those reads): replay must read what is there now.
    claim = dataclasses.replace(claim, journal=None, versions=None)

    outcome = engine.execute(claim)

    expect = golden["expect"]
    run = store.get_run(rid)
    assert (str(outcome.status), str(run.status)) == (expect["status"], expect["status"])
    assert dict(CALLS) == expect["calls"]
    if "result" in expect:
        assert run.result == expect["result"]
    if "run_at" in expect:
        assert run.run_at == _when(expect["run_at"])
    if "error" in expect:
        assert run.error is not None
        wanted = {k: v.replace("{run_id}", rid) for k, v in expect["error"].items()}
        assert {k: run.error[k] for k in wanted} == wanted
    if "checkpoints" in expect:
        assert calls(store, rid) == [tuple(c) for c in expect["checkpoints"]]
    if "versions" in expect:
        assert store.versions(rid) == expect["versions"]
    for index, tries in expect.get("tries", {}).items():
        assert store.journal(rid)[int(index)].tries == tries


def test_a_signal_name_over_the_key_limit_is_refused(store: Store, fake_clock: FakeClock) -> None:
    rid = start(store, fake_clock, "waiter")
    with pytest.raises(UsageError) as exc:
        ops.send_signal(store, rid, "x" * 1001, {"x": 1}, clock=fake_clock)
    assert str(exc.value) == "signal name is 1,001 characters long: at most 1,000 are accepted"
    assert store.pending_signals(rid) == []
