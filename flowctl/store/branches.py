"""Fan-out in the store: the journal cut of a new attempt (a retry, a redrive), fan-out
aware; a parent's child runs in one read; the count of its ended children, which a parent
parking on `ctx.children` compares with the count it saw.

A plain journal is cut at its first failed row. A fan-out's branches keep their results:
a failed branch drops the block's failed rows and everything after the block, so only the
branches without a result run again (flowctl.fanout.journal_cut decides, pure).
"""

from __future__ import annotations

from flowctl.fanout import journal_cut
from flowctl.model import Run
from flowctl.store.core import StoreCore
from flowctl.store.mapping import _RUN_COLUMNS, _loads, _run_from_row
from flowctl.store.rows import RUNS
from flowctl.store.sql import Tx

_ENDED = "('completed', 'dead', 'cancelled')"

_CHUNK = 500  # indices per DELETE ... IN (...)


def cut_journal(tx: Tx, run_id: str, states: tuple[str, ...]) -> None:
    """Delete the rows a new attempt runs again: from the first row in `states` on, with
    fan-out blocks kept but for their rows in `states`. In the caller's transaction."""
    marks = ", ".join("?" for _ in states)
    rows = tx.all(
        "SELECT call_index, kind, state, value FROM journal WHERE run_id = ?"
        f" AND (state IN ({marks}) OR kind = 'fanout') ORDER BY call_index",
        [run_id, *states],
    )
    errors = [r[0] for r in rows if r[2] in states]
    if not errors:
        return
    blocks = [(r[0], _count(r[3])) for r in rows if r[1] == "fanout"]
    after, inside = journal_cut(errors, blocks)
    if after is not None:
        tx.execute("DELETE FROM journal WHERE run_id = ? AND call_index >= ?", [run_id, after])
    for start in range(0, len(inside), _CHUNK):
        chunk = inside[start : start + _CHUNK]
        tx.execute(
            f"DELETE FROM journal WHERE run_id = ? AND call_index IN ({', '.join('?' for _ in chunk)})",
            [run_id, *chunk],
        )


def _count(value: object) -> int:
    shape = _loads(value) if isinstance(value, str) else value
    count = shape.get("count") if isinstance(shape, dict) else None
    return count if isinstance(count, int) else 0


def ended_children(tx: Tx, run_id: str) -> int:
    """How many child runs of `run_id` have ended (in the caller's transaction)."""
    row = tx.one(
        f"SELECT COUNT(*) FROM runs WHERE parent_run_id = ? AND status IN {_ENDED}", [run_id]
    )
    return int(row[0]) if row is not None else 0


class BranchReads(StoreCore):
    """Reads of fan-out calls."""

    def children_of(self, run_id: str) -> list[Run]:
        """Every child run `run_id` started (ctx.child, ctx.children), oldest first."""
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE parent_run_id = ?", [run_id])
        # Sorted here: one run's children are few, and SQL would sort them in a temporary
        # b-tree (no index orders them by creation within a parent).
        kids = [self.values.run(_run_from_row(r)) for r in rows]  # opened, as get_run
        return sorted(kids, key=lambda r: (r.created_at, r.run_id))
