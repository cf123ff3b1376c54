"""What a claimed run's replay reads, read by its claim (issue 40, item 1).

A run claimed again (a wake after a sleep, a signal, a retry's backoff, a lapsed lease)
replays its journal: before, each handler read its own journal rows and version markers
as it started, one read per run on the runner's thread, which on PostgreSQL is a round
trip per wake while every other handler of the runner waits. The claim now reads them for
all the runs it took, in its own transaction, as the last statements before it commits:
what the replay would read right after, since nothing else writes to a run its claim
holds. A fresh run needs neither (the claim saw it has none: `Claim.journal == {}`).

The journal rows read are bounded (`JOURNAL_ROWS` per claim): a run whose rows the bound
cut, and any run after it, is left to read its own as before (`journal` None).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from flowctl.model import JournalEntry
from flowctl.store.mapping import _ENTRY_COLUMNS, _entry_from_row
from flowctl.store.records import Claim
from flowctl.store.rows import marks
from flowctl.store.sql import Tx
from flowctl.store.values import Values

JOURNAL_ROWS = 4096  # journal rows one claim reads at most for the runs it took


def with_replay(tx: Tx, values: Values, claims: list[Claim]) -> list[Claim]:
    """`claims`, each with its journal and version markers where the claim did not know
    them yet, read here (two statements at most, whatever the number of runs)."""
    journals = _journals(tx, values, [c.run.run_id for c in claims if c.journal is None])
    versions = _versions(tx, [c.run.run_id for c in claims if c.versions is None])
    if not journals and not versions:
        return claims
    return [
        dataclasses.replace(
            c,
            journal=c.journal if c.journal is not None else journals.get(c.run.run_id),
            versions=c.versions if c.versions is not None else versions.get(c.run.run_id),
        )
        for c in claims
    ]


def _journals(tx: Tx, values: Values, run_ids: list[str]) -> dict[str, dict[int, JournalEntry]]:
    """Each run's journal by call index; a run the row bound may have cut is left out."""
    if not run_ids:
        return {}
    rows = tx.all(
        f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id IN ({marks(len(run_ids))})"
        " ORDER BY run_id, call_index LIMIT ?",
        [*run_ids, JOURNAL_ROWS + 1],
    )
    found: dict[str, dict[int, JournalEntry]] = defaultdict(dict)
    for r in rows[:JOURNAL_ROWS]:
        found[r[0]][r[1]] = values.entry(_entry_from_row(r))
    if len(rows) <= JOURNAL_ROWS:  # all read: a run with no row has an empty journal
        return {rid: found.get(rid, {}) for rid in run_ids}
    # Cut: rows come grouped by run, so every run but the last one read is whole; runs
    # that sort after it were not reached.
    found.pop(rows[JOURNAL_ROWS - 1][0], None)
    return dict(found)


def _versions(tx: Tx, run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Each run's version markers (ctx.version): a few rows per run at most."""
    if not run_ids:
        return {}
    rows = tx.all(
        f"SELECT run_id, change_id, version FROM versions WHERE run_id IN ({marks(len(run_ids))})",
        run_ids,
    )
    found: dict[str, dict[str, int]] = {rid: {} for rid in run_ids}
    for rid, change_id, version in rows:
        found[rid][change_id] = int(version)
    return found


__all__ = ["JOURNAL_ROWS", "with_replay"]
