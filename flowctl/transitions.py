"""The run state machine as pure functions: no I/O, no SQL, no clock.

Every store applies what these functions decide and returns what it applied, so two
stores (and the engine, the daemon and the operator front ends) cannot drift apart:

- `ErrorKind`: the one vocabulary for how an attempt or a run ended badly.
- `guard()`: which statuses each operator action accepts, and the one-line refusal.
- `parked_run_at()`: when a parked run is next due (wake, signal timeout, retry, deadline).
- `claim_verdict()`: what claiming a due run does (claim it, or end it here, and why).
- `stop_kind()`, `ending()`: how a run stopped (deadline, execution timeout, cancel,
  poison, non-retryable, raised ...) and what that makes of it: its status, error kind
  and message. The engine and the claim verdict both ask `ending()`: one text per ending.
- `next_attempt()`: after a failed attempt, retry at T or dead-letter.
- `requested_only()`: whether cancel/pause apply at once or are asked of a running handler.
- `held_notice()`: what a heartbeat tells the handler of a run its worker still holds.
- `suspension()`: how a run whose handler stopped at a durable call is parked.
- `awaited_signal()`, `awaited_child()`: what a run parking as waiting waits for, which
  its parking transaction checks itself.
- `claim_wakes()`, `agenda_kind()`: what a due time means (a wake, a start, a retry...).
- `suspect_order()`: which due suspects a daemon isolates first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from flowctl.errors import (
    Cancelled,
    DeadlineExceededError,
    ExecutionTimeoutError,
    InvalidStateError,
    NonDeterminismError,
    is_non_retryable,
)
from flowctl.model import CallKind, JournalEntry, Run, RunStatus
from flowctl.retry import DEFAULT_RUN_RETRY, RetryPolicy

POISON_CRASHES = 5  # crashes charged to a run (its isolated worker died, no checkpoint since)
ISOLATED_AT_ONCE = 16  # suspects a daemon runs at once, each alone in a worker process


class ErrorKind(StrEnum):
    """How an attempt or a run ended badly: the `kind` of every recorded run error."""

    RAISED = "raised"  # the handler (or a step it did not catch) raised
    TIMEOUT = "timeout"  # the attempt used up its execution budget
    DEADLINE = "deadline"  # the run's deadline passed
    CANCELLED = "cancelled"  # an operator cancelled it
    NONDETERMINISM = "nondeterminism"  # replay met a different call than the journal holds
    POISON = "poison"  # it kept killing the worker that ran it
    NON_RETRYABLE = "non_retryable"  # an error no retry can fix
    LOAD = "load"  # the workflow could not be loaded (file gone, import error)

    @property
    def retryable(self) -> bool:
        """Whether a failure of this kind may spend another attempt."""
        return self in _RETRYABLE

    @property
    def label(self) -> str:
        """The timeline event that records a failed attempt of this kind."""
        return _LABELS.get(self, "failed")


_RETRYABLE = frozenset({ErrorKind.RAISED, ErrorKind.TIMEOUT, ErrorKind.LOAD})
_LABELS = {
    ErrorKind.TIMEOUT: "timed out",
    ErrorKind.DEADLINE: "deadline exceeded",
    ErrorKind.LOAD: "load failed",
}


def error_kind(error: dict[str, object] | None) -> ErrorKind:
    """The kind of a recorded error dict; errors recorded before kinds existed were raised."""
    raw = (error or {}).get("kind")
    try:
        return ErrorKind(str(raw)) if raw is not None else ErrorKind.RAISED
    except ValueError:
        return ErrorKind.RAISED


# ---------------------------------------------------------------------------
# Operator guards


class Action(StrEnum):
    """Operator actions that depend on a run's status."""

    SIGNAL = "signal"
    CANCEL = "cancel"
    REDRIVE = "redrive"
    WAKE = "wake"
    PAUSE = "pause"
    RESUME = "resume"


@dataclass(frozen=True)
class Guard:
    """The statuses an action accepts, and its refusal (`{run_id}` and `{status}` filled in)."""

    accepts: frozenset[RunStatus]
    refusal: str


def _statuses(names: Iterable[RunStatus]) -> frozenset[RunStatus]:
    return frozenset(names)


_NOT_TERMINAL = _statuses(s for s in RunStatus if not s.is_terminal)

GUARDS: dict[Action, Guard] = {
    Action.SIGNAL: Guard(
        _NOT_TERMINAL,
        "run {run_id} is {status}: signals go to queued, running, sleeping or waiting runs",
    ),
    Action.CANCEL: Guard(_NOT_TERMINAL, "run {run_id} is already {status}; nothing to cancel"),
    Action.REDRIVE: Guard(
        _statuses((RunStatus.DEAD, RunStatus.CANCELLED)),
        "run {run_id} is {status}: only dead or cancelled runs can be redriven",
    ),
    Action.WAKE: Guard(
        _statuses((RunStatus.SLEEPING, RunStatus.QUEUED)),
        "run {run_id} is {status}: only sleeping or queued runs can be woken",
    ),
    Action.PAUSE: Guard(
        _statuses((RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SLEEPING, RunStatus.WAITING)),
        "run {run_id} is {status}: only queued, running, sleeping or waiting runs can be paused",
    ),
    # A running run is accepted only while a pause is requested (resume withdraws it).
    Action.RESUME: Guard(
        _statuses((RunStatus.PAUSED, RunStatus.RUNNING)),
        "run {run_id} is {status}, not paused: only a paused run can be resumed",
    ),
}


def refusal(
    action: Action, run_id: str, status: RunStatus, *, pause_requested: bool = False
) -> str | None:
    """The one-line reason `action` is refused for a run in `status`, or None if accepted."""
    g = GUARDS[action]
    if status in g.accepts and not (
        action is Action.RESUME and status is RunStatus.RUNNING and not pause_requested
    ):
        return None
    return g.refusal.format(run_id=run_id, status=status)


def guard(action: Action, run_id: str, status: RunStatus, *, pause_requested: bool = False) -> None:
    """Raise InvalidStateError (one line, exit 1) unless `action` accepts `status`."""
    why = refusal(action, run_id, status, pause_requested=pause_requested)
    if why is not None:
        raise InvalidStateError(why)


def requested_only(action: Action, status: RunStatus) -> bool:
    """Whether `action` (accepted by guard) only changes a request: a running handler is
    never interrupted mid-call, so cancel reaches it at its next heartbeat, pause at its
    next durable call, and resume withdraws that pause request. In any other status they
    apply at once."""
    return action in (Action.CANCEL, Action.PAUSE, Action.RESUME) and status is RunStatus.RUNNING


# ---------------------------------------------------------------------------
# When a parked run is next due


def parked_run_at(*candidates: datetime | None, deadline: datetime | None) -> datetime | None:
    """The effective `run_at` of a parked run: the earliest of its wake time, signal timeout
    and retry time (whichever apply; None for none), clamped to its deadline.

    A run waiting with no timeout and no deadline has no run_at: only a signal (or a child
    ending) makes it due. The claim at the deadline dead-letters it.
    """
    times = [t for t in (*candidates, deadline) if t is not None]
    return min(times) if times else None


@dataclass(frozen=True)
class Applied:
    """What a store wrote for a transition: the run's new status and its effective run_at.

    The daemon's timer wheel takes this run_at, never its own guess (the store's own
    commits do not move data_version, so nothing else would correct the wheel).
    """

    status: RunStatus
    run_at: datetime | None


def suspension(
    status: RunStatus, run_at: datetime | None, now: datetime
) -> tuple[RunStatus, datetime | None]:
    """The status and wake a suspending handler parks its run with (before the deadline
    clamp): as asked, except that one which stopped at a durable call to honour a pause
    (PAUSED) parks as queued and due now, which the pause then takes effect on."""
    if status is RunStatus.PAUSED:
        return RunStatus.QUEUED, now
    return status, run_at


def awaited_signal(status: RunStatus, entry: JournalEntry | None) -> str | None:
    """The signal a run parking as waiting waits for, else None.

    A signal sent while the run was running found no waiting run to make due, so the
    parking transaction looks for it itself and, if buffered, parks the run due now.
    """
    if status is RunStatus.WAITING and entry is not None and entry.kind is CallKind.SIGNAL:
        return entry.name
    return None


def awaited_child(status: RunStatus, entry: JournalEntry | None) -> str | None:
    """The child run a run parking as waiting waits for (its pending `ctx.child` call),
    else None.

    A child that ended while its parent was running (a second worker ran it, or the
    parent was replaying after a signal) found no waiting parent to make due, so the
    parking transaction reads the child itself and, if it has ended, parks the parent due
    now. Without this the parent would wait for a wake that was already spent.
    """
    if status is not RunStatus.WAITING or entry is None or entry.kind is not CallKind.STEP:
        return None
    child = entry.value.get("child_run_id") if isinstance(entry.value, dict) else None
    return child if isinstance(child, str) else None


@dataclass(frozen=True)
class Notice:
    """What a heartbeat tells the handler of a run its worker still holds."""

    cancel: bool = False  # an operator asked to cancel it
    deadline: bool = False  # the run's deadline has passed
    timeout: bool = False  # the attempt has used up its execution budget
    pause: bool = False  # an operator asked to pause it: park at the next durable call


def held_notice(
    *,
    cancel_requested: bool,
    pause_requested: bool,
    deadline: datetime | None,
    timeout: float | None,
    spent: float,
    now: datetime,
) -> Notice:
    """A deadline passes at its instant (deadline <= now); a budget is used up once the
    execution time spent reaches it (spent >= timeout)."""
    return Notice(
        cancel=cancel_requested,
        deadline=deadline is not None and deadline <= now,
        timeout=timeout is not None and spent >= timeout,
        pause=pause_requested,
    )


# ---------------------------------------------------------------------------
# Pausing and resuming


@dataclass(frozen=True)
class Paused:
    """How a run is parked paused: the status and due time resume gives back, and the
    run_at the daemon sees meanwhile (its deadline, for the deadline check only)."""

    paused_status: RunStatus
    paused_run_at: datetime | None
    run_at: datetime | None


def pause(status: RunStatus, run_at: datetime | None, deadline: datetime | None) -> Paused:
    """Park a queued, sleeping or waiting run (or one that stopped at a durable call, given
    as queued and due now) as paused. Its wake time may pass meanwhile; its deadline runs on.
    """
    return Paused(status, run_at, deadline)


def resume(paused: Run, now: datetime) -> Applied:
    """What resuming a paused run gives back: its status, due at once if its wake passed
    while paused, else at its wake (a held or signal-waiting run with no time stays
    untimed); never later than its deadline."""
    status = paused.paused_status or RunStatus.QUEUED
    at = paused.paused_run_at
    if at is None and status is RunStatus.QUEUED:
        return Applied(status, None)  # held behind a schedule's active run: released in turn
    if at is not None and at < now:
        at = now
    return Applied(status, parked_run_at(at, deadline=paused.deadline))


# ---------------------------------------------------------------------------
# Claiming a due run


class ClaimAction(StrEnum):
    CLAIM = "claim"  # lease it to the claimer
    END = "end"  # end it here, terminally (status and error given)
    FAIL = "fail"  # end this attempt as failed (retried or dead-lettered by next_attempt)
    PAUSE = "pause"  # park it paused: a pause was requested and its worker died
    SKIP = "skip"  # leave it as it is: a paused run is never claimed
    SUSPECT = "suspect"  # reclaimed from a dead worker: only a claimer that runs it alone may


@dataclass(frozen=True)
class ClaimVerdict:
    action: ClaimAction
    status: RunStatus | None = None  # END: the terminal status
    error: dict[str, Any] | None = None  # END / FAIL: the error recorded
    reclaims: int = 0  # CLAIM: reclaims from a dead worker since the last checkpoint
    reclaimed: bool = False  # CLAIM: taken over from a worker whose lease lapsed
    crashes: int = 0  # CLAIM / SUSPECT: crashes charged to it since its last checkpoint
    suspect: bool = False  # CLAIM / SUSPECT: its worker died under it since its last checkpoint


def released(run: Run) -> bool:
    """Whether a running run was handed back by an orderly stop (a drain past its grace):
    its lease has no owner. Nobody died under it, so it is no suspect."""
    return run.status is RunStatus.RUNNING and run.lease_owner is None


def claim_verdict(run: Run, now: datetime, *, alone: bool = False) -> ClaimVerdict:
    """What claiming this due run does. Checked in this order, each one final:

    cancelled while its worker died -> cancelled; deadline passed -> dead (deadline);
    paused -> left alone (it is due only for its deadline); pause requested while its worker
    died -> paused; execution budget spent by a dead worker -> failed attempt (timeout);
    POISON_CRASHES crashes charged -> dead (poison); a suspect and a claimer that does not run
    it alone -> held (suspect); else claimed.

    Poison is charged only to the run whose execution killed its worker. Several runs share
    a daemon, so a crash alone cannot say which one did it: every run reclaimed from a dead
    worker (its lease lapsed) becomes a suspect, and a suspect is claimed only by a claimer
    that runs it `alone`: a worker process of its own (flowctl.daemon.isolation), beside
    which the daemon goes on. A crash is charged to it only by that daemon, seeing its
    isolated worker die while it lived itself (`charge_crash`), never at a reclaim: a whole
    process group killed at once charges nobody. A run released by a drain (`released`) is
    no suspect. A new checkpoint or any end clears the suspicion and the charges; so
    healthy runs merely in flight complete.
    """
    lapsed = run.status is RunStatus.RUNNING  # a due running run: its lease lapsed or was let go
    if lapsed and run.cancel_requested:
        return _ends(ending(ErrorKind.CANCELLED, run))
    if run.deadline is not None and run.deadline <= now:
        return _ends(ending(ErrorKind.DEADLINE, run))
    if run.status is RunStatus.PAUSED:
        return ClaimVerdict(ClaimAction.SKIP)
    if lapsed and run.pause_requested:
        return ClaimVerdict(ClaimAction.PAUSE)
    if lapsed and run.timeout is not None and run.exec_spent >= run.timeout:
        return _ends(ending(ErrorKind.TIMEOUT, run))
    died = lapsed and run.lease_owner is not None  # not released: its worker died (or hung)
    reclaims = run.reclaims + 1 if died else run.reclaims
    crashes = run.crashes
    suspect = run.suspect or died
    if crashes >= POISON_CRASHES:
        return _ends(ending(ErrorKind.POISON, run, crashes=crashes))
    if suspect and not alone:
        return ClaimVerdict(ClaimAction.SUSPECT, crashes=crashes, suspect=True, reclaims=reclaims)
    if not (reclaims or crashes or suspect):
        return _PLAIN_CLAIM  # the usual claim, of a run no worker died under: one shared value
    return ClaimVerdict(
        ClaimAction.CLAIM, reclaims=reclaims, reclaimed=died, crashes=crashes, suspect=suspect
    )


_PLAIN_CLAIM = ClaimVerdict(ClaimAction.CLAIM)


def _ends(end: Ending) -> ClaimVerdict:
    """The claim ends the run here (a terminal status) or fails its attempt (none)."""
    if end.status is None:
        return ClaimVerdict(ClaimAction.FAIL, error=end.error)
    return ClaimVerdict(ClaimAction.END, end.status, end.error)


def suspect_order(suspects: Iterable[tuple[str, int]], spread: bytes = b"") -> list[str]:
    """Due suspects, (run_id, crashes charged) in due order, in the order a daemon isolates
    them: the fewest crashes first, so a run that keeps killing its worker does not hold up
    the others. Among equals, due order; or, with a `spread` (a daemon's own random
    bytes), an order of that daemon's own, so that daemons looking at once start workers
    for different suspects rather than each for the same oldest ones (one claims it, the
    others' workers start, find it taken and exit, at about half a second of CPU each)."""
    if not spread:
        return [run_id for run_id, _ in sorted(suspects, key=lambda s: s[1])]
    return [
        run_id
        for _, _, run_id in sorted(
            (crashes, hashlib.blake2b(run_id.encode(), key=spread, digest_size=8).digest(), run_id)
            for run_id, crashes in suspects
        )
    ]


def claim_wakes(prev: RunStatus, run_at: datetime, created_at: datetime) -> bool:
    """Whether claiming a run due at `run_at` wakes it (a `woke` event with its lateness,
    what `status` reports as wake lateness): it slept, waited, or was queued for later than
    its creation (--in/--at, a retry); a run queued to start now only starts."""
    return prev in (RunStatus.SLEEPING, RunStatus.WAITING) or (
        prev is RunStatus.QUEUED and run_at > created_at
    )


def agenda_kind(status: RunStatus, attempt: int, retrying_step: bool) -> str:
    """What an active run's next due time is, for `flowctl agenda`: a sleeper's wake, a
    signal wait's timeout, or a queued run's retry (a later attempt, or a step waiting to
    retry) or start."""
    if status is RunStatus.SLEEPING:
        return "wake"
    if status is RunStatus.WAITING:
        return "timeout"
    return "retry" if (retrying_step or attempt > 1) else "start"


def cancel_error(reason: str | None, by: str | None = None) -> dict[str, Any]:
    """A cancelled run's recorded error: the operator's reason, or the one default text."""
    err: dict[str, Any] = {
        "type": "Cancelled",
        "kind": ErrorKind.CANCELLED,
        "message": reason or "cancelled by operator",
    }
    if by:
        err["by"] = by
    return err


# ---------------------------------------------------------------------------
# How a run ends


@dataclass(frozen=True)
class Ending:
    """What stopping a run a given way makes of it. `status` is its terminal status, or
    None when only this attempt failed (next_attempt then retries or dead-letters it).
    `error` is what is recorded: its `kind` and its `message`, one text per ending whether
    a live handler stopped (the engine) or a claim found the run so (claim_verdict)."""

    status: RunStatus | None
    error: dict[str, Any]

    @property
    def message(self) -> str:
        return str(self.error["message"])


def stop_kind(stop: BaseException) -> ErrorKind:
    """How a handler stopped, as the kind of its ending: told by the heartbeat (cancel,
    deadline, budget), replay meeting another call, an error no retry can fix, else raised."""
    if isinstance(stop, Cancelled):
        return ErrorKind.CANCELLED
    if isinstance(stop, DeadlineExceededError):
        return ErrorKind.DEADLINE
    if isinstance(stop, ExecutionTimeoutError):
        return ErrorKind.TIMEOUT
    if isinstance(stop, NonDeterminismError):
        return ErrorKind.NONDETERMINISM
    if is_non_retryable(stop):
        return ErrorKind.NON_RETRYABLE
    return ErrorKind.RAISED


def ending(
    kind: ErrorKind, run: Run, *, raised: dict[str, Any] | None = None, crashes: int = 0
) -> Ending:
    """The one place a stopped run's status, error kind and message are decided.

    `run` is the run as the one ending it sees it (for a cancel, with the operator's
    reason). Deadline, execution timeout, cancel and poison (`crashes` charged) have
    flowctl's own message; the other kinds record the exception itself (`raised`, as
    error_dict made it): non-retryable and non-determinism end the run dead, a raise or a
    workflow that did not load fails the attempt.
    """
    if kind is ErrorKind.CANCELLED:
        return Ending(RunStatus.CANCELLED, cancel_error(run.cancel_reason))
    if kind is ErrorKind.DEADLINE:
        # as people read times (model.local_text), in UTC: the message is stored, and read
        # on hosts in other zones than the daemon's that wrote it
        when = (
            f"deadline {run.deadline.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            if run.deadline
            else "the run's deadline"
        )
        return Ending(RunStatus.DEAD, _own("DeadlineExceededError", kind, f"{when} passed"))
    if kind is ErrorKind.TIMEOUT:
        budget = f" of {run.timeout:g}s" if run.timeout is not None else ""
        text = f"attempt {run.attempt} used its execution budget{budget}"
        return Ending(None, _own("ExecutionTimeoutError", kind, text))
    if kind is ErrorKind.POISON:
        text = (
            f"its worker died {crashes} times while running it alone, without a new"
            " checkpoint: it is killing its worker"
        )
        return Ending(RunStatus.DEAD, _own("PoisonRunError", kind, text))
    error = {**(raised or {"type": "Error", "message": str(kind)}), "kind": kind}
    if kind is ErrorKind.NON_RETRYABLE:
        error.update(
            attempt=run.attempt,
            non_retryable=True,
            dead_reason="not retried: no retry can fix this error",
        )
    return Ending(None if kind.retryable else RunStatus.DEAD, error)


def _own(type_: str, kind: ErrorKind, message: str) -> dict[str, Any]:
    return {"type": type_, "kind": kind, "message": message}


# ---------------------------------------------------------------------------
# After a failed attempt


@dataclass(frozen=True)
class NextAttempt:
    """Retry at `retry_at` (the next attempt is queued), or dead-letter (`retry_at` None).
    `spends`: whether the retry is a new attempt (False: the same attempt again)."""

    retry_at: datetime | None
    error: dict[str, Any]  # as recorded: with the attempt, and why it is dead if it is
    spends: bool = True


LOAD_RETRY_FIRST = 1.0  # seconds before a run whose workflow did not load is tried again
LOAD_RETRY_MAX = 600.0  # ... doubling each time, at most this (the attempts' own cap)


def load_retry_delay(failures: int) -> timedelta:
    """How long a run waits after its workflow failed to load `failures` times in a row."""
    return timedelta(seconds=min(LOAD_RETRY_MAX, LOAD_RETRY_FIRST * 2 ** min(failures - 1, 30)))


def load_failures(run: Run) -> int:
    """How many times in a row the run's workflow has failed to load in its current attempt
    (0: it is not waiting for its workflow to load). Read from its last recorded error."""
    last = run.error or {}
    if error_kind(last) is not ErrorKind.LOAD or last.get("attempt") != run.attempt:
        return 0
    return max(1, int(last.get("load_failures", 1) or 1))


def next_attempt(
    run: Run, error: dict[str, Any], now: datetime, *, retry_at: datetime | None = None
) -> NextAttempt:
    """After attempt `run.attempt` failed with `error`: when the next attempt starts, if any.

    A retryable kind with attempts left is retried after the run's backoff (or at
    `retry_at`), clamped to the deadline: the claim at the deadline dead-letters it.
    Anything else is dead now; exhausted attempts say so in `dead_reason`.

    A workflow that did not load (a file saved half-edited, an import error) spends no
    attempt: nothing of the run ran, and the fix is the code's, so the same attempt is
    tried again, 1 s doubling to 10 min, until it loads, the deadline passes or an operator
    cancels it (as Temporal retries a workflow task). `load_failures` in the error counts
    the failures in a row, carried from the run's last error.
    """
    kind = error_kind(error)
    error = {**error, "attempt": run.attempt}
    if kind is ErrorKind.LOAD:
        failures = load_failures(run) + 1
        error["load_failures"] = failures
        if retry_at is None:
            retry_at = now + load_retry_delay(failures)
        return NextAttempt(parked_run_at(retry_at, deadline=run.deadline), error, spends=False)
    if not kind.retryable:
        return NextAttempt(None, error)
    if run.attempt >= run.max_attempts:
        return NextAttempt(
            None, {**error, "dead_reason": f"attempts exhausted ({run.attempt}/{run.max_attempts})"}
        )
    if retry_at is None:
        policy = RetryPolicy.from_json(run.backoff) if run.backoff else DEFAULT_RUN_RETRY
        retry_at = now + policy.delay(run.attempt)
    return NextAttempt(parked_run_at(retry_at, deadline=run.deadline), error)


def notification_state(error: str | None, retry_at: datetime | None) -> str:
    """Where a notification stands after one try: delivered (no error), pending again at
    `retry_at`, or failed for good (an error and no retry left). Both stores apply it."""
    if error is None:
        return "delivered"
    return "pending" if retry_at is not None else "failed"
