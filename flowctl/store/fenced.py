"""The fenced writes of the worker holding a run: checkpoints, signals consumed, version
markers, published values, suspension, completion, failure and ending.

Each is one transaction that writes nothing unless the run is still running under the
writer's lease: the fence check is the write's own condition where one statement can
carry it (a checkpoint's INSERT selects its values from the run's row only while that
row holds the lease; a completion's UPDATE names the lease), else `rows.held_row`,
read first. Checkpoints and plain completions are the writes a round writes together
(`CHECKPOINTS`, `COMPLETIONS`): each statement once for all of the round's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.fanout import children_seen
from flowctl.model import JournalEntry, RunStatus, from_us, to_us
from flowctl.store.branches import ended_children
from flowctl.store.core import StoreCore
from flowctl.store.endings import (
    NOTIFICATION_IF_PINNED,
    NOTIFICATION_INSERT,
    end,
    fail,
    move_counts,
    move_counts_of,
    park_paused,
    release_held,
    wake_parent,
)
from flowctl.store.mapping import _ENTRY_COLUMNS, _RUN_COLUMNS, _dt, _run_from_row, _us
from flowctl.store.records import Lease, checkpoint_params, dumps
from flowctl.store.round import Write, all_applied, run_alone, run_batched
from flowctl.store.rows import (
    CLEARED,
    FENCED,
    add_event,
    add_events,
    ended,
    event,
    held_row,
    load_run,
)
from flowctl.store.sql import Tx
from flowctl.store.values import JOURNAL, PUBLISHED, RESULT, SIGNAL, Values
from flowctl.transitions import Applied, awaited_child, awaited_signal, parked_run_at, suspension

# Insert or replace a journal row (both backends' upsert).
_UPSERT = (
    " ON CONFLICT (run_id, call_index) DO UPDATE SET kind = excluded.kind,"
    " name = excluded.name, state = excluded.state, value = excluded.value,"
    " wake_at = excluded.wake_at, recorded_at = excluded.recorded_at,"
    " resolved_at = excluded.resolved_at, tries = excluded.tries,"
    " duration_us = excluded.duration_us"
)
UPSERT_ENTRY = f"INSERT INTO journal ({_ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?){_UPSERT}"

# A journal row written only while the run is held under the lease (_journal_row): the
# INSERT selects its values from the run's row, so its rowcount is the fence check. The
# row is held to the end of the transaction (SQLite's write lock; FOR SHARE), so no claim
# moves the fence before the COMMIT.
JOURNAL_HELD = (
    f"INSERT INTO journal ({_ENTRY_COLUMNS}) SELECT ?,?,?,?,?,?,?,?,?,?,? FROM runs"
    f" WHERE {FENCED}{{for_share}}{_UPSERT}"
)

# A held run's completion: (result, finished_at, exec_spent_us, run_id, fence, owner).
_COMPLETE = (
    "UPDATE runs SET status = 'completed', result = ?, error = NULL, finished_at = ?,"
    " run_at = NULL, lease_owner = NULL, lease_until = NULL, exec_spent_us = ?,"
    f" pause_requested = 0, solo = 0, {CLEARED} WHERE {FENCED}"
)


class FencedWrites(StoreCore):
    """The worker's side: every write it makes carries its lease and changes nothing once
    the fence has moved on (a False/None return, not an exception)."""

    def record_entry(
        self,
        lease: Lease,
        entry: JournalEntry,
        now: datetime,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
        suspicion: bool = True,
    ) -> bool:
        """Journal one call's outcome (insert or replace its row). False: the lease is lost.

        `suspicion=False`: the caller knows the run has no suspicion to clear (its claim
        showed none, or an earlier write of this attempt cleared it), so no UPDATE of the
        run's row is tried either: the write is the INSERT alone, a round's CHECKPOINTS."""
        now_us, values = to_us(now), self.values
        row = _journal_row(values, lease, entry, now_us)  # its JSON made before the write's turn
        if event is not None:
            event = (event[0], values.note(event[1]))
        if not suspicion and event is None:
            return self._write(
                lambda tx: _journal_held(tx, row), batch=CHECKPOINTS, params=row, single=True
            )

        def write(tx: Tx) -> bool:
            if not _journal_held(tx, row):
                return False
            if suspicion:  # progress: a suspect is cleared, the crashes charged forgiven
                tx.execute(
                    f"UPDATE runs SET {CLEARED} WHERE run_id = ? AND (reclaims <> 0 OR suspect <> 0)",
                    [lease.run_id],
                )
            if event is not None:
                add_event(tx, lease.run_id, now_us, event[0], event[1])
            return True

        return self._write(write)

    def consume_signal(
        self, lease: Lease, name: str, call_index: int, now: datetime
    ) -> tuple[bool, Any, bool]:
        """Take the oldest buffered signal `name` and journal it at `call_index`.
        Returns (lease held, payload, found)."""
        values = self.values
        return self._write(
            lambda tx: _consume_signal(tx, values, lease, name, call_index, to_us(now))
        )

    def record_version(self, lease: Lease, change_id: str, version: int, now: datetime) -> bool:
        def write(tx: Tx) -> bool:
            if held_row(tx, lease) is None:
                return False
            tx.execute(
                "INSERT INTO versions (run_id, change_id, version, recorded_at)"
                " VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                [lease.run_id, change_id, version, to_us(now)],
            )
            return True

        return self._write(write)

    def publish(self, lease: Lease, key: str, value: Any, now: datetime) -> bool:
        """Set a status value the run shows to operators (`ctx.publish`); last write wins."""
        text = self.values.seal(dumps(value, f"published value {key!r}"), PUBLISHED)

        def write(tx: Tx) -> bool:
            if held_row(tx, lease) is None:
                return False
            tx.execute(
                "INSERT INTO published (run_id, key, value, at) VALUES (?,?,?,?)"
                " ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, at = excluded.at",
                [lease.run_id, key, text, to_us(now)],
            )
            return True

        return self._write(write)

    def suspend_run(
        self,
        lease: Lease,
        status: RunStatus,
        run_at: datetime | None,
        now: datetime,
        exec_spent: float,
        entry: JournalEntry | None,
        event: tuple[str, dict[str, Any]],
    ) -> Applied | None:
        """Park a run (sleeping, waiting, or queued for a step retry), journaling its pending
        call. Clears the lease: a suspended run holds no worker. Returns what it applied
        (the effective run_at: `run_at` clamped to the deadline, or now if what it waits
        for already came), or None when the lease is lost."""
        row = (
            None
            if entry is None
            else checkpoint_params(self.values, lease.run_id, entry, to_us(now))
        )
        if row is not None:
            row[8] = None  # a pending call is not resolved yet
        park = _Park(lease, status, run_at, to_us(now), round(exec_spent * 1e6), entry, row)
        noted = (event[0], self.values.note(event[1]))
        return self._write(lambda tx: _suspend(tx, park, noted))

    def complete_run(
        self,
        lease: Lease,
        result: Any,
        now: datetime,
        exec_spent: float,
        *,
        entry: JournalEntry | None = None,
        links: tuple[str | None, str | None] | None = None,
    ) -> bool:
        """Complete a held run; `entry`, the last checkpoint, journaled in the same
        transaction; `links`, (parent_run_id, schedule) as the claim read them (see
        Store.complete_run). One with its last checkpoint and neither link is a round's
        COMPLETIONS."""
        now_us = to_us(now)
        result_text = self.values.seal(dumps(result, "the workflow's result"), RESULT)
        row = None if entry is None else _journal_row(self.values, lease, entry, now_us)
        ending = [
            result_text,
            now_us,
            round(exec_spent * 1e6),
            lease.run_id,
            lease.fence,
            lease.owner,
        ]

        told = str(RunStatus.COMPLETED) not in self.untold

        def write(tx: Tx) -> bool:
            return _complete(tx, lease, row, ending, links, told)

        if row is not None and links == (None, None):
            return self._write(write, batch=COMPLETIONS, params=(row, ending, told))
        return self._write(write)

    def fail_attempt(
        self,
        lease: Lease,
        error: dict[str, Any],
        now: datetime,
        exec_spent: float,
        retry_at: datetime | None,
    ) -> Applied | None:
        """End the current attempt with `error`: queue the next attempt at `retry_at` (or
        after the run's backoff), or dead-letter the run. None when the lease is lost."""

        def write(tx: Tx) -> Applied | None:
            found = held_row(tx, lease, _RUN_COLUMNS)
            if found is None:
                return None
            _spent(tx, lease, exec_spent)
            run = _run_from_row(found)
            return fail(tx, self.values, run, error, to_us(now), retry_at=_us(retry_at))

        return self._write(write)

    def end_run(
        self,
        lease: Lease,
        status: RunStatus,
        error: dict[str, Any] | None,
        now: datetime,
        exec_spent: float,
    ) -> bool:
        """End a held run terminally (cancelled, or dead without retry)."""

        def write(tx: Tx) -> bool:
            found = held_row(tx, lease, _RUN_COLUMNS)
            if found is None:
                return False
            _spent(tx, lease, exec_spent)
            end(tx, self.values, _run_from_row(found), status, error, to_us(now))
            return True

        return self._write(write)

    def add_event(self, run_id: str, type_: str, data: dict[str, Any], now: datetime) -> None:
        row = event(run_id, to_us(now), type_, self.values.note(data))
        self._write(lambda tx: tx.execute("{timeline_insert}", row), single=True)

    def add_events(
        self, run_ids: Sequence[str], type_: str, data: dict[str, Any], now: datetime
    ) -> None:
        data = self.values.note(data)
        rows = [event(rid, to_us(now), type_, data) for rid in run_ids]
        self._write(lambda tx: add_events(tx, rows))


def _spent(tx: Tx, lease: Lease, exec_spent: float) -> None:
    tx.execute(
        "UPDATE runs SET exec_spent_us = ? WHERE run_id = ?",
        [round(exec_spent * 1e6), lease.run_id],
    )


def _journal_row(values: Values, lease: Lease, entry: JournalEntry, now_us: int) -> list[Any]:
    """JOURNAL_HELD's parameters: `entry`'s journal row, then the lease that must hold."""
    run_id, fence, owner = lease.run_id, lease.fence, lease.owner
    return checkpoint_params(values, run_id, entry, now_us, run_id, fence, owner)


def _journal_held(tx: Tx, row: list[Any]) -> bool:
    """Insert or replace a journal row (_journal_row) if the run is still held under its
    lease, in one statement: its rowcount is the fence check."""
    return bool(tx.execute(JOURNAL_HELD, row).rowcount == 1)


def _consume_signal(
    tx: Tx, values: Values, lease: Lease, name: str, call_index: int, now_us: int
) -> tuple[bool, Any, bool]:
    run_id = lease.run_id
    if held_row(tx, lease) is None:
        return False, None, False
    row = tx.one(
        "SELECT seq, payload FROM signals WHERE run_id = ? AND name = ? AND consumed_at IS NULL"
        " ORDER BY seq LIMIT 1{for_update}",
        [run_id, name],
    )
    if row is None:
        return True, None, False
    seq, payload_text = row
    tx.execute(
        "UPDATE signals SET consumed_at = ?, call_index = ? WHERE seq = ?",
        [now_us, call_index, seq],
    )
    value = {"payload": values.loads(payload_text, SIGNAL), "timed_out": False}
    entry = [
        run_id,
        call_index,
        "signal",
        name,
        "done",
        values.seal(dumps(value), JOURNAL),
        None,
        now_us,
        now_us,
        0,
        None,
    ]
    tx.execute(UPSERT_ENTRY, entry)
    tx.execute(f"UPDATE runs SET {CLEARED} WHERE run_id = ?", [run_id])
    add_event(tx, run_id, now_us, "signal received", {"name": name, "index": call_index})
    return True, value["payload"], True


class _Park:
    """What suspend_run writes, made before the write's turn."""

    __slots__ = ("entry", "exec_us", "lease", "now_us", "row", "run_at", "status")

    def __init__(
        self,
        lease: Lease,
        status: RunStatus,
        run_at: datetime | None,
        now_us: int,
        exec_us: int,
        entry: JournalEntry | None,
        row: list[Any] | None,
    ) -> None:
        self.lease, self.status, self.run_at, self.now_us = lease, status, run_at, now_us
        self.exec_us, self.entry, self.row = exec_us, entry, row


def _suspend(tx: Tx, park: _Park, event_: tuple[str, dict[str, Any]]) -> Applied | None:
    run_id, now_us = park.lease.run_id, park.now_us
    # An awaited child's row first, in the order the child's own ending takes the two rows
    # (where rows are locked: FOR SHARE waits out an ending in flight).
    child = awaited_child(park.status, park.entry)
    child_ended = child is not None and ended(tx, child)
    found = held_row(tx, park.lease, "deadline, pause_requested")
    if found is None:
        return None
    status, run_at = suspension(park.status, park.run_at, from_us(now_us))
    at = _us(parked_run_at(run_at, deadline=_dt(found[0])))
    if park.row is not None:
        tx.execute(UPSERT_ENTRY, park.row)
    tx.execute(
        "UPDATE runs SET status = ?, run_at = ?, lease_owner = NULL, lease_until = NULL,"
        f" exec_spent_us = ?, solo = 0, {CLEARED} WHERE run_id = ?",
        [str(status), at, park.exec_us, run_id],
    )
    add_event(tx, run_id, now_us, event_[0], event_[1])
    # A signal or a child's end that came while it ran woke nobody: not missed. The run's
    # row is held, so a send_signal in flight waits for this commit.
    signal = awaited_signal(status, park.entry)
    seen = children_seen(status, park.entry)  # ctx.children: a child ended since the read
    if (
        child_ended
        or (seen is not None and ended_children(tx, run_id) != seen)
        or (
            signal is not None
            and tx.one(
                "SELECT 1 FROM signals WHERE run_id = ? AND name = ? AND consumed_at IS NULL",
                [run_id, signal],
            )
        )
    ):
        at = now_us
        tx.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [at, run_id])
    if found[1]:  # a pause was requested: it takes effect at this durable call
        return park_paused(tx, load_run(tx, run_id), status, at, now_us)
    return Applied(status, _dt(at))


def _complete(
    tx: Tx,
    lease: Lease,
    row: list[Any] | None,
    ending: list[Any],
    links: tuple[str | None, str | None] | None,
    told: bool,
) -> bool:
    """complete_run's transaction, alone."""
    if row is not None and not _journal_held(tx, row):
        return False  # the fence check, folded into the last checkpoint's INSERT
    if links is None:
        found = held_row(tx, lease, "parent_run_id, schedule")
        if found is None:
            return False
        links = found[0], found[1]
    parent, schedule = links
    if not _completed(tx, ending, told):  # no entry: the UPDATE is the fence check
        return False
    if parent is not None:  # known from the claim or read under the lease
        wake_parent(tx, lease.run_id, ending[1])
    if schedule is not None:
        release_held(tx, lease.run_id, ending[1])
    return True


def _completed(tx: Tx, ending: list[Any], told: bool) -> bool:
    """Complete a held run (its row, its counts move, its `completed` event and its outbox
    row: unless `told`, only with a notify override); False, writing nothing, when its
    lease is lost."""
    done = tx.all(_COMPLETE + " RETURNING workflow", ending)
    if not done:
        return False
    move_counts(tx, {(done[0][0], "running", "completed"): 1})
    run_id, now_us = ending[3], ending[1]
    tx.execute("{timeline_insert}", (run_id, now_us, "completed", None))
    _record_completions(tx, [ending], told)
    return True


def _record_completions(tx: Tx, endings: list[list[Any]], told: bool) -> None:
    """The outbox rows of these completions (complete_run's `ending` parameters): all of
    them, or (not `told`: no channel of this process's [notify] wants a completion) those
    of runs with a notify override alone."""
    if not endings:
        return
    done = str(RunStatus.COMPLETED)
    if told:
        tx.send_many(NOTIFICATION_INSERT, [(e[3], done, None, e[1], e[1]) for e in endings])
    else:
        tx.send_many(
            NOTIFICATION_IF_PINNED, [(e[3], done, None, e[1], e[1], e[3]) for e in endings]
        )


def _checkpoints(tx: Tx, writes: list[Write[Any]]) -> None:
    """A round's plain checkpoints (record_entry with nothing but the INSERT)."""
    run_batched(tx, JOURNAL_HELD, writes)


def _completions(tx: Tx, writes: list[Write[Any]]) -> None:
    """A round's completions of runs with no parent and no schedule, each with its last
    checkpoint: each statement once for all of them.

    The checkpoints' INSERT is the fence check of all: when every lease held, every
    completion is written by one executemany per statement; else each run is written
    alone (its checkpoint again, the same row, and its completion, in a savepoint) and
    one whose lease is lost writes nothing. Raises only when the transaction can no
    longer go on (a write is then whole, or not written)."""
    if not all_applied(tx, JOURNAL_HELD, [w.params[0] for w in writes]):
        for write in writes:
            run_alone(tx, write)
        return
    endings = [w.params[1] for w in writes]
    # Each checkpoint's INSERT found its run held, in this same transaction, so each
    # completion's UPDATE finds it too.
    tx.send_many(_COMPLETE, endings)
    move_counts_of(tx, [ending[3] for ending in endings], "running", "completed")
    add_events(tx, [(e[3], e[1], "completed", None) for e in endings])
    for told in (True, False):
        _record_completions(tx, [w.params[1] for w in writes if w.params[2] is told], told)
    for write in writes:
        write.result = True


CHECKPOINTS = _checkpoints
COMPLETIONS = _completions
