"""SQL rows to flowctl values and back: column lists, row decoders, small transaction helpers.
Schedules' rows are schedule_rows.py's."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flowctl.errors import (
    RunNotFoundError,
)
from flowctl.model import (
    Run,
    RunStatus,
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

if TYPE_CHECKING:  # the run list (listing.py) reads rows without the claim policy's module
    from flowctl.transitions import ClaimVerdict

# The runs table as a run is read: its definition joined back (migration 16). A LEFT JOIN
# on definitions' key keeps runs the outer loop of every plan, and is dropped from a
# statement that reads none of its columns.
_RUNS = "runs LEFT JOIN definitions USING (def_id)"

# ANALYZE (an operator's, or `PRAGMA optimize`) records how many rows one value of an
# index's first column holds on average, not which values are rare: on a file of finished
# runs `status = 'running'` and `key = ?` then look like every run, and a seek of the few
# rows they select looked dearer than a scan of all of them (the daemon's liveness pass
# scanned a million runs: issue 14, item 9). A statement that picks out a few runs by
# status or key, with a condition its index does not cover, names that index, so its plan
# does not depend on statistics (tests/test_analyzed_plans.py).
_RUNS_BY_STATUS = "runs INDEXED BY runs_due"
_RUNS_BY_KEY = "runs INDEXED BY runs_key"  # the runs that have a key (migration 19)
_RUNS_BY_KEY_JOINED = f"{_RUNS_BY_KEY} LEFT JOIN definitions USING (def_id)"


# Append one event, parameters as _event() makes them: (run_id, at, type, data). The
# timeline is keyed by (run_id, seq) (migration 19): seq numbers a run's events in the
# order written, the next after the run's newest (one seek into the key it appends to).
TIMELINE_INSERT = (
    "INSERT INTO timeline (run_id, seq, at, type, data) VALUES (?1, (SELECT IFNULL(MAX(seq), 0)"
    " + 1 FROM timeline WHERE run_id = ?1), ?2, ?3, ?4)"
)


def _add_event(
    c: sqlite3.Connection, run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> None:
    """Append one timeline event inside the caller's transaction."""
    c.execute(TIMELINE_INSERT, _event(run_id, at_us, type_, data))


def _event(
    run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> tuple[str, int, str, str | None]:
    return (run_id, at_us, type_, None if not data else json.dumps(data, separators=(",", ":")))


# Values bound per `IN (...)` statement (SQLite's bound parameters are limited, 32,766
# since 3.32; a chunk keeps each statement small).
IN_CHUNK = 500


def _in_chunks(values: Sequence[Any]) -> Iterator[tuple[Sequence[Any], str]]:
    """`values` in chunks of IN_CHUNK, each with its `?,?,...` marks for an `IN (...)`."""
    for i in range(0, len(values), IN_CHUNK):
        chunk = values[i : i + IN_CHUNK]
        yield chunk, ",".join("?" * len(chunk))


# `--search` reads at most this many of the newest runs (plus an exact id or key match at
# any age): a substring of the input cannot be indexed, so the scan is bounded instead.
SEARCH_WINDOW = 5_000


def _newest() -> str:
    """The rowids (as `rid`) of the newest SEARCH_WINDOW runs: each status's own range of
    runs_status_created (status, created_at, rowid), read backwards and merged (no index
    holds created_at alone since migration 19). Only the index is read, and the merge stops
    at the window: no sort, no row."""
    parts = [
        f"SELECT * FROM (SELECT rowid AS rid, created_at FROM runs WHERE status = '{status}'"
        f" ORDER BY created_at DESC, rowid DESC LIMIT {SEARCH_WINDOW})"
        for status in RunStatus
    ]
    merged = " UNION ALL ".join(parts)
    return f"SELECT rid FROM ({merged} ORDER BY created_at DESC, rid DESC LIMIT {SEARCH_WINDOW})"


def _search_source(search: str) -> tuple[str, list[Any]]:
    """The rows a search looks at, as a derived table `searched` with the runs table's
    columns and its rowid as `rid`: the newest SEARCH_WINDOW runs, and the run whose id or
    key is `search` exactly, however old (once: not again when it is in the window).
    Bounded, so a search never scans every run; UNION ALL, so nothing sorts the window."""
    cols = f"{_RUN_COLUMNS}, runs.rowid AS rid"
    newest = _newest()
    sql = (
        # NOT INDEXED: by rowid only, so a status the outer query asks for is not pushed
        # down here to walk that status's whole range testing each row against the window.
        f"(SELECT {cols} FROM runs NOT INDEXED LEFT JOIN definitions USING (def_id)"
        f" WHERE runs.rowid IN ({newest})"
        f" UNION ALL SELECT {cols} FROM {_RUNS} WHERE run_id = ?"
        f" AND runs.rowid NOT IN ({newest})"
        f" UNION ALL SELECT {cols} FROM {_RUNS_BY_KEY_JOINED} WHERE key = ? AND run_id != ?"
        f" AND runs.rowid NOT IN ({newest})) AS searched"
    )
    return sql, [search, search, search]


def _search_clause(search: str) -> tuple[str, list[Any]]:
    """`ls --search`: the run id, or the input as shown, with every secret value replaced
    by "***" before matching, so a secret never matches, or the key exactly (the window
    brings an old run with that key in; this clause keeps it); over _search_source's rows."""
    pattern = like_pattern(search)
    # The input is stored as ASCII JSON ("ü" as \u00fc, a quote as \"): the text is matched
    # in that spelling, so `--search ü` or `--search 'a"b'` finds what `show` prints.
    stored = like_pattern(json.dumps(search)[1:-1])
    clause = (
        "(run_id LIKE ? ESCAPE '\\' OR key = ? OR (CASE WHEN secret_keys IS NULL THEN input ELSE"
        " json_patch(input, (SELECT json_group_object(value, '***')"
        " FROM json_each(searched.secret_keys))) END) LIKE ? ESCAPE '\\')"
    )
    return clause, [pattern, search, stored]


def _load_run(c: sqlite3.Connection, run_id: str) -> Run:
    """The run as it is inside this transaction."""
    row = c.execute(f"SELECT {_RUN_COLUMNS} FROM {_RUNS} WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    return _run_from_row(row)


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
