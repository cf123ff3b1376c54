"""`flowctl copy SRC DEST`: every row of one database into another, SQLite and PostgreSQL
alike, in one transaction on DEST (all of it, or nothing): runs with their pinned source,
journals, timelines, signals, published values, schedules, the notification outbox and
step output.

Rows are copied as they are stored, column by column, so recorded deadlines, wake times,
fences, attempts and ids are kept: a sleeper copied to the fleet wakes at the deadline it
had. The daemons registry is not copied (a daemon belongs to its database), and a copy is
refused while a daemon is live on SRC or DEST already holds runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flowctl.errors import FlowctlError
from flowctl.store import Store
from flowctl.store.postgres.store import PostgresStore
from flowctl.store.sqlite import SqliteStore
from flowctl.store.sqlite.schema import DEFINITION_COLUMNS, PLAIN_CREATED
from flowctl.store.sqlite.writes import _definition_id

# In foreign-key order: a row's parent is always copied before it.
TABLES = (
    "runs",
    "journal",
    "versions",
    "timeline",
    "signals",
    "published",
    "schedules",
    "schedule_history",
    "meta",
    "notifications",
    "output",
)
# Columns holding JSON: text on SQLite, jsonb (journal.value: json) on PostgreSQL.
JSON_COLUMNS = {
    "runs": {"input", "backoff", "result", "error", "secret_keys", "notify"},
    "journal": {"value"},
    "timeline": {"data"},
    "signals": {"payload"},
    "published": {"value"},
    "schedules": {"input", "secret_keys"},
    "notifications": {"channels_done"},
}
SERIAL_COLUMNS = {
    "timeline": "seq",
    "signals": "seq",
    "schedule_history": "seq",
    "notifications": "seq",
    "output": "seq",
}
# A SQLite run keeps its pinned text once per definition hash, in `sources` (its
# runs.source is NULL then); a PostgreSQL run keeps it in its row. The copy reads it whole.
BATCH = 500
# A SQLite run's plain `created` event is implied, not stored (migration 18): the copy
# writes it as a row, before the run's first event (seq 0: a run's stored events are
# numbered from 1), so DEST holds every event the source's timeline reads show. A SQLite
# seq numbers one run's events (migration 19); the copy numbers them across all runs, in
# each run's order, as a PostgreSQL timeline's key is.
_SQLITE_TIMELINE = (
    "(SELECT ROW_NUMBER() OVER (ORDER BY run_id, seq) AS seq, run_id, at, type, data FROM"
    " (SELECT 0 AS seq, run_id, created_at AS at, 'created' AS type,"
    f" '{PLAIN_CREATED}' AS data FROM runs WHERE (SELECT t.type FROM timeline t"
    " WHERE t.run_id = runs.run_id ORDER BY t.seq LIMIT 1) IS NOT 'created'"
    " UNION ALL SELECT seq, run_id, at, type, data FROM timeline))"
)


class CopyRefusedError(FlowctlError):
    """A copy refused before anything was written."""


@dataclass(frozen=True)
class CopyPlan:
    """What a copy moves: rows per table, and the columns both databases have."""

    counts: dict[str, int]
    columns: dict[str, list[str]]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class _Rows:
    """One backend's raw rows: its table columns, a table's rows, a bulk insert."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, SqliteStore | PostgresStore):
            raise CopyRefusedError(f"cannot copy a {type(store).__name__}")
        self.store = store
        self.pg = isinstance(store, PostgresStore)

    def columns(self, table: str) -> list[str]:
        if isinstance(self.store, PostgresStore):
            rows = self.store._read(
                "SELECT column_name FROM information_schema.columns WHERE table_schema ="
                " current_schema() AND table_name = %s ORDER BY ordinal_position",
                [table],
            )
        else:
            rows = self.store._read("SELECT name FROM pragma_table_info(?)", [table])
        names = [str(r[0]) for r in rows]
        if table == "runs" and not self.pg:  # a run's definition is joined back (migration 16)
            names = [n for n in names if n != "def_id"] + list(DEFINITION_COLUMNS)
        return names

    def count(self, table: str) -> int:
        assert table in TABLES  # a constant of ours, never input
        if table == "timeline" and not self.pg:
            return int(self.store._read(f"SELECT COUNT(*) FROM {_SQLITE_TIMELINE}")[0][0])
        return int(self.store._read(f"SELECT COUNT(*) FROM {table}")[0][0])

    def rows(self, table: str, columns: Sequence[str]) -> list[Any]:
        assert table in TABLES
        order = ", ".join(columns[:2])  # a stable order: the key's leading columns
        if table == "runs" and not self.pg:
            # The definition joined back, and the pinned text from `sources` (kept once per
            # hash there, migration 11) back in the run's own `source`, as PostgreSQL keeps it.
            picked = [
                "COALESCE(runs.source, (SELECT s.source FROM sources s WHERE s.source_hash ="
                " definitions.source_hash))"
                if col == "source"
                else col
                for col in columns
            ]
            return self.store._read(
                f"SELECT {', '.join(picked)} FROM runs LEFT JOIN definitions USING (def_id)"
                f" ORDER BY {order}"
            )
        if table == "timeline" and not self.pg:
            return self.store._read(
                f"SELECT {', '.join(columns)} FROM {_SQLITE_TIMELINE} ORDER BY {order}"
            )
        return self.store._read(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}")

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.store._write() as c:
            yield c

    def insert(self, c: Any, table: str, columns: Sequence[str], rows: Sequence[Any]) -> None:
        json_columns = JSON_COLUMNS.get(table, set())
        if self.pg:
            cast = {"journal": "::json"}.get(table, "::jsonb")
            marks = ", ".join(f"%s{cast}" if col in json_columns else "%s" for col in columns)
        else:
            marks = ", ".join("?" for _ in columns)
        if table == "runs" and not self.pg:
            _insert_sqlite_runs(c, columns, rows)
            return
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        if self.pg:
            with c.cursor() as cur:
                cur.executemany(sql, rows)
        else:
            c.executemany(sql, rows)

    def after(self, c: Any, table: str) -> None:
        """PostgreSQL: move an identity column's sequence past the copied ids."""
        column = SERIAL_COLUMNS.get(table)
        if self.pg and column:
            c.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
                f" GREATEST(COALESCE(MAX({column}), 0), 1), MAX({column}) IS NOT NULL)"
                f" FROM {table}"
            )


def _insert_sqlite_runs(c: Any, columns: Sequence[str], rows: Sequence[Any]) -> None:
    """Copied runs into SQLite as its store writes them: the definition once in
    `definitions` (the run keeps its def_id), a pinned text once in `sources`."""
    at = {col: i for i, col in enumerate(columns)}
    kept = [col for col in columns if col not in DEFINITION_COLUMNS]
    sql = (
        f"INSERT INTO runs ({', '.join([*kept, 'def_id'])})"
        f" VALUES ({', '.join('?' * (len(kept) + 1))})"
    )
    known: dict[tuple[Any, ...], Any] = {}
    for row in rows:
        definition = tuple(row[at[col]] if col in at else None for col in DEFINITION_COLUMNS)
        values = [row[at[col]] for col in kept]
        source_hash = definition[2]
        if "source" in at and row[at["source"]] is not None and source_hash is not None:
            c.execute(
                "INSERT OR IGNORE INTO sources (source_hash, source) VALUES (?, ?)",
                [source_hash, row[at["source"]]],
            )
            values[kept.index("source")] = None
        c.execute(sql, [*values, _definition_id(c, definition, known)])


def refuse_live_source(src: Store, live_on_src: Sequence[str]) -> None:
    """A SRC that a daemon still serves is refused: its runs would change mid-copy."""
    if live_on_src:
        raise CopyRefusedError(
            f"a daemon is live on {src.path} ({live_on_src[0]}): stop it first, so no run"
            " changes while it is copied"
        )


def plan_copy(src: Store, dest: Store, live_on_src: Sequence[str]) -> CopyPlan:
    """Check that the copy may go ahead and count what it moves; writes nothing.

    `live_on_src` names the daemons live on SRC (one line each): any is a refusal.
    """
    if src.path == dest.path:
        raise CopyRefusedError(f"SRC and DEST are the same database ({src.path})")
    refuse_live_source(src, live_on_src)
    a, b = _Rows(src), _Rows(dest)
    held = b.count("runs")
    if held:
        raise CopyRefusedError(
            f"{dest.path} already holds {held} run(s): copy into an empty database"
        )
    columns = {}
    for table in TABLES:
        theirs = set(b.columns(table))
        columns[table] = [col for col in a.columns(table) if col in theirs]
    return CopyPlan({t: a.count(t) for t in TABLES}, columns)


def copy_rows(
    src: Store, dest: Store, plan: CopyPlan, progress: Callable[[int], None] | None = None
) -> dict[str, int]:
    """Copy every planned row in one DEST transaction; `progress(n)` after each batch of n.
    Returns the rows copied per table."""
    a, b = _Rows(src), _Rows(dest)
    copied: dict[str, int] = {}
    with b.transaction() as c:
        for table in TABLES:
            columns = plan.columns[table]
            rows = a.rows(table, columns)
            for start in range(0, len(rows), BATCH):
                batch = rows[start : start + BATCH]
                b.insert(c, table, columns, batch)
                if progress is not None:
                    progress(len(batch))
            b.after(c, table)
            copied[table] = len(rows)
    return copied
