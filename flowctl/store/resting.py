"""Resting runs: a short sleep or step retry waited out in memory by its handler (issue 40).

The daemon's batch runner keeps a handler whose run sleeps (or waits to retry a step) for
a short while on its stack, rather than unwind it, park the run and claim and replay it
at the wake. Its run rests: `rest_run` journals the pending call (a sleep with its wake
time, a failed try with its retry time) and gives up the lease, leaving the run
`running` with no owner and due at `run_at`: the end of the lease it let go, or the wake
plus a margin if that is later. So:

- no other claimer takes it before then; the handler takes it back at the wake with
  `resume_run` (a new fence, its sleep resolved, its `woke` event), with no claim, no
  replay and no read, and with the lease it let go while that has long enough to run
  (else a new one);
- if the daemon dies or stops meanwhile, any daemon claims it at `run_at` as a run a
  stopping daemon handed back (no suspect: nobody died in it), and its replay finds the
  sleep due, or the step to retry;
- its status does not move (running), so neither write touches the status indexes or
  the run counts, and where the lease is kept neither moves its run_at: no index entry
  moves at all.

A round writes its rests together (`RESTS`) and its resumes together (`RESUMES`); each
applies only while the run is still the writer's as it left it, else writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowctl.model import JournalEntry, RunStatus, to_us
from flowctl.store.claims import SLEEPS_DUE
from flowctl.store.core import StoreCore
from flowctl.store.fenced import UPSERT_ENTRY
from flowctl.store.records import Lease, checkpoint_params
from flowctl.store.round import Write, all_or_none, run_alone
from flowctl.store.rows import CLEARED, FENCED, EventRow, add_events
from flowctl.store.rows import event as timeline_row
from flowctl.store.sql import Tx

# A held run rests: its lease given up, unless a cancel or a pause was asked (the handler
# then parks it the usual way). Its run_at, the end of the lease it held, stays where it is
# when that is at or after the margin (_REST_KEPT): nobody claims it before then either,
# and the UPDATE moves no index entry (run_at is in five of the runs table's indexes; an
# UPDATE that sets it rewrites each entry, even to the same value). Else (a lease shorter
# than the rest) _REST makes the margin its run_at. A row applies under at most one of the
# two: the first leaves it with no owner, which the second's FENCED no longer matches.
# `rested_by` names the daemon it rests in (the lease's owner, as the row held it): if
# that daemon is found dead, the run is due at once (Leases.expire_owner).
_GIVE_UP = (
    f"rested_by = lease_owner, lease_owner = NULL, lease_until = NULL, exec_spent_us = ?, {CLEARED}"
)
_ASKED_NOTHING = "cancel_requested = 0 AND pause_requested = 0"
# (exec_spent_us, run_id, fence, owner, margin)
_REST_KEPT = f"UPDATE runs SET {_GIVE_UP} WHERE {FENCED} AND {_ASKED_NOTHING} AND run_at >= ?"
# (margin, exec_spent_us, run_id, fence, owner)
_REST = f"UPDATE runs SET run_at = ?, {_GIVE_UP} WHERE {FENCED} AND {_ASKED_NOTHING}"

# The resting run taken back by its handler, while nobody has claimed it since (same
# fence, no owner, still running). The lease it let go is taken back as it stands when it
# still ends at or after `keep_from` (_RESUME_KEPT: no index entry moves, the heartbeat
# extends it as any other); else a new one (_RESUME). As for rests, a row applies under
# at most one: the first gives it an owner.
_TAKEN_BACK = "WHERE run_id = ? AND fence = ? AND lease_owner IS NULL AND status = 'running'"
# (owner, run_id, fence, keep_from)
_RESUME_KEPT = (
    "UPDATE runs SET lease_owner = ?, lease_until = run_at, fence = fence + 1,"
    f" rested_by = NULL {_TAKEN_BACK} AND run_at >= ?"
)
# (owner, lease_until, lease_until, run_id, fence)
_RESUME = (
    "UPDATE runs SET lease_owner = ?, lease_until = ?, run_at = ?, fence = fence + 1,"
    f" rested_by = NULL {_TAKEN_BACK}"
)
# A resting run let go for good (its daemon stops): due now. (run_at, run_id, fence)
_RELEASE = (
    "UPDATE runs SET run_at = ?, rested_by = NULL WHERE run_id = ? AND fence = ?"
    " AND lease_owner IS NULL AND status = 'running'"
)
# The round's resumes together: only those with no cancel or pause asked meanwhile.
_RESUME_KEPT_PLAIN = f"{_RESUME_KEPT} AND {_ASKED_NOTHING}"
_RESUME_PLAIN = f"{_RESUME} AND {_ASKED_NOTHING}"
_ASKED = " RETURNING cancel_requested, pause_requested"


class _Rest:
    """What one rest writes, made before the write's turn: the parameters of _REST_KEPT
    (`kept`) and of _REST (`params`), its journal rows and its event."""

    __slots__ = ("event", "kept", "params", "rows")

    def __init__(self, params: list[Any], rows: list[list[Any]], event: EventRow) -> None:
        self.params, self.rows, self.event = params, rows, event
        self.kept = [*params[1:], params[0]]


class _Resume:
    """What one resume writes, made before the write's turn: its UPDATE's parameters, its
    `woke` event, and its sleep's resolution (None for a retry). `kept`: the parameters
    of _RESUME_KEPT (None: a new lease in any case)."""

    __slots__ = ("events", "kept", "params", "sleeps")

    def __init__(
        self,
        lease: Lease,
        parked: RunStatus,
        scheduled: datetime,
        now_us: int,
        until_us: int,
        attempt: int,
        keep_from: datetime | None,
    ) -> None:
        run_id = lease.run_id
        self.params = [lease.owner, until_us, until_us, run_id, lease.fence]
        self.kept = (
            None if keep_from is None else [lease.owner, run_id, lease.fence, to_us(keep_from)]
        )
        # Its own handler takes it back: no claim, so no `claimed` event (nor one counted
        # in the claims metric); the `woke` event names the fence it goes on under.
        woke = {
            "from": str(parked),
            "scheduled": scheduled.isoformat(timespec="microseconds"),
            "late_ms": round((now_us - to_us(scheduled)) / 1000, 3),
            "fence": lease.fence + 1,
            "attempt": attempt,
        }
        self.events = [timeline_row(run_id, now_us, "woke", woke)]
        # A sleep's entry resolves, as a claim resolves it (a retry parks on no sleep).
        self.sleeps = [now_us, run_id, now_us] if parked is RunStatus.SLEEPING else None


@dataclass(frozen=True, slots=True)
class Resumed:
    """A resume that applied: the new lease, and what an operator asked meanwhile (the
    handler is told, as a heartbeat would tell it)."""

    lease: Lease
    cancel: bool = False
    pause: bool = False


class Resting(StoreCore):
    """The batch runner's side of a run whose handler waits for its wake in memory."""

    def rest_run(
        self,
        lease: Lease,
        entry: JournalEntry,
        until: datetime,
        now: datetime,
        exec_spent: float,
        event: tuple[str, dict[str, Any]],
        *,
        checkpoint: JournalEntry | None = None,
        journaled: bool = False,
    ) -> bool:
        """Journal `entry` (the pending sleep or retry) and let the run rest until `until`
        (see the module docstring); `checkpoint`, the last step's, journaled in the same
        write; `journaled`: `entry` is in the journal already (a replay met it before its
        time), left as it stands, with the time it was recorded. False, writing nothing,
        when the lease is lost or a cancel or pause was asked: the handler then parks it
        as usual."""
        now_us, values = to_us(now), self.values
        rows = []
        if not journaled:
            row = checkpoint_params(values, lease.run_id, entry, now_us)
            row[8] = None  # a pending call is not resolved yet
            rows.append(row)
        if checkpoint is not None:
            rows.insert(0, checkpoint_params(values, lease.run_id, checkpoint, now_us))
        params = [to_us(until), round(exec_spent * 1e6), lease.run_id, lease.fence, lease.owner]
        noted = timeline_row(lease.run_id, now_us, event[0], values.note(event[1]))
        rest = _Rest(params, rows, noted)
        return self._write(lambda tx: _rest(tx, rest), batch=RESTS, params=rest)

    def resume_run(
        self,
        lease: Lease,
        parked: RunStatus,
        scheduled: datetime,
        now: datetime,
        lease_until: datetime,
        attempt: int,
        *,
        keep_from: datetime | None = None,
    ) -> Resumed | None:
        """Take back the run `lease` let rest, as a claim would (a new fence, a `woke`
        event, its sleep resolved) with the lease it let go if that still ends at or after
        `keep_from`, else a new one until `lease_until`: None, writing nothing, when it is
        no longer as its handler left it (claimed by another, ended)."""
        until_us = to_us(lease_until)
        resume = _Resume(lease, parked, scheduled, to_us(now), until_us, attempt, keep_from)
        flags = self._write(lambda tx: _resume(tx, resume), batch=RESUMES, params=resume)
        if flags is None:
            return None
        return Resumed(Lease(lease.run_id, lease.fence + 1, lease.owner), *flags)

    def release_rest(self, lease: Lease, now: datetime) -> bool:
        """The daemon of a resting run's handler stops: the run is due now to any daemon
        (whose replay finds its sleep or retry and parks it until the wake), with a
        `released` event, as a stopping daemon hands back the runs it holds. False: it
        had moved on already (nothing written)."""
        now_us = to_us(now)
        note = timeline_row(
            lease.run_id, now_us, "released", {"by": lease.owner, "reason": "stopped resting"}
        )

        def release(tx: Tx) -> bool:
            if tx.execute(_RELEASE, [now_us, lease.run_id, lease.fence]).rowcount != 1:
                return False
            add_events(tx, [note])
            return True

        return self._write(release)


def _rest(tx: Tx, rest: _Rest) -> bool:
    """One rest, alone: its lease's end kept, or the margin."""
    kept = tx.execute(_REST_KEPT, rest.kept).rowcount == 1
    if not kept and tx.execute(_REST, rest.params).rowcount != 1:
        return False
    _rested(tx, [rest])
    return True


def _rests(tx: Tx, writes: list[Write[Any]]) -> None:
    """A round's rests: each statement once for all of them (all_or_none); if one would
    not apply, each is written alone for its own answer."""
    rests: list[_Rest] = [w.params for w in writes]
    kept = [r.kept for r in rests]
    if not all_or_none(tx, _REST_KEPT, kept, then=(_REST, [r.params for r in rests])):
        for write in writes:
            run_alone(tx, write)
        return
    _rested(tx, rests)
    for write in writes:
        write.result = True


def _rested(tx: Tx, rests: list[_Rest]) -> None:
    """What follows rests that applied: their journal rows and their events."""
    tx.send_many(UPSERT_ENTRY, [row for r in rests for row in r.rows])
    add_events(tx, [r.event for r in rests])


def _resume(tx: Tx, resume: _Resume) -> tuple[bool, bool] | None:
    """One resume, alone: (cancel asked, pause asked), or None when it did not apply."""
    found = None if resume.kept is None else tx.all(_RESUME_KEPT + _ASKED, resume.kept)
    found = found or tx.all(_RESUME + _ASKED, resume.params)
    if not found:
        return None
    _follow(tx, [resume])
    return bool(found[0][0]), bool(found[0][1])


def _resumes(tx: Tx, writes: list[Write[Any]]) -> None:
    """A round's resumes: one executemany of the UPDATE for those with nothing asked
    meanwhile (all_or_none); else each alone, for its own answer."""
    resumes: list[_Resume] = [w.params for w in writes]
    kept = [r.kept for r in resumes if r.kept is not None]
    moved = (_RESUME_PLAIN, [r.params for r in resumes])
    if not all_or_none(tx, _RESUME_KEPT_PLAIN, kept, then=moved):
        for write in writes:
            run_alone(tx, write)
        return
    _follow(tx, resumes)
    for write in writes:
        write.result = (False, False)


def _follow(tx: Tx, resumes: list[_Resume]) -> None:
    """What follows resumes that applied: their sleeps resolved, their events."""
    sleeps = [r.sleeps for r in resumes if r.sleeps is not None]
    if sleeps:
        tx.send_many(SLEEPS_DUE, sleeps)
    add_events(tx, [e for r in resumes for e in r.events])


RESTS = _rests
RESUMES = _resumes

__all__ = ["RESTS", "RESUMES", "Resting", "Resumed"]
