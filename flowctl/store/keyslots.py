"""Concurrency keys inside a claim's transaction (issue 37, item 1): whether a due run of a
limited key may be claimed, and holding it behind its full key when not.

A run with a `flow_key` may run while fewer than its `flow_limit` runs of that key are
`running` (a run whose lease lapsed still counts: it is reclaimed and goes on holding its
slot, so a crash never lets a key run more at once, and never leaks the slot). The count
is read once per key per claim, inside the claim's transaction, and kept up as the claim
takes runs: SQLite's write lock makes it atomic; on PostgreSQL the claim first takes the
key's advisory lock (tried, never waited for: a key another transaction holds is passed
over until the next claim), the same lock the trigger that gives a slot back takes.
Runs with no key never come here: the claim of an unlimited run pays nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from flowctl.model import Run
from flowctl.store.flowsql import WAITING, WAITS
from flowctl.store.sql import Row, Tx

# Places in a row of mapping._RUN_COLUMNS.
STATUS, DEADLINE, PRIORITY, FLOW_KEY, FLOW_LIMIT, HELD_AT = 4, 12, 41, 42, 43, 44

# Runs of a key running now (leases lapsed or not), from runs_flow.
_RUNNING = "SELECT COUNT(*) FROM runs WHERE flow_key = ? AND status = 'running'"

# Held: its due time kept in held_at, its run_at its deadline (still acted on) or NULL.
# Every run of a full key due now is held at once (by runs_flow_due, whose partial WHERE
# the subquery repeats word for word, so SQLite's planner may use it), not only the ones a
# claim read: the claims after it then never read them as candidates (10,000 runs over
# 100 busy keys were each read and held one claim at a time). A run past its deadline
# is left to the claim's verdict (which ends it); one another claimer holds is skipped.
_HOLD_KEY = (
    "UPDATE runs SET held_at = run_at, run_at = deadline WHERE run_id IN (SELECT run_id"
    f" FROM runs WHERE flow_key = ? AND held_at IS NULL AND {WAITS}"
    " AND run_at <= ? AND (deadline IS NULL OR deadline > ?){skip_locked})"
)
# A run the claim passed over behind its full key that was held before and made due since
# by another path (a signal, a resume, a redrive), held by its id: it keeps its held_at,
# so runs_flow_due (and the hold above) leave it out.
_HOLD_RUN = (
    f"UPDATE runs SET held_at = run_at, run_at = deadline WHERE run_id = ? AND {WAITS}"
    " AND run_at <= ? AND (deadline IS NULL OR deadline > ?)"
)


class KeySlots:
    """One claim transaction's view of the keys it met: runs running per key (as counted
    when first met, plus those it claimed since), the counts its candidate rows were read
    with, the keys it could not lock, and the full keys whose due runs it holds with the
    runs it passed over behind them (written together by `hold`)."""

    __slots__ = ("counted", "held", "locked", "passed", "running")

    def __init__(self) -> None:
        self.held: set[str] = set()  # full keys, whose due runs are held (flush)
        self.passed: list[str] = []  # passed over behind them with a held_at of before
        self.running: dict[str, int] = {}
        self.counted: dict[str, int] = {}  # key -> running, as read with a candidate's row
        self.locked: set[str] = set()  # another transaction decides for these now

    def note(self, rows: Sequence[Row], at: int) -> None:
        """The running count each candidate row (a run's row, flow_key at FLOW_KEY) was read
        with, for keys not met yet: where one writer writes (SQLite) it is the count inside
        this transaction, so the claim needs no statement of its own for it."""
        for r in rows:
            key = r[FLOW_KEY]
            if key is not None and key not in self.running:
                self.counted[key] = int(r[at])

    def full(self, tx: Tx, row: Row, now_us: int) -> bool:
        """Whether a candidate's row (not decoded) is of a key already full, by the counts
        noted (SQLite): it is held, and the claim passes it over without deciding more. A
        run past its deadline is left to the claim's verdict (which ends it)."""
        key = row[FLOW_KEY]
        if key is None or tx.dialect.flow_lock or row[STATUS] not in WAITING:
            return False
        if row[DEADLINE] is not None and row[DEADLINE] <= now_us:
            return False
        used = self.running.get(key, self.counted.get(key))
        if used is None or used < (row[FLOW_LIMIT] or 1):
            return False
        self.running[key] = used
        self.held.add(key)
        if row[HELD_AT] is not None:  # held before and made due since: _HOLD_KEY skips it
            self.passed.append(row[0])
        return True

    def take(self, tx: Tx, run: Run, now_us: int, *, reclaim: bool, counted: bool) -> bool:
        """Whether `run` may be claimed now; if so its slot is counted taken. A run beyond
        its key's limit is held (False); a reclaimed run already holds its slot. `counted`:
        the counts noted still hold (no run was ended in this transaction since)."""
        key = run.flow_key
        if key is None:
            return True
        if key in self.locked:
            return False
        used = self.running.get(key)
        if used is None:
            used = self._count(tx, key, counted)
            if used is None:
                self.locked.add(key)
                return False
        if reclaim:
            self.running[key] = used
            return True
        if used >= (run.flow_limit or 1):
            self.running[key] = used
            self.held.add(key)
            if run.held_at is not None:  # held before and made due since: _HOLD_KEY skips it
                self.passed.append(run.run_id)
            return False
        self.running[key] = used + 1
        return True

    def _count(self, tx: Tx, key: str, counted: bool) -> int | None:
        """The runs running under `key` now, or None when its lock is another's."""
        if tx.dialect.flow_lock:  # PostgreSQL: counted again under the key's lock
            if not _locked(tx, key):
                return None
        elif counted and key in self.counted:
            return self.counted[key]
        row = tx.one(_RUNNING, [key])
        return int(row[0]) if row is not None else 0


def _locked(tx: Tx, key: str) -> bool:
    row = tx.one("{flow_lock}", [key])
    return bool(row is not None and row[0])


def hold(tx: Tx, keys: Collection[str], passed: Sequence[str], now_us: int) -> None:
    """Hold the runs of these full keys due by `now_us`, and the runs `passed` over behind
    them that were held before (one executemany each): out of the due runs until a slot
    is given back. No event is written: a run is held and given back as often as its key
    is busy when it comes due (half of all runs, over 100 busy keys), and `why` reads the
    hold from the row."""
    if keys:
        tx.send_many(_HOLD_KEY, [(key, now_us, now_us) for key in sorted(keys)])
        tx.send_many(_HOLD_RUN, [(run_id, now_us, now_us) for run_id in passed])
