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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.errors import FlowctlError
from flowctl.store import Store
from flowctl.store.creating import definition_id
from flowctl.store.mapping import DEFINITION_COLUMNS
from flowctl.store.sql import Tx
from flowctl.store.store import SqlStore

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
    "limits",  # named limits (issue 37); their holds and starts are transient, not copied
)
SERIAL_COLUMNS = {
    "timeline": "seq",
    "signals": "seq",
    "schedule_history": "seq",
    "notifications": "seq",
    "output": "seq",
}
BATCH = 500
# A SQLite seq numbers one run's events (migration 19); the copy numbers them across all
# runs, in each run's order, as a PostgreSQL timeline's key is (and a SQLite one takes).
# A plain `created` event is implied, not stored, on both: it is not copied.
_TIMELINE = (
    "(SELECT ROW_NUMBER() OVER (ORDER BY run_id, seq) AS seq, run_id, at, type, data"
    " FROM timeline) AS numbered"
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
    """One database's raw rows: its table columns, a table's rows, a bulk insert."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, SqlStore):
            raise CopyRefusedError(f"cannot copy a {type(store).__name__}")
        self.store = store
        self.identity = store.db.dialect.pyformat  # serial columns are identities (PostgreSQL)

    def columns(self, table: str) -> list[str]:
        names = self.store.db.table_columns(table)
        if table == "runs":  # a run's definition is joined back
            names = [n for n in names if n != "def_id"] + list(DEFINITION_COLUMNS)
        return names

    def count(self, table: str) -> int:
        assert table in TABLES  # a constant of ours, never input
        return int(self.store._read(f"SELECT COUNT(*) FROM {table}")[0][0])

    def rows(self, table: str, columns: Sequence[str]) -> list[Any]:
        assert table in TABLES
        order = ", ".join(columns[:2])  # a stable order: the key's leading columns
        if table == "runs":
            # The definition joined back, and the pinned text from `sources` (kept once per
            # hash there) back in the run's own `source`.
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
        source = _TIMELINE if table == "timeline" else table
        return self.store._read(f"SELECT {', '.join(columns)} FROM {source} ORDER BY {order}")

    def write(self, fn: Callable[[Tx], None]) -> None:
        self.store._write(fn)

    def insert(self, tx: Tx, table: str, columns: Sequence[str], rows: Sequence[Any]) -> None:
        if table == "runs":
            _insert_runs(tx, columns, rows)
            return
        marks = ", ".join("?" for _ in columns)
        tx.many(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def after(self, tx: Tx, table: str) -> None:
        """PostgreSQL: move an identity column's sequence past the copied ids."""
        column = SERIAL_COLUMNS.get(table)
        if self.identity and column:
            tx.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
                f" GREATEST(COALESCE(MAX({column}), 0), 1), MAX({column}) IS NOT NULL)"
                f" FROM {table}"
            )


def _insert_runs(tx: Tx, columns: Sequence[str], rows: Sequence[Any]) -> None:
    """Copied runs as the store writes them: the definition once in `definitions` (the run
    keeps its def_id), a pinned text once in `sources`."""
    at = {col: i for i, col in enumerate(columns)}
    kept = [col for col in columns if col not in DEFINITION_COLUMNS]
    sql = (
        f"INSERT INTO runs ({', '.join([*kept, 'def_id'])})"
        f" VALUES ({', '.join('?' * (len(kept) + 1))})"
    )
    for row in rows:
        definition = tuple(row[at[col]] if col in at else None for col in DEFINITION_COLUMNS)
        values = [row[at[col]] for col in kept]
        source_hash = definition[2]
        if "source" in at and row[at["source"]] is not None and source_hash is not None:
            tx.execute(
                "INSERT INTO sources (source_hash, source) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [source_hash, row[at["source"]]],
            )
            values[kept.index("source")] = None
        tx.execute(sql, [*values, definition_id(tx, definition)])


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

    def write(tx: Tx) -> None:
        for table in TABLES:
            columns = plan.columns[table]
            rows = a.rows(table, columns)
            for start in range(0, len(rows), BATCH):
                batch = rows[start : start + BATCH]
                b.insert(tx, table, columns, batch)
                if progress is not None:
                    progress(len(batch))
            b.after(tx, table)
            copied[table] = len(rows)

    b.write(write)
    return copied
