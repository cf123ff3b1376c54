"""Named limits (issue 37, item 2): defined in the database, so every daemon of a fleet
agrees and a change needs no deploy; taken by a step's start in one transaction with the
fence check; given back when the step ends, or when its run's lease lapses.

A take reads the limit FOR UPDATE (PostgreSQL: one taker of a limit at a time; SQLite's
write lock already serialises them), the holders whose runs still hold their leases and
the starts within the rate's window, and applies flowctl.flow.tokens.decide: it records
the hold and the start, or marks the run as waiting for the limit and says until when.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flowctl.flow.tokens import LimitSpec, decide
from flowctl.model import from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.records import Lease, LimitState, LimitTake
from flowctl.store.rows import held_row
from flowctl.store.sql import Tx

_SPEC = "SELECT name, concurrency, rate_n, period_us FROM limits"

# The steps holding limit ? now, (run_id, call_index, since, lease_until), the oldest
# first: their runs still running under a live lease (as of ?), so a dead daemon's holds
# are given back as its leases lapse; or under the asking daemon's own (?), lapsed or
# not: that daemon is alive, it asks, and a stall of it longer than a lease (its
# heartbeat late) must not let two of its own runs hold at once.
_HOLDERS = (
    "SELECT h.run_id, h.call_index, h.since, r.lease_until FROM limit_holds h JOIN runs r"
    " ON r.run_id = h.run_id WHERE h.name = ? AND r.status = 'running'"
    " AND (r.lease_until > ? OR r.lease_owner = ?) ORDER BY h.since"
)
# A waiter behind a holder of its own daemon whose lease lapsed is looked at again this
# much later at the latest (the holder's release wakes it first).
_STALLED_HOLDER_US = 1_000_000
# Every start after ? (those recorded later than `now` by a writer whose clock read came
# after ours but whose transaction came first included: starts are made monotonic below).
_STARTS = "SELECT at FROM limit_starts WHERE name = ? AND at > ? ORDER BY at"

# A waiter of limit ? due again now (?): the one with the highest priority, then the soonest.
_WAKE_WAITER = (
    "UPDATE runs SET run_at = ? WHERE run_id = (SELECT w.run_id FROM runs w WHERE"
    " w.flow_wait = ? AND w.status = 'sleeping' AND w.run_at > ?"
    " ORDER BY w.priority DESC, w.run_at LIMIT 1)"
)


class Limits(StoreCore):
    """Named limits: defining them, and taking and giving them back."""

    def set_limit(
        self, name: str, concurrency: int | None, rate: tuple[int, int] | None, now: datetime
    ) -> LimitSpec:
        """Create or change a limit: `rate` is (N, period in µs). Returns it as stored."""
        n, period = rate if rate is not None else (None, None)
        spec = LimitSpec(name, concurrency, n, period)

        def write(tx: Tx) -> LimitSpec:
            tx.execute(
                "INSERT INTO limits (name, concurrency, rate_n, period_us, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                " concurrency = excluded.concurrency, rate_n = excluded.rate_n,"
                " period_us = excluded.period_us, updated_at = excluded.updated_at",
                [name, concurrency, n, period, to_us(now)],
            )
            return spec

        return self._write(write)

    def remove_limit(self, name: str) -> bool:
        """Remove a limit, its holds and its starts; False when there was none."""

        def write(tx: Tx) -> bool:
            if tx.one("SELECT 1 FROM limits WHERE name = ?{for_update}", [name]) is None:
                return False
            for table in ("limit_holds", "limit_starts", "limits"):
                tx.execute(f"DELETE FROM {table} WHERE name = ?", [name])
            return True

        return self._write(write)

    def limit_names(self) -> list[str]:
        return [str(r[0]) for r in self._read("SELECT name FROM limits ORDER BY name")]

    def limit_states(self, now: datetime, name: str | None = None) -> list[LimitState]:
        """Every limit (or the one named) with its holders and starts in its window now."""
        now_us = to_us(now)
        with self.db.snapshot() as tx:
            where, args = ("", []) if name is None else (" WHERE name = ?", [name])
            specs = [_spec(r) for r in tx.all(f"{_SPEC}{where} ORDER BY name", args)]
            return [_state(tx, spec, now_us) for spec in specs]

    def key_holders(self, key: str) -> list[tuple[str, datetime | None]]:
        """The runs running under concurrency key `key`, each with when it was last claimed."""
        rows = self._read(
            "SELECT r.run_id, (SELECT MAX(t.at) FROM timeline t WHERE t.run_id = r.run_id AND"
            " t.type IN ('claimed', 'reclaimed')) FROM runs r WHERE r.flow_key = ?"
            " AND r.status = 'running' ORDER BY r.started_at, r.run_id",
            [key],
        )
        return [(str(r[0]), None if r[1] is None else from_us(int(r[1]))) for r in rows]

    def collapsed_starts(self, run_id: str) -> int:
        """How many starts of a debounced workflow were collapsed into run `run_id`."""
        rows = self._read(
            "SELECT COUNT(*) FROM timeline WHERE run_id = ? AND type = 'debounced'", [run_id]
        )
        return int(rows[0][0])

    def take_limit(self, lease: Lease, name: str, call_index: int, now: datetime) -> LimitTake:
        """A step of the run `lease` holds starts under limit `name`: taken (a hold and a
        start recorded), or not yet (the run marked waiting for it, and until when), or
        the limit is unknown (the defined names), or the lease is lost."""
        now_us = to_us(now)
        return self._write(lambda tx: _take(tx, lease, name, call_index, now_us))

    def release_limit(self, lease: Lease, name: str, call_index: int, now: datetime) -> None:
        """The step that took `name` at `call_index` ended: its hold is given back, and the
        first run waiting for the limit is due now. Nothing if the lease is lost (its hold
        is given back as that lease lapsed)."""
        now_us = to_us(now)

        def write(tx: Tx) -> None:
            if held_row(tx, lease) is None:
                return
            tx.execute(
                "DELETE FROM limit_holds WHERE name = ? AND run_id = ? AND call_index = ?",
                [name, lease.run_id, call_index],
            )
            tx.execute(_WAKE_WAITER, [now_us, name, now_us])

        self._write(write)


def _spec(row: Any) -> LimitSpec:
    return LimitSpec(str(row[0]), row[1], row[2], row[3])


def _window(spec: LimitSpec, now_us: int) -> int:
    return now_us - (spec.period_us or 0)


def _state(tx: Tx, spec: LimitSpec, now_us: int) -> LimitState:
    holders = tx.all(_HOLDERS, [spec.name, now_us, None])
    starts = [int(r[0]) for r in tx.all(_STARTS, [spec.name, _window(spec, now_us)])]
    if spec.rate_n is None:
        starts = []
    verdict = decide(spec, [int(h[3]) for h in holders], starts, now_us)
    return LimitState(
        spec=spec,
        holders=[(str(h[0]), int(h[1]), from_us(int(h[2]))) for h in holders],
        starts=len(starts),
        next_free=None if verdict.until_us is None else from_us(verdict.until_us),
    )


def _lease_end(lease_until: int | None, now_us: int) -> int:
    """A holder's lease end as a waiter's fallback wake: a lapsed one (a holder of the
    asking daemon's own) is looked at again a little later, not at once."""
    if lease_until is None or lease_until <= now_us:
        return now_us + _STALLED_HOLDER_US
    return int(lease_until)


def _take(tx: Tx, lease: Lease, name: str, call_index: int, now_us: int) -> LimitTake:
    row = tx.one(f"{_SPEC} WHERE name = ?{{for_update}}", [name])
    if row is None:
        names = tuple(str(r[0]) for r in tx.all("SELECT name FROM limits ORDER BY name"))
        return LimitTake(unknown=names)
    held = held_row(tx, lease, "flow_wait")
    if held is None:
        return LimitTake(lost=True)
    spec, rid = _spec(row), lease.run_id
    holders = [
        _lease_end(h[3], now_us)
        for h in tx.all(_HOLDERS, [name, now_us, lease.owner])
        if (str(h[0]), int(h[1])) != (rid, call_index)
    ]
    starts: list[int] = []
    if spec.rate_n is not None:
        starts = [int(r[0]) for r in tx.all(_STARTS, [name, _window(spec, now_us)])]
        # A start is recorded no earlier than the latest one: takers read their clocks
        # before they wait for the write, so `now` may lag one recorded meanwhile, and
        # the window is judged on recorded starts in the order they were taken.
        now_us = max([now_us, *starts[-1:]])
    verdict = decide(spec, holders, starts, now_us)
    if verdict.until_us is not None:
        if held[0] != name:
            tx.execute("UPDATE runs SET flow_wait = ? WHERE run_id = ?", [name, rid])
        return LimitTake(spec=spec, until=from_us(verdict.until_us), why=verdict.why)
    if held[0] is not None:
        tx.execute("UPDATE runs SET flow_wait = NULL WHERE run_id = ?", [rid])
    if spec.concurrency is not None:
        tx.execute(
            "INSERT INTO limit_holds (name, run_id, call_index, since) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name, run_id, call_index) DO UPDATE SET since = excluded.since",
            [name, rid, call_index, now_us],
        )
    if spec.rate_n is not None:
        tx.execute(
            "DELETE FROM limit_starts WHERE name = ? AND at <= ?", [name, _window(spec, now_us)]
        )
        tx.execute(
            "INSERT INTO limit_starts (name, at, run_id) VALUES (?, ?, ?)", [name, now_us, rid]
        )
    return LimitTake(spec=spec)
