"""Pieces every job's transactions share: the runs table as a run is read, timeline appends,
the fence check, locked loads, `IN (...)` chunks and the search window. Row decoders are
flowctl.store.mapping's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flowctl.errors import RunNotFoundError
from flowctl.model import Run, RunStatus
from flowctl.store.dialect import Dialect
from flowctl.store.mapping import _RUN_COLUMNS, _run_from_row, like_pattern
from flowctl.store.sql import Row, Tx

if TYPE_CHECKING:  # `flowctl ls` reads rows without the records every write takes
    from flowctl.store.records import Lease

# The runs table as a run is read: its definition joined back (SQLite migration 16,
# PostgreSQL schema 7). A LEFT JOIN on definitions' key keeps runs the outer loop of every
# plan, and is dropped from a statement that reads none of its columns.
RUNS = "runs LEFT JOIN definitions USING (def_id)"
RUNS_BY_KEY = "{runs_by_key} LEFT JOIN definitions USING (def_id)"

# A run's row as read and locked to its transaction's end.
LOAD_RUN = f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id = ?{{lock_run}}"
LOAD_RUN_UNLOCKED = f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id = ?"

# A held run's row, as a WHERE clause (run_id, fence, owner): the fence check.
FENCED = "run_id = ? AND fence = ? AND lease_owner = ? AND status = 'running'"

# Progress (a checkpoint) or an end: no longer a suspect, the crashes charged forgiven.
CLEARED = "reclaims = 0, suspect = 0, crashes = 0"

# `--search` reads at most this many of the newest runs (plus an exact id or key match at
# any age): a substring of the input cannot be indexed, so the scan is bounded instead.
SEARCH_WINDOW = 5_000

# Values bound per `IN (...)` statement (SQLite's bound parameters are limited; a chunk
# keeps each statement small).
IN_CHUNK = 500

EventRow = tuple[str, int, str, str | None]


# Compact JSON of an event's data: one encoder for all (json.dumps with a separator makes
# one per call, and most writes append an event).
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


def event(run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None) -> EventRow:
    """A timeline row, (run_id, at, type, data) as {timeline_insert} takes it."""
    return (run_id, at_us, type_, None if not data else _COMPACT(data))


def add_event(
    tx: Tx, run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> None:
    """Append one timeline event inside the caller's transaction."""
    tx.execute("{timeline_insert}", event(run_id, at_us, type_, data))


def add_events(tx: Tx, rows: Sequence[EventRow]) -> None:
    tx.send_many("{timeline_insert}", rows)  # an append: nothing to read back


def in_chunks(values: Sequence[Any]) -> Iterator[tuple[Sequence[Any], str]]:
    """`values` in chunks of IN_CHUNK, each with its `?,?,...` marks for an `IN (...)`."""
    for i in range(0, len(values), IN_CHUNK):
        chunk = values[i : i + IN_CHUNK]
        yield chunk, ",".join("?" * len(chunk))


def marks(n: int) -> str:
    return ",".join("?" * n)


def load_run(tx: Tx, run_id: str, *, lock: bool = True) -> Run:
    """The run as it is inside this transaction; locked to its end (where a backend locks
    rows) unless `lock` is False, so the transition decided from it cannot race another
    writer's."""
    row = tx.one(LOAD_RUN if lock else LOAD_RUN_UNLOCKED, [run_id])
    if row is None:
        raise RunNotFoundError(run_id)
    return _run_from_row(row)


def held_row(tx: Tx, lease: Lease, columns: str = "1") -> Row | None:
    """THE fence check, made first by every write a lease holder makes that is not itself
    the check: the run's row (`columns` of it) if it is still running under this lease's
    fence and owner, else None.

    The row is held to the end of the transaction (SQLite: the file's write lock, taken
    at BEGIN IMMEDIATE; PostgreSQL: FOR UPDATE), so no claim can move the fence between
    this check and the writes after it. `columns` is a constant of the caller's, never
    input."""
    return tx.one(
        f"SELECT {columns} FROM {RUNS} WHERE {FENCED}{{lock_run}}",
        [lease.run_id, lease.fence, lease.owner],
    )


def ended(tx: Tx, run_id: str) -> bool:
    """Whether run `run_id` has ended, read FOR SHARE where rows are locked: an ending in
    flight is waited out, and the status it committed is what is read."""
    row = tx.one("SELECT status FROM runs WHERE run_id = ?{for_share}", [run_id])
    return row is not None and RunStatus(row[0]).is_terminal


def iso_us(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat(timespec="microseconds")


def first_line(error: dict[str, Any]) -> str:
    msg = str(error.get("message") or "")
    first = msg.splitlines()[0] if msg else ""
    return f"{error.get('type', 'Error')}: {first}" if first else str(error.get("type", "Error"))


def search_source(dialect: Dialect, search: str) -> tuple[str, list[Any]]:
    """The rows a search looks at, as a derived table `searched` with the runs table's
    columns and the run's insertion key as `rid`: the newest SEARCH_WINDOW runs, and the
    run whose id or key is `search` exactly, however old (once: not again when it is in
    the window). Bounded, so a search never scans every run; UNION ALL, so nothing sorts
    the window."""
    cols = f"{_RUN_COLUMNS}, {{rowid}} AS rid"
    sql = (
        # By rowid only (SQLite: NOT INDEXED), so a status the outer query asks for is not
        # pushed down here to walk that status's whole range testing each row.
        f"(SELECT {cols} FROM {{runs_by_rowid}} LEFT JOIN definitions USING (def_id)"
        " WHERE {rowid} IN ({newest})"
        f" UNION ALL SELECT {cols} FROM {RUNS} WHERE run_id = ?"
        " AND {rowid} NOT IN ({newest})"
        f" UNION ALL SELECT {cols} FROM {RUNS_BY_KEY} WHERE key = ? AND run_id <> ?"
        " AND {rowid} NOT IN ({newest})) AS searched"
    )
    newest = dialect.newest.replace("{window}", str(SEARCH_WINDOW))
    return sql.replace("{newest}", newest), [search, search, search]


def search_clause(dialect: Dialect, search: str) -> tuple[str, list[Any]]:
    """`ls --search`: the run id, or the input as shown, with every secret value replaced
    by "***" before matching, so a secret never matches, or the key exactly (the window
    brings an old run with that key in; this clause keeps it); over search_source's rows.
    Case-insensitive for ASCII on both backends."""
    pattern = like_pattern(search)
    # The input is matched in its stored text's spelling (SQLite: ASCII JSON, "ü" as
    # \u00fc, a quote as \"), so `--search ü` or `--search 'a"b'` finds what `show` prints.
    stored = like_pattern(json.dumps(search, ensure_ascii=dialect.ascii_json)[1:-1])
    clause = "(run_id {like} ? ESCAPE '\\' OR key = ? OR {masked_input} {like} ? ESCAPE '\\')"
    return clause, [pattern, search, stored]


def suspect_data(run: Run, crashes: int) -> dict[str, Any]:
    note = "its worker died under it: it runs next in a worker process of its own, to tell"
    return {"from": run.lease_owner, "crashes": crashes, "note": note}
