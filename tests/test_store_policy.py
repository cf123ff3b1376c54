"""Decisions the store applies but does not make: pure functions in flowctl.transitions.

A second store backend calls these same functions, so the two cannot drift apart on when
a cancel or pause only becomes a request, how a pause reached at a durable call parks, what
a heartbeat tells a handler, or what a due time means.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flowctl.model import RunStatus
from flowctl.transitions import (
    Action,
    Notice,
    agenda_kind,
    claim_wakes,
    held_notice,
    requested_only,
    suspension,
)

NOW = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
US = timedelta(microseconds=1)


@pytest.mark.parametrize("action", [Action.CANCEL, Action.PAUSE, Action.RESUME])
def test_cancel_pause_and_resume_of_a_running_run_only_change_a_request(action: Action) -> None:
    assert requested_only(action, RunStatus.RUNNING) is True
    assert requested_only(action, RunStatus.SLEEPING) is False
    assert requested_only(action, RunStatus.PAUSED) is False


@pytest.mark.parametrize("action", [Action.SIGNAL, Action.REDRIVE, Action.WAKE])
def test_other_actions_apply_at_once_whatever_the_status(action: Action) -> None:
    assert not any(requested_only(action, s) for s in RunStatus)


def test_a_pause_reached_at_a_durable_call_parks_the_run_queued_and_due_now() -> None:
    later = NOW + timedelta(hours=1)
    assert suspension(RunStatus.PAUSED, later, NOW) == (RunStatus.QUEUED, NOW)
    assert suspension(RunStatus.SLEEPING, later, NOW) == (RunStatus.SLEEPING, later)
    assert suspension(RunStatus.WAITING, None, NOW) == (RunStatus.WAITING, None)


def _notice(**kw: object) -> Notice:
    args: dict[str, object] = dict(
        cancel_requested=False,
        pause_requested=False,
        deadline=None,
        timeout=None,
        spent=0.0,
        now=NOW,
    )
    args.update(kw)
    return held_notice(**args)  # type: ignore[arg-type]


def test_a_heartbeat_tells_of_a_deadline_from_its_instant_on() -> None:
    assert _notice(deadline=NOW + US) == Notice()
    assert _notice(deadline=NOW) == Notice(deadline=True)
    assert _notice(deadline=NOW - US) == Notice(deadline=True)


def test_a_heartbeat_tells_of_a_budget_once_the_time_spent_reaches_it() -> None:
    assert _notice(timeout=10.0, spent=9.999999) == Notice()
    assert _notice(timeout=10.0, spent=10.0) == Notice(timeout=True)
    assert _notice(timeout=None, spent=1e9) == Notice()


def test_a_heartbeat_passes_operator_requests_on() -> None:
    assert _notice(cancel_requested=True, pause_requested=True) == Notice(cancel=True, pause=True)


def test_a_claim_wakes_sleepers_waiters_and_runs_queued_for_later() -> None:
    created = NOW - timedelta(minutes=5)
    assert claim_wakes(RunStatus.SLEEPING, NOW, created)
    assert claim_wakes(RunStatus.WAITING, NOW, created)
    assert claim_wakes(RunStatus.QUEUED, NOW, created)  # --in/--at, or a retry
    assert not claim_wakes(RunStatus.QUEUED, created, created)  # started as soon as created
    assert not claim_wakes(RunStatus.RUNNING, NOW, created)  # a reclaim, not a wake


def test_the_agenda_names_what_each_due_time_is() -> None:
    assert agenda_kind(RunStatus.SLEEPING, 1, False) == "wake"
    assert agenda_kind(RunStatus.WAITING, 3, True) == "timeout"
    assert agenda_kind(RunStatus.QUEUED, 1, False) == "start"
    assert agenda_kind(RunStatus.QUEUED, 2, False) == "retry"
    assert agenda_kind(RunStatus.QUEUED, 1, True) == "retry"  # a step waiting to retry
