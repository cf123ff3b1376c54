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

from flowctl.model import Run, iso
from flowctl.store.rows import add_event
from flowctl.store.sql import Tx

# Runs of a key running now (leases lapsed or not), from runs_flow.
_RUNNING = "SELECT COUNT(*) FROM runs WHERE flow_key = ? AND status = 'running'"

# Held: its due time kept in held_at, its run_at its deadline (still acted on) or NULL.
_HOLD = "UPDATE runs SET held_at = run_at, run_at = deadline WHERE run_id = ?"


class KeySlots:
    """One claim transaction's view of the keys it met: runs running per key (as counted
    when first met, plus those it claimed since) and the keys it could not lock."""

    __slots__ = ("locked", "running")

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.locked: set[str] = set()  # another transaction decides for these now

    def take(self, tx: Tx, run: Run, now_us: int, *, reclaim: bool) -> bool:
        """Whether `run` may be claimed now; if so its slot is counted taken. A run beyond
        its key's limit is held (False); a reclaimed run already holds its slot."""
        key = run.flow_key
        if key is None:
            return True
        if key in self.locked:
            return False
        used = self.running.get(key)
        if used is None:
            if tx.dialect.flow_lock and not _locked(tx, key):
                self.locked.add(key)
                return False
            row = tx.one(_RUNNING, [key])
            used = int(row[0]) if row is not None else 0
        if reclaim:
            self.running[key] = used
            return True
        if used >= (run.flow_limit or 1):
            self.running[key] = used
            hold(tx, run, now_us)
            return False
        self.running[key] = used + 1
        return True


def _locked(tx: Tx, key: str) -> bool:
    row = tx.one("{flow_lock}", [key])
    return bool(row is not None and row[0])


def hold(tx: Tx, run: Run, now_us: int) -> None:
    """Hold `run` behind its full key: out of the due runs until a slot is given back."""
    tx.execute(_HOLD, [run.run_id])
    data = {"key": run.flow_key, "limit": run.flow_limit, "due": iso(run.run_at)}
    add_event(tx, run.run_id, now_us, "held", data)
