"""Creating runs inside the caller's transaction: their rows, their definition and pinned
source (each stored once), their `created` event, and idempotency keys.

A key already stored returns that run (created False). Where writers run at once on
many hosts, a key a concurrent transaction inserted first makes the INSERT insert
nothing (ON CONFLICT DO NOTHING): the transaction is run again (TransactionConflict) and
then finds that run by its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from flowctl.model import Run, RunStatus, from_us, to_us
from flowctl.store.mapping import _RUN_COLUMNS, _loads, _run_from_row, _us
from flowctl.store.records import NewRun, dumps
from flowctl.store.rows import (
    RUNS,
    RUNS_BY_KEY,
    EventRow,
    add_event,
    add_events,
    event,
    in_chunks,
)
from flowctl.store.sql import TransactionConflict, Tx
from flowctl.store.values import INPUT, Values
from flowctl.transitions import parked_run_at

_RUN_INSERT = (
    "INSERT INTO runs (run_id, workflow, def_id, source, input, status, run_at, created_at,"
    " max_attempts, backoff, deadline, timeout_us, key, parent_run_id, schedule,"
    " scheduled_at, secret_keys, notify, traceparent, priority, flow_key, flow_limit,"
    " debounce_key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT DO NOTHING"
)

# A definition (target, kind, source_hash, source_path, cwd): a missing value and '' are
# one definition, so one with no pinned source is found again, not added once per run.
_DEFINITION_FIND = (
    "SELECT def_id, target, kind, source_hash, source_path, cwd FROM definitions"
    " WHERE target = ? AND kind = ? AND COALESCE(source_hash, '') = COALESCE(?, '')"
    " AND COALESCE(source_path, '') = COALESCE(?, '') AND COALESCE(cwd, '') = COALESCE(?, '')"
)

Known = dict[tuple[Any, ...], Any]  # definitions and sources written in this transaction


def insert_run(tx: Tx, values: Values, new: NewRun, now_us: int) -> tuple[Run, bool]:
    """create_run inside the caller's transaction (a schedule fire creates its runs in the
    same transaction that records the fire): the run and True, or the run already holding
    its idempotency key and False (nothing inserted then)."""
    return insert_runs(tx, values, [new], now_us)[0]


def insert_runs(
    tx: Tx, values: Values, news: Sequence[NewRun], now_us: int
) -> list[tuple[Run, bool]]:
    """create_runs inside the caller's transaction: the keys looked up together, the new
    rows and their events written with one executemany each.

    A key already stored returns that run (False); a key repeated within `news` returns
    the run its first use creates (False), as inserting them one by one would. Inputs
    are sealed by `values`; the runs returned hold them opened."""
    known: Known = {}
    holding = runs_by_keys(tx, values, {new.key for new in news if new.key is not None})
    out: list[tuple[Run, bool]] = []
    rows: list[list[Any]] = []
    events: list[EventRow] = []
    times: dict[int, datetime] = {}  # one datetime per distinct time in the batch
    debounced: dict[str, Run] = {}  # debounce keys taken by a run of this batch
    for new in news:
        if new.key is not None and new.key in holding:
            out.append((holding[new.key], False))
            continue
        if new.debounce_key is not None:
            found = debounced.get(new.debounce_key) or collapse(tx, values, new, now_us)
            if found is not None:
                out.append((found, False))
                continue
            new = replace(new, run_at=from_us(now_us + new.debounce_us))
        params, created, run = _prepared(tx, new, now_us, known, times)
        params[4] = values.seal(params[4], INPUT)  # the input, once _as_read has read it
        rows.append(params)
        if created is not None:
            events.append(created)
        if new.key is not None:
            holding[new.key] = run
        if new.debounce_key is not None:
            debounced[new.debounce_key] = run
        out.append((run, True))
    if tx.many(_RUN_INSERT, rows) != len(rows):
        raise TransactionConflict("an idempotency key was taken by a concurrent transaction")
    add_events(tx, events)
    if not tx.dialect.json_as_written:  # as a read gives it: its JSON in the column's order
        read = _runs_by_ids(tx, values, [run.run_id for run, created in out if created])
        out = [(read[run.run_id], True) if created else (run, False) for run, created in out]
    return out


def collapse(tx: Tx, values: Values, new: NewRun, now_us: int) -> Run | None:
    """A start of a debounced workflow (issue 37, item 4): the run not yet started that
    holds `new`'s debounce key takes `new`'s input and starts once the key has been quiet
    for the period again (a `debounced` event counts each start collapsed into it); None
    when no run holds the key (`new` is then created, due after the period)."""
    row = tx.one(
        f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE debounce_key = ? AND status = 'queued'"
        " AND started_at IS NULL{lock_run}",
        [new.debounce_key],
    )
    if row is None:
        return None
    run, due = _run_from_row(row), now_us + new.debounce_us
    tx.execute(
        "UPDATE runs SET input = ?, run_at = ?, held_at = NULL WHERE run_id = ?",
        [values.seal(dumps(new.input, "the input"), INPUT), due, run.run_id],
    )
    at = from_us(due).isoformat(timespec="microseconds")
    add_event(tx, run.run_id, now_us, "debounced", {"run_at": at})
    found = tx.one(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id = ?", [run.run_id])
    return None if found is None else values.run(_run_from_row(found))


def _runs_by_ids(tx: Tx, values: Values, run_ids: Sequence[str]) -> dict[str, Run]:
    found: dict[str, Run] = {}
    for chunk, marks in in_chunks(run_ids):
        for row in tx.all(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id IN ({marks})", chunk):
            found[row[0]] = values.run(_run_from_row(row))
    return found


def runs_by_keys(tx: Tx, values: Values, keys: set[str]) -> dict[str, Run]:
    """The stored runs holding any of `keys`, by key (each an index seek)."""
    found: dict[str, Run] = {}
    for chunk, marks in in_chunks(sorted(keys)):
        for row in tx.all(
            f"SELECT {_RUN_COLUMNS} FROM {RUNS_BY_KEY} WHERE key IN ({marks})", chunk
        ):
            run = values.run(_run_from_row(row))
            if run.key is not None:
                found[run.key] = run
    return found


def _prepared(
    tx: Tx, new: NewRun, now_us: int, known: Known, times: dict[int, datetime]
) -> tuple[list[Any], EventRow | None, Run]:
    """`new`'s runs row (_RUN_INSERT's parameters), its `created` event when it is not the
    implied one, and the Run a read of that row gives. Its source and definition rows are
    written here (once per hash and per definition in a transaction)."""
    # Due at its start time (now, --in, --at) or at its deadline, whichever is first.
    start_at = _time(times, now_us) if new.run_at is None else new.run_at
    run_at = to_us(parked_run_at(start_at, deadline=new.deadline) or start_at)
    source = new.source
    if source is not None and new.source_hash is not None:  # kept once per hash
        if ("source", new.source_hash) not in known:
            tx.execute(
                "INSERT INTO sources (source_hash, source) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [new.source_hash, source],
            )
            known["source", new.source_hash] = 0
        source = None
    definition = (new.target, new.kind, new.source_hash, new.source_path, new.cwd)
    def_id, stored = _definition(tx, definition, known)
    row = _row(new, def_id, source, run_at, now_us)
    return row, _created_event(new, run_at, now_us), _as_read(row, stored, times)


def _row(new: NewRun, def_id: int, source: str | None, run_at: int, now_us: int) -> list[Any]:
    return [
        new.run_id,
        new.workflow,
        def_id,
        source,
        dumps(new.input, "the input"),
        str(RunStatus.QUEUED),
        run_at,
        now_us,
        new.max_attempts,
        None if new.backoff is None else dumps(new.backoff),
        _us(new.deadline),
        None if new.timeout is None else round(new.timeout * 1e6),
        new.key,
        new.parent_run_id,
        new.schedule,
        _us(new.scheduled_at),
        dumps(sorted(new.secret_keys)) if new.secret_keys else None,
        None if new.notify is None else dumps(new.notify, "the notify override"),
        new.traceparent,
        new.priority,
        new.flow_key,
        new.flow_limit,
        new.debounce_key,
    ]


def _created_event(new: NewRun, run_at: int, now_us: int) -> EventRow | None:
    """The run's `created` event; None for the plain one, {"attempt": 1} at created_at,
    which is implied, not stored (SQLite migration 18)."""
    data: dict[str, Any] = {"attempt": 1}
    if run_at > now_us:
        data["run_at"] = from_us(run_at).isoformat(timespec="microseconds")
    if new.parent_run_id:
        data["parent"] = new.parent_run_id
    if new.schedule:
        data["schedule"] = new.schedule
    return event(new.run_id, now_us, "created", data) if len(data) > 1 else None


def _as_read(row: list[Any], stored: tuple[Any, ...], times: dict[int, datetime]) -> Run:
    """What a read of the row just inserted gives, built without reading it: every value
    as stored, in the types a read gives (`times` shares one datetime per value)."""
    target, kind, source_hash, source_path, cwd = stored
    deadline_us, timeout_us, scheduled_us = row[10], row[11], row[15]
    return Run(
        run_id=row[0],
        workflow=row[1],
        target=target,
        kind=kind,
        status=RunStatus.QUEUED,
        input=_loads(row[4]),
        created_at=_time(times, row[7]),
        run_at=_time(times, row[6]),
        max_attempts=row[8],
        deadline=None if deadline_us is None else _time(times, deadline_us),
        timeout=None if timeout_us is None else timeout_us / 1e6,
        key=row[12],
        parent_run_id=row[13],
        schedule=row[14],
        scheduled_at=None if scheduled_us is None else _time(times, scheduled_us),
        cwd=cwd,
        source_hash=source_hash,
        source_path=source_path,
        backoff=_loads(row[9]),
        secret_keys=() if row[16] is None else tuple(_loads(row[16]) or ()),
        traceparent=row[18],
        priority=row[19],
        flow_key=row[20],
        flow_limit=row[21],
        debounce_key=row[22],
    )


def _time(times: dict[int, datetime], us: int) -> datetime:
    """The datetime of `us`, made once per value in `times`."""
    when = times.get(us)
    if when is None:
        when = times[us] = from_us(us)
    return when


def _definition(tx: Tx, definition: tuple[Any, ...], known: Known) -> tuple[int, tuple[Any, ...]]:
    """The def_id of (target, kind, source_hash, source_path, cwd), added when new, with
    the definition's row as stored (a NULL and an empty text are one definition: the row
    holds whichever came first). `known` is valid only within this transaction."""
    found: tuple[int, tuple[Any, ...]] | None = known.get(definition)
    if found is not None:
        return found
    tx.execute(
        "INSERT INTO definitions (target, kind, source_hash, source_path, cwd)"
        " VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
        definition,
    )
    row = tx.one(_DEFINITION_FIND, definition)
    if row is None:  # another writer's, not committed when ours ran into it
        raise TransactionConflict("a workflow definition was added by a concurrent transaction")
    def_id, *stored = row
    known[definition] = found = (int(def_id), tuple(stored))
    return found


def definition_id(tx: Tx, definition: tuple[Any, ...]) -> int:
    """_definition's def_id alone, for a run copied in whole (flowctl copy)."""
    return _definition(tx, definition, {})[0]
