"""The PostgreSQL store's shared pieces: constants, row mappers, timeline appends, and the
in-transaction helpers every job uses (locked loads, the fence check, schedule rows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import (
    RunNotFoundError,
    ScheduleNotFoundError,
)
from flowctl.model import (
    Run,
    RunStatus,
    from_us,
    to_us,
)
from flowctl.store.mapping import (
    _CLEARED as _CLEARED,
)
from flowctl.store.mapping import (
    _ENTRY_COLUMNS as _ENTRY_COLUMNS,
)
from flowctl.store.mapping import (
    _RUN_COLUMNS as _RUN_COLUMNS,
)
from flowctl.store.mapping import (
    _dt as _dt,
)
from flowctl.store.mapping import (
    _entry_from_row as _entry_from_row,
)
from flowctl.store.mapping import (
    _loads as _loads,
)
from flowctl.store.mapping import (
    _run_from_row as _run_from_row,
)
from flowctl.store.mapping import (
    _us as _us,
)
from flowctl.store.mapping import like_pattern
from flowctl.store.records import (
    Lease,
    ScheduleEvent,
    ScheduleRow,
    dumps,
)
from flowctl.transitions import (
    ClaimVerdict,
)

CHANNEL = "flowctl_changes"
BACKSTOP_S = 5.0  # the daemon re-reads its wheel at least this often: a bounded safety net
POOL_MAX = 10
POOL_TIMEOUT_S = 15.0

# The server processes of this process's pooled connections: a NOTIFY from one of them is
# recognised by its sender's pid and ignored (the write was seen at once in process).
_OWN_PIDS: set[int] = set()

Conn = Any  # a psycopg.Connection; Any so that a SQLite-only install type-checks too


# Insert or replace one journal row (SQLite's INSERT OR REPLACE).
_UPSERT_ENTRY = (
    f"INSERT INTO journal ({_ENTRY_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s::json,%s,%s,%s,%s,%s)"
    " ON CONFLICT (run_id, call_index) DO UPDATE SET kind = EXCLUDED.kind,"
    " name = EXCLUDED.name, state = EXCLUDED.state, value = EXCLUDED.value,"
    " wake_at = EXCLUDED.wake_at, recorded_at = EXCLUDED.recorded_at,"
    " resolved_at = EXCLUDED.resolved_at, tries = EXCLUDED.tries,"
    " duration_us = EXCLUDED.duration_us"
)
_INSERT_EVENT = "INSERT INTO timeline (run_id, at, type, data) VALUES (%s,%s,%s,%s::jsonb)"


def _event(
    run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> tuple[str, int, str, str | None]:
    return (run_id, at_us, type_, None if not data else json.dumps(data, separators=(",", ":")))


def _add_event(
    c: Conn, run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> None:
    """Append one timeline event inside the caller's transaction."""
    c.execute(_INSERT_EVENT, _event(run_id, at_us, type_, data))


def _add_events(c: Conn, events: Sequence[tuple[str, int, str, str | None]]) -> None:
    if events:
        with c.cursor() as cur:
            cur.executemany(_INSERT_EVENT, events)


def _configure(conn: Conn) -> None:
    """json and jsonb arrive as their text, parsed by the same json.loads as in SQLite."""
    from psycopg.types.string import TextLoader

    conn.adapters.register_loader("json", TextLoader)
    conn.adapters.register_loader("jsonb", TextLoader)


def _configure_pooled(conn: Conn) -> None:
    _configure(conn)
    _OWN_PIDS.add(conn.info.backend_pid)


def to_us_now() -> int:
    """The wall clock for the schema table's applied_at (not a transition time)."""
    from flowctl.clock import SystemClock

    return to_us(SystemClock().now())


def _has_schema(conn: Conn) -> bool:
    row = conn.execute("SELECT to_regclass('flowctl_schema') IS NOT NULL").fetchone()
    return bool(row[0])


# `--search` reads at most this many of the newest runs (plus an exact id or key match at
# any age), as on SQLite: a search never scans every run.
SEARCH_WINDOW = 5_000

# Runs per (workflow, status): the folded counts and the deltas not folded yet (schema v4).
_COUNTS = (
    "(SELECT workflow, status, n FROM run_counts"
    " UNION ALL SELECT workflow, status, d FROM run_count_deltas) AS counts"
)


def _search_source(search: str) -> tuple[str, list[Any]]:
    """The rows a search looks at, as a derived table `searched` with the runs table's
    columns: the newest SEARCH_WINDOW runs (runs_created, read backwards: no sort), and the
    run whose id or key is `search` exactly, however old (once: not again when it is in
    the window). SQLite's _search_source, with run_id breaking created_at ties."""
    newest = f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY created_at DESC, run_id DESC LIMIT %s"
    newest_ids = "SELECT run_id FROM runs ORDER BY created_at DESC, run_id DESC LIMIT %s"
    sql = (
        f"(SELECT * FROM ({newest}) AS newest"
        f" UNION ALL SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s"
        f" AND run_id NOT IN ({newest_ids})"
        f" UNION ALL SELECT {_RUN_COLUMNS} FROM runs WHERE key = %s AND run_id <> %s"
        f" AND run_id NOT IN ({newest_ids})) AS searched"
    )
    return sql, [SEARCH_WINDOW, search, SEARCH_WINDOW, search, search, SEARCH_WINDOW]


def _search_clause(search: str) -> tuple[str, list[Any]]:
    """`ls --search`: the run id, or the input as shown, with every secret value replaced
    by "***" before matching, so a secret never matches, or the key exactly (the window
    brings an old run with that key in; this clause keeps it); over _search_source's rows."""
    pattern = like_pattern(search)
    # The input's text form is JSON (a quote as \", a backslash as \\): the text is matched
    # in that spelling, as SQLite's search does.
    stored = like_pattern(json.dumps(search, ensure_ascii=False)[1:-1])
    # ILIKE: case-insensitive for ASCII, as SQLite's LIKE is (`--search ana` finds "Ana").
    clause = (
        "(run_id ILIKE %s ESCAPE '\\' OR key = %s OR (CASE WHEN secret_keys IS NULL THEN input"
        " ELSE input || (SELECT jsonb_object_agg(k, to_jsonb('***'::text))"
        " FROM jsonb_array_elements_text(searched.secret_keys) AS k) END)::text"
        " ILIKE %s ESCAPE '\\')"
    )
    return clause, [pattern, search, stored]


def _load_run(c: Conn, run_id: str, *, lock: bool = True) -> Run:
    """The run as it is inside this transaction; locked to its end unless `lock` is False,
    so the transition decided from it cannot race another writer's."""
    sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s" + (" FOR UPDATE" if lock else "")
    row = c.execute(sql, [run_id]).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    return _run_from_row(row)


def _held(c: Conn, lease: Lease, columns: str = "1") -> Sequence[Any] | None:
    """THE fence check, made first by every write a lease holder makes: the run's row
    (`columns` of it) if it is still running under this lease's fence and owner, else None.

    The row is locked (FOR UPDATE) to the end of the transaction, so no claim can move the
    fence between this check and the writes after it. `columns` is a constant of the
    caller's, never input.
    """
    row: Sequence[Any] | None = c.execute(
        f"SELECT {columns} FROM runs WHERE run_id = %s AND fence = %s AND lease_owner = %s"
        " AND status = 'running' FOR UPDATE",
        [lease.run_id, lease.fence, lease.owner],
    ).fetchone()
    return row


def _ended(c: Conn, run_id: str) -> bool:
    """Whether run `run_id` has ended, read FOR SHARE: a transaction ending it that is in
    flight is waited out, and the status it committed is what is read."""
    row = c.execute("SELECT status FROM runs WHERE run_id = %s FOR SHARE", [run_id]).fetchone()
    return row is not None and RunStatus(row[0]).is_terminal


def _iso_us(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat(timespec="microseconds")


def _first_line(error: dict[str, Any]) -> str:
    msg = str(error.get("message") or "")
    first = msg.splitlines()[0] if msg else ""
    return f"{error.get('type', 'Error')}: {first}" if first else str(error.get("type", "Error"))


def _suspect_data(run: Run, verdict: ClaimVerdict) -> dict[str, Any]:
    note = (
        "its worker died while running it alone: the crash is charged to it"
        if verdict.charged
        else "its worker died with other runs in flight: it runs alone next, to tell"
    )
    return {"from": run.lease_owner, "crashes": verdict.crashes, "note": note}


def _wake_parent(c: Conn, run_id: str, now_us: int) -> None:
    """A child run ended: its waiting parent becomes due (when resumed, if it is paused)."""
    c.execute(
        "UPDATE runs SET run_at = %s WHERE status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = %s)",
        [now_us, run_id],
    )
    c.execute(
        "UPDATE runs SET paused_run_at = %s WHERE status = 'paused'"
        " AND paused_status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = %s)",
        [now_us, run_id],
    )


# ---------------------------------------------------------------------------
# Schedules: rows and the fire transaction's pieces

_SCHEDULE_COLUMNS = (
    "name, target, cwd, input, spec, paused, created_at, updated_at, active_from, last_fire_at,"
    " next_fire_at, revision, source, origin, secret_keys"
)
_HISTORY_COLUMNS = "h.schedule, h.fire_at, h.action, h.run_id, h.at, h.detail, r.status"
_ACTIVE_SQL = "('queued', 'running', 'sleeping', 'waiting', 'paused')"
# A run of a schedule that is active and not held behind another (overlap=queue).
_RUNNING_OF_SCHEDULE = (
    f"schedule = %s AND status IN {_ACTIVE_SQL} AND NOT (status = 'queued' AND run_at IS NULL)"
    " AND NOT (status = 'paused' AND paused_status = 'queued' AND paused_run_at IS NULL)"
)


def _schedule_from_row(r: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(
        name=r[0],
        target=r[1],
        cwd=r[2],
        input=json.loads(r[3]),
        spec=r[4],
        paused=bool(r[5]),
        created_at=from_us(r[6]),
        updated_at=from_us(r[7]),
        active_from=from_us(r[8]),
        last_fire_at=_dt(r[9]),
        next_fire_at=_dt(r[10]),
        revision=r[11],
        source=r[12],
        origin=r[13],
        secret_keys=tuple(_loads(r[14]) or ()),
    )


def _secret_keys_json(keys: tuple[str, ...]) -> str | None:
    return dumps(sorted(keys)) if keys else None


def _schedule_row(c: Conn, name: str, *, lock: bool = False) -> ScheduleRow:
    sql = f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE name = %s" + (
        " FOR UPDATE" if lock else ""
    )
    row = c.execute(sql, [name]).fetchone()
    if row is None:
        raise ScheduleNotFoundError(name)
    return _schedule_from_row(row)


def _history_from_row(r: Sequence[Any]) -> ScheduleEvent:
    return ScheduleEvent(
        schedule=r[0],
        fire_at=_dt(r[1]),
        action=r[2],
        run_id=r[3],
        at=from_us(r[4]),
        detail=r[5],
        run_status=None if r[6] is None else RunStatus(r[6]),
    )


def _add_history(
    c: Conn,
    name: str,
    fire_at: datetime | None,
    action: str,
    run_id: str | None,
    now_us: int,
    detail: str | None,
) -> None:
    c.execute(
        "INSERT INTO schedule_history (schedule, fire_at, action, run_id, at, detail)"
        " VALUES (%s,%s,%s,%s,%s,%s)",
        [name, _us(fire_at), action, run_id, now_us, detail],
    )
