"""The run state machine as pure functions: every verdict checked without a database."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowctl.errors import (
    Cancelled,
    DeadlineExceededError,
    DurableCallError,
    ExecutionTimeoutError,
    InvalidStateError,
    NonDeterminismError,
    NonRetryableError,
    mark_non_retryable,
)
from flowctl.model import Run, RunStatus
from flowctl.transitions import (
    GUARDS,
    Action,
    ClaimAction,
    ClaimVerdict,
    Ending,
    ErrorKind,
    NextAttempt,
    claim_verdict,
    ending,
    error_kind,
    guard,
    next_attempt,
    parked_run_at,
    refusal,
    stop_kind,
    suspect_order,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_error_kinds_are_the_recorded_strings() -> None:
    assert {k.value for k in ErrorKind} == {
        "raised",
        "timeout",
        "deadline",
        "cancelled",
        "nondeterminism",
        "poison",
        "non_retryable",
        "load",
    }
    assert ErrorKind.RAISED == "raised"  # a StrEnum: equal to the JSON it is stored as


def test_only_raised_timeout_and_load_failures_may_be_retried() -> None:
    assert {k for k in ErrorKind if k.retryable} == {
        ErrorKind.RAISED,
        ErrorKind.TIMEOUT,
        ErrorKind.LOAD,
    }


def test_error_kind_of_a_recorded_error() -> None:
    assert error_kind({"kind": "deadline"}) is ErrorKind.DEADLINE
    assert error_kind({"type": "ValueError"}) is ErrorKind.RAISED  # recorded before kinds
    assert error_kind(None) is ErrorKind.RAISED
    assert error_kind({"kind": "from-the-future"}) is ErrorKind.RAISED


@pytest.mark.parametrize(
    ("action", "accepted"),
    [
        (Action.SIGNAL, {"queued", "running", "sleeping", "waiting"}),
        (Action.CANCEL, {"queued", "running", "sleeping", "waiting"}),
        (Action.REDRIVE, {"dead", "cancelled"}),
        (Action.WAKE, {"sleeping", "queued"}),
    ],
)
def test_each_action_accepts_exactly_its_statuses(action: Action, accepted: set[str]) -> None:
    # Statuses added later (paused) are checked against the table, not listed here.
    for status in RunStatus:
        if status.value in accepted:
            assert refusal(action, "r1", status) is None
            guard(action, "r1", status)
        elif status in GUARDS[action].accepts:
            continue
        else:
            why = refusal(action, "r1", status)
            assert why is not None and "\n" not in why
            assert why.startswith("run r1 is ") and str(status) in why
            with pytest.raises(InvalidStateError, match=f"^run r1 is .*{status}"):
                guard(action, "r1", status)


def test_refusals_say_what_is_accepted() -> None:
    assert refusal(Action.REDRIVE, "r9", RunStatus.COMPLETED) == (
        "run r9 is completed: only dead or cancelled runs can be redriven"
    )
    assert refusal(Action.CANCEL, "r9", RunStatus.DEAD) == (
        "run r9 is already dead; nothing to cancel"
    )


def test_parked_run_at_is_the_earliest_time_clamped_to_the_deadline() -> None:
    wake = T0 + timedelta(seconds=30)
    deadline = T0 + timedelta(seconds=2)
    assert parked_run_at(wake, deadline=deadline) == deadline
    assert parked_run_at(wake, deadline=None) == wake
    assert parked_run_at(wake, deadline=T0 + timedelta(hours=1)) == wake
    # waiting for a signal with no timeout: due only at the deadline, or never
    assert parked_run_at(None, deadline=deadline) == deadline
    assert parked_run_at(None, deadline=None) is None
    # a signal timeout and a retry time: the earliest wins
    assert parked_run_at(wake, T0 + timedelta(seconds=5), deadline=None) == T0 + timedelta(
        seconds=5
    )


def a_run(**kw: Any) -> Run:
    base: dict[str, Any] = {
        "run_id": "r1",
        "workflow": "wf",
        "target": "wf.py:wf",
        "kind": "python",
        "status": RunStatus.QUEUED,
        "input": {},
        "created_at": T0,
        "run_at": T0,
    }
    return Run(**{**base, **kw})


def test_claim_verdicts_in_order() -> None:
    now = T0 + timedelta(seconds=10)
    past = T0 + timedelta(seconds=5)
    assert claim_verdict(a_run(), now) == ClaimVerdict(ClaimAction.CLAIM)
    # cancelled while its worker died: cancelled, even past its deadline
    v = claim_verdict(a_run(status=RunStatus.RUNNING, cancel_requested=True, deadline=past), now)
    assert (v.action, v.status, v.error and v.error["kind"]) == (
        ClaimAction.END,
        RunStatus.CANCELLED,
        "cancelled",
    )
    # a queued run past its deadline is dead, never claimed
    v = claim_verdict(a_run(deadline=past), now)
    assert (v.action, v.status, v.error and v.error["kind"]) == (
        ClaimAction.END,
        RunStatus.DEAD,
        "deadline",
    )
    # a dead worker spent the budget: the attempt failed with a timeout
    v = claim_verdict(a_run(status=RunStatus.RUNNING, timeout=2.0, exec_spent=2.5), now)
    assert (v.action, v.error and v.error["kind"]) == (ClaimAction.FAIL, "timeout")


def test_a_lapsed_lease_makes_a_suspect_that_no_claim_charges() -> None:
    now = T0 + timedelta(seconds=10)
    lapsed = a_run(status=RunStatus.RUNNING, lease_owner="h/1/1/dead", reclaims=3)
    # its worker died: held for a claimer that runs it alone, nothing charged
    v = claim_verdict(lapsed, now)
    assert (v.action, v.suspect, v.crashes) == (ClaimAction.SUSPECT, True, 0)
    v = claim_verdict(lapsed, now, alone=True)
    assert (v.action, v.reclaims, v.reclaimed, v.crashes) == (ClaimAction.CLAIM, 4, True, 0)
    # it ran alone when its worker died, whole process group and all: the reclaim charges
    # nothing (only the daemon that saw its isolated worker die does: charge_crash)
    solo = dataclasses.replace(lapsed, suspect=True, solo=True, crashes=3)
    v = claim_verdict(solo, now, alone=True)
    assert (v.action, v.crashes) == (ClaimAction.CLAIM, 3)
    # the fifth charged crash is poison, whoever looks
    for alone in (False, True):
        v = claim_verdict(dataclasses.replace(solo, crashes=5), now, alone=alone)
        assert (v.action, v.status, v.error and v.error["kind"]) == (
            ClaimAction.END,
            RunStatus.DEAD,
            "poison",
        )
    # a fresh run is claimed by anyone
    assert claim_verdict(a_run(), now).action is ClaimAction.CLAIM


def test_a_run_released_by_a_drain_is_claimed_as_usual_unless_a_suspect_already() -> None:
    now = T0 + timedelta(seconds=10)
    released = a_run(status=RunStatus.RUNNING, lease_owner=None, run_at=T0)
    assert claim_verdict(released, now) == ClaimVerdict(ClaimAction.CLAIM)  # nobody died
    v = claim_verdict(dataclasses.replace(released, suspect=True), now)
    assert (v.action, v.reclaims) == (ClaimAction.SUSPECT, 0)  # still one: runs alone


def test_next_attempt_retries_with_backoff_clamped_to_the_deadline() -> None:
    err = {"type": "ValueError", "message": "m", "kind": "raised"}
    first = next_attempt(a_run(attempt=1), err, T0)
    assert first == NextAttempt(T0 + timedelta(seconds=1), {**err, "attempt": 1})
    second = next_attempt(a_run(attempt=2), err, T0)
    assert second.retry_at == T0 + timedelta(seconds=2)  # 1 s doubling
    clamped = next_attempt(a_run(attempt=1, deadline=T0 + timedelta(milliseconds=300)), err, T0)
    assert clamped.retry_at == T0 + timedelta(milliseconds=300)
    given = next_attempt(a_run(), err, T0, retry_at=T0 + timedelta(hours=1))
    assert given.retry_at == T0 + timedelta(hours=1)


def test_a_workflow_that_does_not_load_is_tried_again_without_spending_the_attempt() -> None:
    err = {"type": "TargetError", "message": "SyntaxError", "kind": "load"}
    last = a_run(attempt=3, max_attempts=3)  # its last attempt: a load error spends none
    waits = []
    for _ in range(12):
        v = next_attempt(last, err, T0)
        assert v.spends is False and v.retry_at is not None
        assert v.error["attempt"] == 3 and "dead_reason" not in v.error
        waits.append((v.retry_at - T0).total_seconds())
        last = dataclasses.replace(last, error=v.error)  # as the store records it
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]
    assert last.error is not None and last.error["load_failures"] == 12
    # A load error of an earlier attempt starts the count again; a deadline clamps it.
    newer = next_attempt(dataclasses.replace(last, attempt=4, max_attempts=5), err, T0)
    assert newer.error["load_failures"] == 1 and newer.retry_at == T0 + timedelta(seconds=1)
    near = dataclasses.replace(last, deadline=T0 + timedelta(seconds=30))
    assert next_attempt(near, err, T0).retry_at == T0 + timedelta(seconds=30)
    assert next_attempt(a_run(), {**err, "kind": "raised"}, T0).spends is True


def test_next_attempt_dead_letters_when_exhausted_or_not_retryable() -> None:
    err = {"type": "ValueError", "message": "m", "kind": "raised"}
    done = next_attempt(a_run(attempt=3, max_attempts=3), err, T0)
    assert done.retry_at is None
    assert done.error["dead_reason"] == "attempts exhausted (3/3)"
    for kind in ("deadline", "nondeterminism", "poison", "non_retryable", "cancelled"):
        v = next_attempt(a_run(attempt=1), {**err, "kind": kind}, T0)
        assert v.retry_at is None and "dead_reason" not in v.error


def test_a_parking_run_awaits_a_signal_or_a_child_only_when_it_parks_waiting_on_that_call() -> None:
    from flowctl.model import CallKind, EntryState, JournalEntry
    from flowctl.transitions import awaited_child, awaited_signal

    child = JournalEntry(
        "p", 3, CallKind.STEP, "workflow f.py:c", EntryState.PENDING, {"child_run_id": "c1"}
    )
    signal = JournalEntry("p", 4, CallKind.SIGNAL, "go", EntryState.PENDING)
    waiting = RunStatus.WAITING
    assert (awaited_child(waiting, child), awaited_signal(waiting, child)) == ("c1", None)
    assert (awaited_child(waiting, signal), awaited_signal(waiting, signal)) == (None, "go")
    step = JournalEntry("p", 5, CallKind.STEP, "s", EntryState.PENDING, {"tries": 1})
    for status, entry in ((waiting, step), (waiting, None), (RunStatus.QUEUED, child)):
        assert (awaited_child(status, entry), awaited_signal(status, entry)) == (None, None)


# ---------------------------------------------------------------- how a run ends


@pytest.mark.parametrize(
    ("stop", "kind"),
    [
        (Cancelled("cancel requested by operator"), ErrorKind.CANCELLED),
        (DeadlineExceededError("the run's deadline passed"), ErrorKind.DEADLINE),
        (ExecutionTimeoutError("execution budget of 10s used up"), ErrorKind.TIMEOUT),
        (NonDeterminismError("call #2 was step 'a', now step 'b'"), ErrorKind.NONDETERMINISM),
        (NonRetryableError("bad card"), ErrorKind.NON_RETRYABLE),
        (DurableCallError("ctx.sleep inside a step"), ErrorKind.NON_RETRYABLE),
        (mark_non_retryable(ValueError("bad duration")), ErrorKind.NON_RETRYABLE),
        (ValueError("boom"), ErrorKind.RAISED),
        (KeyboardInterrupt(), ErrorKind.RAISED),
    ],
)
def test_how_a_handler_stopped_is_one_kind_of_ending(stop: BaseException, kind: ErrorKind) -> None:
    assert stop_kind(stop) is kind


def test_a_deadline_ends_the_run_dead_with_one_message_however_it_is_found() -> None:
    run = a_run(status=RunStatus.RUNNING, deadline=T0 + timedelta(seconds=5))
    want = Ending(
        RunStatus.DEAD,
        {
            "type": "DeadlineExceededError",
            "kind": "deadline",
            "message": "deadline 2026-03-01 12:00:05 UTC passed",
        },
    )
    assert ending(ErrorKind.DEADLINE, run) == want
    # what the exception said, or whatever it carried, never changes the recorded text
    assert ending(ErrorKind.DEADLINE, run, raised={"message": "x", "type": "Y"}) == want
    # a claim past the deadline records the same ending
    verdict = claim_verdict(dataclasses.replace(run, status=RunStatus.QUEUED), T0 + timedelta(1))
    assert (verdict.action, verdict.status, verdict.error) == (
        ClaimAction.END,
        want.status,
        want.error,
    )


def test_an_execution_timeout_fails_only_the_attempt_with_one_message() -> None:
    run = a_run(status=RunStatus.RUNNING, attempt=2, timeout=10.0, exec_spent=12.0)
    end = ending(ErrorKind.TIMEOUT, run)
    assert end == Ending(
        None,  # a failed attempt: next_attempt retries it or dead-letters it
        {
            "type": "ExecutionTimeoutError",
            "kind": "timeout",
            "message": "attempt 2 used its execution budget of 10s",
        },
    )
    verdict = claim_verdict(run, T0 + timedelta(seconds=30))  # its worker died meanwhile
    assert (verdict.action, verdict.error) == (ClaimAction.FAIL, end.error)


def test_a_cancel_ends_the_run_cancelled_with_the_operators_reason_or_one_default() -> None:
    given = a_run(status=RunStatus.RUNNING, cancel_requested=True, cancel_reason="dup order")
    assert ending(ErrorKind.CANCELLED, given) == Ending(
        RunStatus.CANCELLED, {"type": "Cancelled", "kind": "cancelled", "message": "dup order"}
    )
    silent = dataclasses.replace(given, cancel_reason=None)
    assert ending(ErrorKind.CANCELLED, silent).message == "cancelled by operator"
    verdict = claim_verdict(silent, T0 + timedelta(seconds=30))
    assert (verdict.status, verdict.error) == (
        RunStatus.CANCELLED,
        ending(ErrorKind.CANCELLED, silent).error,
    )


def test_poison_ends_the_run_dead_naming_the_crashes_charged() -> None:
    run = a_run(status=RunStatus.RUNNING, lease_owner="h/1/1/x", suspect=True, crashes=5)
    end = ending(ErrorKind.POISON, run, crashes=5)
    assert end == Ending(
        RunStatus.DEAD,
        {
            "type": "PoisonRunError",
            "kind": "poison",
            "message": "its worker died 5 times while running it alone, without a new"
            " checkpoint: it is killing its worker",
        },
    )
    verdict = claim_verdict(run, T0 + timedelta(seconds=30), alone=True)
    assert (verdict.action, verdict.status, verdict.error) == (
        ClaimAction.END,
        end.status,
        end.error,
    )


def test_a_non_retryable_error_ends_the_run_dead_keeping_what_was_raised() -> None:
    raised = {"type": "NonRetryableError", "message": "bad card", "traceback": "..."}
    assert ending(ErrorKind.NON_RETRYABLE, a_run(attempt=2), raised=raised) == Ending(
        RunStatus.DEAD,
        {
            **raised,
            "kind": "non_retryable",
            "attempt": 2,
            "non_retryable": True,
            "dead_reason": "not retried: no retry can fix this error",
        },
    )
    nondeterminism = {"type": "NonDeterminismError", "message": "call #2 ..."}
    assert ending(ErrorKind.NONDETERMINISM, a_run(), raised=nondeterminism) == Ending(
        RunStatus.DEAD, {**nondeterminism, "kind": "nondeterminism"}
    )


@pytest.mark.parametrize("kind", [ErrorKind.RAISED, ErrorKind.LOAD])
def test_a_raise_or_a_workflow_that_did_not_load_fails_only_the_attempt(kind: ErrorKind) -> None:
    raised = {"type": "ValueError", "message": "boom"}
    assert ending(kind, a_run(), raised=raised) == Ending(None, {**raised, "kind": kind})


def test_suspects_are_isolated_fewest_crashes_first_then_in_due_order() -> None:
    due = [("a", 2), ("b", 0), ("c", 1), ("d", 0)]
    assert suspect_order(due) == ["b", "d", "c", "a"]


def test_each_daemon_has_its_own_order_among_suspects_of_equal_crashes() -> None:
    """Two daemons looking at once start workers for different suspects, not each for the
    same oldest ones; the fewest crashes still go first, and one daemon's order is the same
    at every look."""
    due = [(f"r{i:02}", 0) for i in range(20)] + [("poison", 3)]
    one, other = suspect_order(due, b"daemon-1"), suspect_order(due, b"daemon-2")
    assert sorted(one) == sorted(other) == sorted(r for r, _ in due)
    assert one[-1] == other[-1] == "poison"
    assert one == suspect_order(list(reversed(due)), b"daemon-1")
    assert one[:4] != [r for r, _ in due[:4]]
    assert len(set(one[:4]) & set(other[:4])) < 4
