"""The fenced writes of the worker holding a run: checkpoints, signals consumed, version
markers, published values, suspension, completion, failure and ending.

Each one is a `_write()` transaction (BEGIN IMMEDIATE: the write lock is held from its first
statement) that starts with `_held(c, lease)`, the one fence check, and writes nothing when
it finds no row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.model import JournalEntry, RunStatus, to_us
from flowctl.store.records import Lease, checkpoint_params, dumps
from flowctl.store.sqlite.connection import SqliteConnection, _Deferred
from flowctl.store.sqlite.rows import (
    _CLEARED,
    _ENTRY_COLUMNS,
    _RUN_COLUMNS,
    _RUNS,
    TIMELINE_INSERT,
    _add_event,
    _dt,
    _in_chunks,
    _load_run,
    _loads,
    _run_from_row,
    _us,
)
from flowctl.store.sqlite.writes import (
    NOTIFICATION_INSERT,
    _end,
    _fail,
    _park_paused,
    _release_held,
    _wake_parent,
)
from flowctl.transitions import (
    Applied,
    awaited_child,
    awaited_signal,
    parked_run_at,
    suspension,
)


class FencedWrites(SqliteConnection):
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

        The fence check is the INSERT's own condition (one statement, no SELECT first).
        `suspicion=False`: the caller knows the run has no suspicion to clear (its claim
        showed none, or an earlier write of this attempt cleared it), so no UPDATE of the
        run's row is tried either."""
        now_us = to_us(now)
        run_id = lease.run_id
        row = _journal_row(lease, entry, now_us)  # made before the write turn is taken
        single = not suspicion and event is None
        if single:  # the batch runner's round writes it with the others (deferred)
            held = self.deferred(_JOURNAL_HELD, row)
            if held is not None:
                return held
        # Most checkpoints are the INSERT alone: one statement, no savepoint needed.
        with self._write(single=single) as c:
            if not _journal_held(c, row):
                return False
            if suspicion:  # progress: a suspect is cleared, and the crashes charged to it forgiven
                c.execute(
                    f"UPDATE runs SET {_CLEARED} WHERE run_id = ?"
                    " AND (reclaims != 0 OR suspect != 0)",
                    [run_id],
                )
            if event is not None:
                _add_event(c, run_id, now_us, event[0], event[1])
            return True

    def consume_signal(
        self, lease: Lease, name: str, call_index: int, now: datetime
    ) -> tuple[bool, Any, bool]:
        """Take the oldest buffered signal `name` and journal it at `call_index`.

        Returns (lease_ok, payload, found).
        """
        now_us = to_us(now)
        run_id = lease.run_id
        with self._write() as c:
            if _held(c, lease) is None:
                return False, None, False
            row = c.execute(
                "SELECT seq, payload FROM signals WHERE run_id = ? AND name = ? AND consumed_at IS NULL"
                " ORDER BY seq LIMIT 1",
                [run_id, name],
            ).fetchone()
            if row is None:
                return True, None, False
            seq, payload_text = row
            c.execute(
                "UPDATE signals SET consumed_at = ?, call_index = ? WHERE seq = ?",
                [now_us, call_index, seq],
            )
            value = {"payload": _loads(payload_text), "timed_out": False}
            c.execute(
                f"INSERT OR REPLACE INTO journal ({_ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    run_id,
                    call_index,
                    "signal",
                    name,
                    "done",
                    dumps(value),
                    None,
                    now_us,
                    now_us,
                    0,
                    None,
                ],
            )
            c.execute(f"UPDATE runs SET {_CLEARED} WHERE run_id = ?", [run_id])
            _add_event(c, run_id, now_us, "signal received", {"name": name, "index": call_index})
            return True, value["payload"], True

    def record_version(self, lease: Lease, change_id: str, version: int, now: datetime) -> bool:
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                "INSERT OR IGNORE INTO versions (run_id, change_id, version, recorded_at) VALUES (?,?,?,?)",
                [lease.run_id, change_id, version, to_us(now)],
            )
            return True

    def publish(self, lease: Lease, key: str, value: Any, now: datetime) -> bool:
        """Set a status value the run shows to operators (`ctx.publish`); last write wins."""
        text = dumps(value, f"published value {key!r}")
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                "INSERT OR REPLACE INTO published (run_id, key, value, at) VALUES (?,?,?,?)",
                [lease.run_id, key, text, to_us(now)],
            )
            return True

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
        """Park a run (sleeping, waiting, or queued for a step retry), journaling its pending call.

        Clears the lease: a suspended run holds no worker. Returns what it applied (the
        effective run_at: `run_at` clamped to the deadline, or now if a signal it waits
        for is already buffered), or None when the lease is lost.
        """
        now_us = to_us(now)
        run_id = lease.run_id
        with self._write() as c:
            row = _held(c, lease, "deadline, pause_requested")
            if row is None:
                return None
            status, run_at = suspension(status, run_at, now)
            at = _us(parked_run_at(run_at, deadline=_dt(row[0])))
            if entry is not None:
                c.execute(
                    f"INSERT OR REPLACE INTO journal ({_ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        run_id,
                        entry.call_index,
                        str(entry.kind),
                        entry.name,
                        str(entry.state),
                        None if entry.value is None else dumps(entry.value),
                        _us(entry.wake_at),
                        now_us,
                        None,
                        entry.tries,
                        None if entry.duration is None else round(entry.duration * 1e6),
                    ],
                )
            c.execute(
                "UPDATE runs SET status = ?, run_at = ?, lease_owner = NULL, lease_until = NULL,"
                f" exec_spent_us = ?, solo = 0, {_CLEARED} WHERE run_id = ?",
                [str(status), at, round(exec_spent * 1e6), run_id],
            )
            _add_event(c, run_id, now_us, event[0], event[1])
            # A signal or a child's end that came while we ran woke nobody: not missed.
            if _awaited_done(c, run_id, status, entry):
                at = now_us
                c.execute("UPDATE runs SET run_at = ? WHERE run_id = ?", [at, run_id])
            if row[1]:  # a pause was requested: it takes effect at this durable call
                return _park_paused(c, _load_run(c, run_id), status, at, now_us)
            return Applied(status, _dt(at))

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
        now_us = to_us(now)
        run_id = lease.run_id
        result_text = dumps(result, "the workflow's result")
        row = None if entry is None else _journal_row(lease, entry, now_us)
        ending = [result_text, now_us, round(exec_spent * 1e6), run_id, lease.fence, lease.owner]
        if row is not None and links == (None, None):  # the round writes it with the others
            done = self.deferred(_COMPLETE, (row, ending), _complete_many)
            if done is not None:
                return done
        with self._write() as c:
            if row is not None and not _journal_held(c, row):
                return False  # the fence check, folded into the last checkpoint's INSERT
            if links is None:
                held = _held(c, lease, "parent_run_id, schedule")
                if held is None:
                    return False
                links = held[0], held[1]
            parent, schedule = links
            if not _completed(c, ending):  # links given and no entry: the fence check
                return False
            if parent is not None:  # known from the claim or read under the lease
                _wake_parent(c, run_id, now_us)
            if schedule is not None:
                _release_held(c, run_id, now_us)
            return True

    def fail_attempt(
        self,
        lease: Lease,
        error: dict[str, Any],
        now: datetime,
        exec_spent: float,
        retry_at: datetime | None,
    ) -> Applied | None:
        """End the current attempt with `error`: queue the next attempt at `retry_at` (or
        after the run's backoff), or dead-letter the run. Returns what it applied, or None
        when the lease is lost."""
        now_us = to_us(now)
        with self._write() as c:
            row = _held(c, lease, _RUN_COLUMNS)
            if row is None:
                return None
            run = _run_from_row(row)
            c.execute(
                "UPDATE runs SET exec_spent_us = ? WHERE run_id = ?",
                [round(exec_spent * 1e6), run.run_id],
            )
            return _fail(c, run, error, now_us, retry_at=_us(retry_at))

    def end_run(
        self,
        lease: Lease,
        status: RunStatus,
        error: dict[str, Any] | None,
        now: datetime,
        exec_spent: float,
    ) -> bool:
        """End a held run terminally (cancelled, or dead without retry)."""
        with self._write() as c:
            row = _held(c, lease, _RUN_COLUMNS)
            if row is None:
                return False
            run = _run_from_row(row)
            c.execute(
                "UPDATE runs SET exec_spent_us = ? WHERE run_id = ?",
                [round(exec_spent * 1e6), run.run_id],
            )
            _end(c, run, status, error, to_us(now))
            return True


def _held(c: sqlite3.Connection, lease: Lease, columns: str = "1") -> Sequence[Any] | None:
    """THE fence check, made by every write a lease holder makes: the run's row (`columns`
    of it) if it is still running under this lease's fence and owner, else None.

    Called first inside the write's transaction, which holds SQLite's write lock from its
    BEGIN IMMEDIATE: no claim can move the fence between this check and the writes after it.
    `columns` is a constant of the caller's (what it needs to decide its write), never input.
    """
    row: Sequence[Any] | None = c.execute(
        f"SELECT {columns} FROM {_RUNS} WHERE run_id = ? AND fence = ? AND lease_owner = ?"
        " AND status = 'running'",
        [lease.run_id, lease.fence, lease.owner],
    ).fetchone()
    return row


def _awaited_done(
    c: sqlite3.Connection, run_id: str, status: RunStatus, entry: JournalEntry | None
) -> bool:
    """Whether what a run parking as waiting waits for has already happened: its signal is
    buffered, or its child run has ended. Read in the parking transaction, under the write
    lock, so nothing can happen between this read and the park."""
    signal = awaited_signal(status, entry)
    if signal is not None:
        return bool(
            c.execute(
                "SELECT 1 FROM signals WHERE run_id = ? AND name = ? AND consumed_at IS NULL",
                [run_id, signal],
            ).fetchone()
        )
    child = awaited_child(status, entry)
    if child is None:
        return False
    row = c.execute("SELECT status FROM runs WHERE run_id = ?", [child]).fetchone()
    return row is not None and RunStatus(row[0]).is_terminal


# A held run's row, as a WHERE clause (run_id, fence, owner): the fence check of a write
# that is itself the check (its rowcount says whether the lease is still ours).
_FENCED = "run_id = ? AND fence = ? AND lease_owner = ? AND status = 'running'"

# A held run's completion: (result, finished_at, exec_spent_us, run_id, fence, owner).
_COMPLETE = (
    "UPDATE runs SET status = 'completed', result = ?, error = NULL, finished_at = ?,"
    " run_at = NULL, lease_owner = NULL, lease_until = NULL, exec_spent_us = ?,"
    f" pause_requested = 0, solo = 0, {_CLEARED} WHERE {_FENCED}"
)


def _completed(c: sqlite3.Connection, ending: list[Any]) -> bool:
    """Complete a held run (its row, its run_counts move, its `completed` event and its
    outbox row); False, writing nothing, when its lease is lost."""
    done = c.execute(_COMPLETE + " RETURNING workflow", ending).fetchall()
    if not done:
        return False
    # run_counts: one move from running to completed, made here (migration 20).
    if c.execute(_COUNTS_COMPLETED, [1, 1, done[0][0]]).rowcount != 2:
        c.execute(_COUNTS_FIRST_COMPLETED, [done[0][0], 1])  # the workflow's first completion
    run_id, now_us = ending[3], ending[1]
    c.execute(TIMELINE_INSERT, (run_id, now_us, "completed", None))
    c.execute(NOTIFICATION_INSERT, (run_id, str(RunStatus.COMPLETED), None, now_us, now_us))
    return True


def _complete_many(c: sqlite3.Connection, items: list[_Deferred]) -> None:
    """A round's deferred completions (complete_run of a run with no parent and no
    schedule, its last checkpoint with it): each statement once for all of them.

    The checkpoints' INSERT is the fence check of all: when every lease held, every
    completion is written by one executemany per statement, and the run_counts moves
    by one statement per workflow; else each run is written alone (its checkpoint again,
    the same row) and one whose lease is lost writes nothing. Any error fails the
    group (write_deferred rolls it back): no run is left half completed."""
    rows = [item.params[0] for item in items]
    if c.executemany(_JOURNAL_HELD, rows).rowcount != len(rows):
        for item in items:
            row, ending = item.params
            item.applied = _journal_held(c, row) and _completed(c, ending)
        return
    endings = [item.params[1] for item in items]
    if c.executemany(_COMPLETE, endings).rowcount != len(endings):
        # Each checkpoint's INSERT found its run held, under this same write lock.
        raise sqlite3.DatabaseError("a completion found its run no longer held")
    moved: dict[str, int] = {}
    for chunk, marks in _in_chunks([ending[3] for ending in endings]):
        for (workflow,) in c.execute(f"SELECT workflow FROM runs WHERE run_id IN ({marks})", chunk):
            moved[workflow] = moved.get(workflow, 0) + 1
    for workflow, n in moved.items():
        if c.execute(_COUNTS_COMPLETED, [n, n, workflow]).rowcount != 2:
            c.execute(_COUNTS_FIRST_COMPLETED, [workflow, n])
    c.executemany(TIMELINE_INSERT, [(e[3], e[1], "completed", None) for e in endings])
    done = str(RunStatus.COMPLETED)
    c.executemany(NOTIFICATION_INSERT, [(e[3], done, None, e[1], e[1]) for e in endings])
    for item in items:
        item.applied = True


# A completion's move in run_counts, in one statement: the runs trigger leaves a move into
# completed to complete_run, the only write that makes it (migration 20). The workflow's
# running row is there (its run was counted into it); its completed row is there after the
# first completion, which finds only the running row and adds the completed one.
_COUNTS_COMPLETED = (  # (n, n, workflow): n runs move
    "UPDATE run_counts SET n = n + IIF(status = 'completed', ?, -?)"
    " WHERE workflow = ? AND status IN ('running', 'completed')"
)
_COUNTS_FIRST_COMPLETED = "INSERT INTO run_counts (workflow, status, n) VALUES (?, 'completed', ?)"


def _journal_row(lease: Lease, entry: JournalEntry, now_us: int) -> list[Any]:
    """_JOURNAL_HELD's parameters: `entry`'s journal row, then the lease that must hold.
    Made (its value's JSON included) before the write, outside the turn on the lock."""
    return [*checkpoint_params(lease.run_id, entry, now_us), lease.run_id, lease.fence, lease.owner]


def _journal_held(c: sqlite3.Connection, row: list[Any]) -> bool:
    """Insert or replace a journal row (_journal_row) if the run is still held under its
    lease, in one statement: the INSERT selects its values from the run's row only when
    that row still carries this lease's fence and owner, so its rowcount is the fence
    check (the write lock is held from BEGIN IMMEDIATE: no claim moves the fence in
    between)."""
    return c.execute(_JOURNAL_HELD, row).rowcount == 1


_JOURNAL_HELD = (
    f"INSERT OR REPLACE INTO journal ({_ENTRY_COLUMNS})"
    f" SELECT ?,?,?,?,?,?,?,?,?,?,? FROM runs WHERE {_FENCED}"
)
