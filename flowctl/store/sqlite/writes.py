"""Writes several transitions share, each made inside the caller's transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.model import (
    Run,
    RunStatus,
    from_us,
    to_us,
)
from flowctl.store.records import NewRun, dumps
from flowctl.store.sqlite.rows import (
    _CLEARED,
    _RUN_COLUMNS,
    _RUNS_BY_KEY_JOINED,
    TIMELINE_INSERT,
    _add_event,
    _dt,
    _event,
    _first_line,
    _in_chunks,
    _load_run,
    _loads,
    _run_from_row,
    _us,
)
from flowctl.transitions import (
    Applied,
    error_kind,
    next_attempt,
    parked_run_at,
    pause,
)

_ACTIVE_SQL = "('queued', 'running', 'sleeping', 'waiting', 'paused')"
# A run of a schedule that is active and not held behind another (overlap=queue). A held
# run is queued with run_at NULL, which no claim and no timer wheel ever picks up.
_RUNNING_OF_SCHEDULE = (
    f"schedule = ? AND status IN {_ACTIVE_SQL} AND NOT (status = 'queued' AND run_at IS NULL)"
    " AND NOT (status = 'paused' AND paused_status = 'queued' AND paused_run_at IS NULL)"
)


def _insert_run(
    c: sqlite3.Connection,
    new: NewRun,
    now_us: int,
    definitions: dict[tuple[Any, ...], Any] | None = None,
) -> tuple[Run, bool]:
    """create_run inside the caller's transaction (a schedule fire creates its runs in the
    same transaction that records the fire). `definitions` remembers the definitions found
    in this transaction, so a batch of runs of one workflow looks its definition up once.
    Returns the run and True, or the run already holding its idempotency key and False."""
    return _insert_row(c, new, now_us, definitions)


def _insert_rows(
    c: sqlite3.Connection, news: Sequence[NewRun], now_us: int
) -> list[tuple[Run, bool]]:
    """create_runs inside the caller's transaction: the keys looked up together, the new
    rows and their events written with one executemany each.

    A key already stored returns that run (False); a key repeated within `news` returns
    the run its first use creates (False), as inserting them one by one would."""
    definitions: dict[tuple[Any, ...], Any] = {}  # this transaction's lookups
    held = _runs_by_keys(c, {new.key for new in news if new.key is not None})
    out: list[tuple[Run, bool]] = []
    rows: list[list[Any]] = []
    events: list[tuple[str, int, str, str | None]] = []
    times: dict[int, datetime] = {}  # one datetime per distinct time in the batch
    for new in news:
        if new.key is not None and new.key in held:
            out.append((held[new.key], False))
            continue
        params, event, run = _prepared(c, new, now_us, definitions, times)
        rows.append(params)
        if event is not None:
            events.append(event)
        if new.key is not None:
            held[new.key] = run
        out.append((run, True))
    c.executemany(_RUN_INSERT, rows)
    c.executemany(TIMELINE_INSERT, events)
    return out


def _runs_by_keys(c: sqlite3.Connection, keys: set[str]) -> dict[str, Run]:
    """The stored runs holding any of `keys`, by key (each an index seek on runs_key)."""
    found: dict[str, Run] = {}
    for chunk, marks in _in_chunks(sorted(keys)):
        for row in c.execute(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS_BY_KEY_JOINED} WHERE key IN ({marks})", chunk
        ):
            run = _run_from_row(row)
            assert run.key is not None  # selected by key
            found[run.key] = run
    return found


def _insert_row(
    c: sqlite3.Connection,
    new: NewRun,
    now_us: int,
    definitions: dict[tuple[Any, ...], Any] | None,
) -> tuple[Run, bool]:
    """Insert `new`'s row (and its definition, source and created event) and return it as
    read back, built without reading it; or the run that already holds its idempotency
    key, with False (nothing inserted then)."""
    if new.key is not None:
        row = c.execute(
            f"SELECT {_RUN_COLUMNS} FROM {_RUNS_BY_KEY_JOINED} WHERE key = ?", [new.key]
        ).fetchone()
        if row is not None:
            return _run_from_row(row), False
    params, event, run = _prepared(c, new, now_us, definitions, {})
    c.execute(_RUN_INSERT, params)
    if event is not None:
        c.execute(TIMELINE_INSERT, event)
    return run, True


_RUN_INSERT = (
    "INSERT INTO runs (run_id, workflow, def_id, source, input, status, run_at, created_at,"
    " max_attempts, backoff, deadline, timeout_us, key, parent_run_id, schedule,"
    " scheduled_at, secret_keys, notify) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


def _prepared(
    c: sqlite3.Connection,
    new: NewRun,
    now_us: int,
    definitions: dict[tuple[Any, ...], Any] | None,
    times: dict[int, datetime],
) -> tuple[list[Any], tuple[str, int, str, str | None] | None, Run]:
    """`new`'s runs row (_RUN_INSERT's parameters), its `created` event when it is not the
    implied one, and the Run a read of that row gives. Its source and definition rows are
    written here (once per hash and per definition in a batch); `times` shares one
    datetime per microsecond value between the runs of a batch (datetimes are immutable)."""
    # Due at its start time (now, --in, --at) or at its deadline, whichever is first.
    start_at = _time(times, now_us) if new.run_at is None else new.run_at
    run_at = to_us(parked_run_at(start_at, deadline=new.deadline) or start_at)
    # The pinned text is kept once per definition hash (sources), not in every run row.
    source = new.source
    if source is not None and new.source_hash is not None:
        seen = ("source", new.source_hash)  # once per hash in a batch, like definitions
        if definitions is None or seen not in definitions:
            c.execute(
                "INSERT OR IGNORE INTO sources (source_hash, source) VALUES (?, ?)",
                [new.source_hash, source],
            )
            if definitions is not None:
                definitions[seen] = 0
        source = None
    definition = (new.target, new.kind, new.source_hash, new.source_path, new.cwd)
    def_id, stored = _definition(c, definition, definitions)
    input_json = dumps(new.input, "the input")
    backoff = None if new.backoff is None else dumps(new.backoff)
    secret_keys = dumps(sorted(new.secret_keys)) if new.secret_keys else None
    timeout_us = None if new.timeout is None else round(new.timeout * 1e6)
    deadline_us = _us(new.deadline)
    scheduled_us = _us(new.scheduled_at)
    params = [
        new.run_id,
        new.workflow,
        def_id,
        source,
        input_json,
        RunStatus.QUEUED,
        run_at,
        now_us,
        new.max_attempts,
        backoff,
        deadline_us,
        timeout_us,
        new.key,
        new.parent_run_id,
        new.schedule,
        scheduled_us,
        secret_keys,
        None if new.notify is None else dumps(new.notify, "the notify override"),
    ]
    event = None
    data: dict[str, Any] = {"attempt": 1}
    if run_at > now_us:
        data["run_at"] = from_us(run_at).isoformat(timespec="microseconds")
    if new.parent_run_id:
        data["parent"] = new.parent_run_id
    if new.schedule:
        data["schedule"] = new.schedule
    if len(data) > 1:  # the plain one, {"attempt": 1} at created_at, is implied (migration 18)
        event = _event(new.run_id, now_us, "created", data)
    # What _load_run would read back: every value as stored, in the types a read gives.
    target, kind, source_hash, source_path, cwd = stored
    run = Run(
        run_id=new.run_id,
        workflow=new.workflow,
        target=target,
        kind=kind,
        status=RunStatus.QUEUED,
        input=_loads(input_json),
        created_at=_time(times, now_us),
        run_at=_time(times, run_at),
        max_attempts=new.max_attempts,
        deadline=None if deadline_us is None else _time(times, deadline_us),
        timeout=None if timeout_us is None else timeout_us / 1e6,
        key=new.key,
        parent_run_id=new.parent_run_id,
        schedule=new.schedule,
        scheduled_at=None if scheduled_us is None else _time(times, scheduled_us),
        cwd=cwd,
        source_hash=source_hash,
        source_path=source_path,
        backoff=None if backoff is None else _loads(backoff),
        secret_keys=() if secret_keys is None else tuple(_loads(secret_keys) or ()),
    )
    return params, event, run


def _time(times: dict[int, datetime], us: int) -> datetime:
    """The datetime of `us`, made once per value in `times`."""
    when = times.get(us)
    if when is None:
        when = times[us] = from_us(us)
    return when


def _definition(
    c: sqlite3.Connection,
    definition: tuple[Any, ...],
    known: dict[tuple[Any, ...], Any] | None = None,
) -> tuple[int, tuple[Any, ...]]:
    """The def_id of (target, kind, source_hash, source_path, cwd), added when new, inside
    the caller's transaction, with that definition's row as stored (a NULL and an empty
    text are one definition: the row holds whichever came first). `known` is valid only
    within that transaction (a rollback would take a new definition with it)."""
    if known is not None and definition in known:
        return known[definition]  # type: ignore[no-any-return]
    c.execute(
        "INSERT OR IGNORE INTO definitions (target, kind, source_hash, source_path, cwd)"
        " VALUES (?,?,?,?,?)",
        definition,
    )
    def_id, *stored = c.execute(
        "SELECT def_id, target, kind, source_hash, source_path, cwd FROM definitions"
        " WHERE target = ? AND kind = ? AND IFNULL(source_hash, '') = IFNULL(?, '')"
        " AND IFNULL(source_path, '') = IFNULL(?, '') AND IFNULL(cwd, '') = IFNULL(?, '')",
        definition,
    ).fetchone()
    found = (int(def_id), tuple(stored))
    if known is not None:
        known[definition] = found
    return found


def _definition_id(
    c: sqlite3.Connection,
    definition: tuple[Any, ...],
    known: dict[tuple[Any, ...], Any] | None = None,
) -> int:
    """_definition's def_id alone."""
    return _definition(c, definition, known)[0]


def _fail(
    c: sqlite3.Connection,
    run: Run,
    error: dict[str, Any],
    now_us: int,
    *,
    retry_at: int | None = None,
    timeline_extra: dict[str, Any] | None = None,
) -> Applied:
    """Apply next_attempt(): queue the next attempt, or dead-letter the run."""
    verdict = next_attempt(run, error, from_us(now_us), retry_at=_dt(retry_at))
    error = verdict.error
    kind = error_kind(error)
    data = {"attempt": run.attempt, "kind": str(kind), "error": _first_line(error)}
    data.update(timeline_extra or {})
    events = [_event(run.run_id, now_us, kind.label, data)]
    if verdict.retry_at is not None:
        at = to_us(verdict.retry_at)
        if verdict.spends:
            # A new attempt starts from the first recorded step error: checkpoints before
            # it stand. The same attempt again (its workflow did not load) keeps all.
            c.execute(
                "DELETE FROM journal WHERE run_id = ? AND call_index >= (SELECT MIN(call_index)"
                " FROM journal WHERE run_id = ? AND state = 'error')",
                [run.run_id, run.run_id],
            )
        c.execute(
            "UPDATE runs SET status = 'queued', run_at = ?, attempt = attempt + ?, error = ?,"
            " exec_spent_us = CASE WHEN ? THEN 0 ELSE exec_spent_us END, lease_owner = NULL,"
            f" lease_until = NULL, solo = 0, {_CLEARED} WHERE run_id = ?",
            [at, int(verdict.spends), dumps(error), verdict.spends, run.run_id],
        )
        events.append(
            _event(
                run.run_id,
                now_us,
                "retry scheduled",
                {
                    "attempt": run.attempt + int(verdict.spends),
                    "at": from_us(at).isoformat(timespec="microseconds"),
                },
            )
        )
        c.executemany(TIMELINE_INSERT, events)
        if run.pause_requested:  # it stopped: the requested pause takes effect now
            return _park_paused(c, _load_run(c, run.run_id), RunStatus.QUEUED, at, now_us)
        return Applied(RunStatus.QUEUED, from_us(at))
    c.executemany(TIMELINE_INSERT, events)
    _end(c, run, RunStatus.DEAD, error, now_us)
    return Applied(RunStatus.DEAD, None)


def _park_paused(
    c: sqlite3.Connection,
    run: Run,
    status: RunStatus,
    at_us: int | None,
    now_us: int,
    *,
    by: str | None = None,
) -> Applied:
    """Park `run` paused inside the caller's transaction: `status` and `at_us` are what
    resume gives back; meanwhile run_at is its deadline (for the deadline check only)."""
    parked = pause(status, _dt(at_us), run.deadline)
    if by is None:  # a requested pause taking effect: who asked for it
        asked = c.execute(
            "SELECT data FROM timeline WHERE run_id = ? AND type = 'pause requested'"
            " ORDER BY seq DESC LIMIT 1",
            [run.run_id],
        ).fetchone()
        by = (_loads(asked[0]) or {}).get("by") if asked else None
    c.execute(
        "UPDATE runs SET status = 'paused', paused_status = ?, paused_run_at = ?, run_at = ?,"
        " pause_requested = 0, lease_owner = NULL, lease_until = NULL, solo = 0,"
        f" {_CLEARED} WHERE run_id = ?",
        [str(parked.paused_status), _us(parked.paused_run_at), _us(parked.run_at), run.run_id],
    )
    data: dict[str, Any] = {"by": by, "was": str(status)}
    if parked.paused_run_at is not None:
        data["due"] = from_us(to_us(parked.paused_run_at)).isoformat(timespec="microseconds")
    _add_event(c, run.run_id, now_us, "paused", data)
    return Applied(RunStatus.PAUSED, parked.run_at)


def _end(
    c: sqlite3.Connection,
    run: Run,
    status: RunStatus,
    error: dict[str, Any] | None,
    now_us: int,
) -> None:
    c.execute(
        "UPDATE runs SET status = ?, error = ?, finished_at = ?, run_at = NULL, lease_owner = NULL,"
        " lease_until = NULL, pause_requested = 0, paused_status = NULL, paused_run_at = NULL,"
        f" solo = 0, {_CLEARED} WHERE run_id = ?",
        [str(status), None if error is None else dumps(error), now_us, run.run_id],
    )
    label = "dead-lettered" if status is RunStatus.DEAD else str(status)
    data = {} if error is None else {"kind": error.get("kind"), "error": _first_line(error)}
    _add_event(c, run.run_id, now_us, label, data)
    _record_ending(c, run.run_id, status, None if error is None else error.get("kind"), now_us)
    _wake_parent(c, run.run_id, now_us)
    _release_held(c, run.run_id, now_us)


def _record_ending(
    c: sqlite3.Connection, run_id: str, status: RunStatus, kind: Any, now_us: int
) -> None:
    """Put the run's ending in the notification outbox, in the ending's own transaction.

    Every ending is recorded; whether anyone is told is the notifier's decision (the
    daemon's [notify] and the run's pinned override), made when it delivers.
    """
    c.execute(
        NOTIFICATION_INSERT,
        [run_id, str(status), None if kind is None else str(kind), now_us, now_us],
    )


# An ending's row in the notification outbox: (run_id, status, error_kind, created_at, due_at).
NOTIFICATION_INSERT = (
    "INSERT INTO notifications (run_id, status, error_kind, created_at, due_at) VALUES (?,?,?,?,?)"
)


def _wake_parent(c: sqlite3.Connection, run_id: str, now_us: int) -> None:
    """A child run ended: its waiting parent becomes due (when resumed, if it is paused)."""
    c.execute(
        "UPDATE runs SET run_at = ? WHERE status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = ?)",
        [now_us, run_id],
    )
    c.execute(
        "UPDATE runs SET paused_run_at = ? WHERE status = 'paused' AND paused_status = 'waiting'"
        " AND run_id = (SELECT parent_run_id FROM runs WHERE run_id = ?)",
        [now_us, run_id],
    )


def _release_next(c: sqlite3.Connection, schedule: str, now_us: int, after: str | None) -> None:
    """Make the oldest held run of `schedule` due now, unless one of its runs still runs."""
    if c.execute(f"SELECT 1 FROM runs WHERE {_RUNNING_OF_SCHEDULE} LIMIT 1", [schedule]).fetchone():
        return
    row = c.execute(
        "SELECT run_id FROM runs WHERE schedule = ? AND status = 'queued' AND run_at IS NULL"
        " ORDER BY scheduled_at, created_at, run_id LIMIT 1",
        [schedule],
    ).fetchone()
    if row is None:
        return
    c.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [now_us, row[0]])
    data = {"schedule": schedule, **({"after": after} if after else {})}
    _add_event(c, row[0], now_us, "released", data)


def _release_held(c: sqlite3.Connection, run_id: str, now_us: int) -> None:
    """A run ended: if it belongs to a schedule with held runs (overlap=queue), start the next.

    Called in the same transaction as every terminal transition, so no held run is ever
    stranded and no two runs of a queue schedule ever overlap.
    """
    row = c.execute("SELECT schedule FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is not None and row[0] is not None:
        _release_next(c, row[0], now_us, after=run_id)
