"""Rows to flowctl values, shared by both backends: the runs and journal column lists and
their decoders (times are UTC microseconds, JSON is text in both), and the columns a
checkpoint or an end clears, and the LIKE pattern of a search. One copy, so the two stores
decode a row (and match a search) the same way."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from flowctl.model import EPOCH, CallKind, EntryState, JournalEntry, Run, RunStatus, to_us

# A run's first event when it says nothing its row does not: {"attempt": 1} at
# runs.created_at. Not stored (SQLite migration 18); the timeline reads add it back.
PLAIN_CREATED = '{"attempt":1}'
# A run's definition, stored once in `definitions` and joined back when a run is read.
DEFINITION_COLUMNS = ("target", "kind", "source_hash", "source_path", "cwd")


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# model.from_us(us) inlined (one timedelta added to the epoch): decoding a run's row makes
# up to eight, and the daemon decodes one per claim, so the call itself is saved too.
_EPOCH = EPOCH
_delta = timedelta


# RunStatus(text) is an Enum call (a lookup through EnumMeta.__call__); a dict is one probe.
class _Statuses(dict[Any, RunStatus]):
    def __missing__(self, text: Any) -> RunStatus:
        return RunStatus(text)  # not a status: the same ValueError as before


_STATUS = _Statuses((str(s), s) for s in RunStatus)


def _dt(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + _delta(0, 0, us)


def _us(when: datetime | None) -> int | None:
    return None if when is None else to_us(when)


_RUN_COLUMNS = (
    "run_id, workflow, target, kind, status, input, created_at, run_at, started_at, finished_at,"
    " attempt, max_attempts, deadline, timeout_us, exec_spent_us, result, error, lease_owner,"
    " lease_until, fence, reclaims, cancel_requested, cancel_reason, key, parent_run_id,"
    " schedule, scheduled_at, cwd, source_hash, source_path, backoff, pause_requested,"
    " paused_status, paused_run_at, current_step, secret_keys, suspect, solo, crashes,"
    " step_started_at, traceparent, priority, flow_key, flow_limit, held_at, flow_wait,"
    " debounce_key"
)

_new_run = object.__new__


def _run_from_row(r: Sequence[Any]) -> Run:
    """A Run from a row of _RUN_COLUMNS. Built as `Run(...)` would be, field by field in
    declaration order, but without the frozen dataclass's per-field object.__setattr__
    (Run has no __post_init__, no slots; test_mapping checks the two agree): the daemon
    decodes one row per claim, every store read of a run one more."""
    epoch, delta, loads = _EPOCH, _delta, json.loads
    run = _new_run(Run)
    run.__dict__.update(
        run_id=r[0],
        workflow=r[1],
        target=r[2],
        kind=r[3],
        status=_STATUS[r[4]],
        input=loads(r[5]),
        created_at=epoch + delta(0, 0, r[6]),
        run_at=None if r[7] is None else epoch + delta(0, 0, r[7]),
        started_at=None if r[8] is None else epoch + delta(0, 0, r[8]),
        finished_at=None if r[9] is None else epoch + delta(0, 0, r[9]),
        attempt=r[10],
        max_attempts=r[11],
        deadline=None if r[12] is None else epoch + delta(0, 0, r[12]),
        timeout=None if r[13] is None else r[13] / 1e6,
        exec_spent=r[14] / 1e6,
        result=None if r[15] is None else loads(r[15]),
        error=None if r[16] is None else loads(r[16]),
        lease_owner=r[17],
        lease_until=None if r[18] is None else epoch + delta(0, 0, r[18]),
        fence=r[19],
        reclaims=r[20],
        cancel_requested=bool(r[21]),
        cancel_reason=r[22],
        key=r[23],
        parent_run_id=r[24],
        schedule=r[25],
        scheduled_at=None if r[26] is None else epoch + delta(0, 0, r[26]),
        cwd=r[27],
        source_hash=r[28],
        source_path=r[29],
        backoff=None if r[30] is None else loads(r[30]),
        pause_requested=bool(r[31]),
        paused_status=None if r[32] is None else _STATUS[r[32]],
        paused_run_at=None if r[33] is None else epoch + delta(0, 0, r[33]),
        current_step=r[34],
        secret_keys=() if r[35] is None else tuple(loads(r[35]) or ()),
        suspect=bool(r[36]),
        solo=bool(r[37]),
        crashes=r[38],
        step_started_at=None if r[39] is None else epoch + delta(0, 0, r[39]),
        traceparent=r[40],
        priority=r[41],
        flow_key=r[42],
        flow_limit=r[43],
        held_at=None if r[44] is None else epoch + delta(0, 0, r[44]),
        flow_wait=r[45],
        debounce_key=r[46],
    )
    return run


# Progress (a checkpoint) or an end: no longer a suspect, the crashes charged forgiven.
_CLEARED = "reclaims = 0, suspect = 0, crashes = 0"

_ENTRY_COLUMNS = (
    "run_id, call_index, kind, name, state, value, wake_at, recorded_at, resolved_at,"
    " tries, duration_us"
)


def _entry_from_row(r: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        run_id=r[0],
        call_index=r[1],
        kind=CallKind(r[2]),
        name=r[3],
        state=EntryState(r[4]),
        value=_loads(r[5]),
        wake_at=_dt(r[6]),
        recorded_at=_dt(r[7]),
        resolved_at=_dt(r[8]),
        tries=r[9],
        duration=None if r[10] is None else r[10] / 1e6,
    )


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` anywhere (with ESCAPE '\\'), for both backends."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
