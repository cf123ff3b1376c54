"""The PostgreSQL store: fenced writes by the worker holding a run (each checks its Lease
first, under FOR UPDATE)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from flowctl.model import (
    JournalEntry,
    RunStatus,
    from_us,
    to_us,
)
from flowctl.store.postgres.connection import retried
from flowctl.store.postgres.notifications import _record_ending
from flowctl.store.postgres.rows import (
    _CLEARED,
    _RUN_COLUMNS,
    _UPSERT_ENTRY,
    _add_event,
    _add_events,
    _dt,
    _ended,
    _event,
    _held,
    _load_run,
    _loads,
    _run_from_row,
    _us,
    _wake_parent,
)
from flowctl.store.postgres.transitions import Transitions, _release_held
from flowctl.store.records import (
    HeartbeatReply,
    Lease,
    checkpoint_params,
    dumps,
)
from flowctl.transitions import (
    Applied,
    awaited_child,
    awaited_signal,
    parked_run_at,
    suspension,
)


class Leases(Transitions):
    """Journal, heartbeat, suspend, complete, fail: every one a fenced transaction."""

    @retried
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
        `suspicion=False`: the run has none to clear (see Store.record_entry)."""
        now_us = to_us(now)
        run_id = lease.run_id
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                _UPSERT_ENTRY,
                checkpoint_params(run_id, entry, now_us),
            )
            if suspicion:
                c.execute(
                    f"UPDATE runs SET {_CLEARED} WHERE run_id = %s"
                    " AND (reclaims != 0 OR suspect != 0)",
                    [run_id],
                )
            if event is not None:
                _add_event(c, run_id, now_us, event[0], event[1])
            return True

    @retried
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
                "SELECT seq, payload FROM signals WHERE run_id = %s AND name = %s"
                " AND consumed_at IS NULL ORDER BY seq LIMIT 1 FOR UPDATE",
                [run_id, name],
            ).fetchone()
            if row is None:
                return True, None, False
            seq, payload_text = row
            c.execute(
                "UPDATE signals SET consumed_at = %s, call_index = %s WHERE seq = %s",
                [now_us, call_index, seq],
            )
            value = {"payload": _loads(payload_text), "timed_out": False}
            c.execute(
                _UPSERT_ENTRY,
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
            c.execute(f"UPDATE runs SET {_CLEARED} WHERE run_id = %s", [run_id])
            _add_event(c, run_id, now_us, "signal received", {"name": name, "index": call_index})
            return True, value["payload"], True

    @retried
    def record_version(self, lease: Lease, change_id: str, version: int, now: datetime) -> bool:
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                "INSERT INTO versions (run_id, change_id, version, recorded_at)"
                " VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                [lease.run_id, change_id, version, to_us(now)],
            )
            return True

    @retried
    def publish(self, lease: Lease, key: str, value: Any, now: datetime) -> bool:
        """Set a status value the run shows to operators (`ctx.publish`); last write wins."""
        text = dumps(value, f"published value {key!r}")
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                "INSERT INTO published (run_id, key, value, at) VALUES (%s,%s,%s::jsonb,%s)"
                " ON CONFLICT (run_id, key) DO UPDATE SET value = EXCLUDED.value, at = EXCLUDED.at",
                [lease.run_id, key, text, to_us(now)],
            )
            return True

    def published(self, run_id: str) -> dict[str, tuple[Any, datetime]]:
        rows = self._read(
            "SELECT key, value, at FROM published WHERE run_id = %s ORDER BY key", [run_id]
        )
        return {r[0]: (_loads(r[1]), from_us(r[2])) for r in rows}

    @retried
    def heartbeat(
        self,
        owner: str,
        held: Sequence[tuple[Lease, float]],
        lease_until: datetime,
        now: datetime,
        steps: Mapping[str, tuple[str, datetime] | None] | None = None,
    ) -> list[HeartbeatReply]:
        """Extend the leases of held runs (lease, exec_spent) in one transaction.

        Persists the execution time spent and the step each handler is inside, with when it
        began; reports what
        each live handler must be told: lease lost, cancel or pause requested, deadline
        passed, budget used up. Rows are locked in run id order, one order for every writer.
        """
        now_us, lease_us = to_us(now), to_us(lease_until)
        replies: dict[str, HeartbeatReply] = {}
        with self._write() as c:
            c.execute("UPDATE daemons SET seen_at = %s WHERE owner = %s", [now_us, owner])
            for lease, spent in sorted(held, key=lambda h: h[0].run_id):
                run_id = lease.run_id
                row = _held(c, lease, "cancel_requested, deadline, timeout_us, pause_requested")
                if row is None:
                    replies[run_id] = HeartbeatReply(run_id, lost=True)
                    continue
                cancel, deadline, timeout_us, pause_requested = row
                spent_us = round(spent * 1e6)
                step, step_at = (steps or {}).get(run_id) or (None, None)
                c.execute(
                    "UPDATE runs SET lease_until = %s, run_at = %s, exec_spent_us = %s,"
                    " current_step = %s, step_started_at = %s WHERE run_id = %s",
                    [lease_us, lease_us, spent_us, step, _us(step_at), run_id],
                )
                replies[run_id] = HeartbeatReply(
                    run_id,
                    cancel=bool(cancel),
                    deadline=deadline is not None and deadline <= now_us,
                    timeout=timeout_us is not None and spent_us >= timeout_us,
                    pause=bool(pause_requested),
                )
        return [replies[lease.run_id] for lease, _ in held]

    @retried
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
        call. Clears the lease. Returns what it applied, or None when the lease is lost."""
        now_us = to_us(now)
        run_id = lease.run_id
        child = awaited_child(status, entry)
        with self._write() as c:
            # The child's row first, in the order the child's own ending takes the two rows:
            # FOR SHARE waits out an ending in flight, then reads the status it committed.
            child_ended = child is not None and _ended(c, child)
            row = _held(c, lease, "deadline, pause_requested")
            if row is None:
                return None
            status, run_at = suspension(status, run_at, now)
            at = _us(parked_run_at(run_at, deadline=_dt(row[0])))
            if entry is not None:
                c.execute(
                    _UPSERT_ENTRY,
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
                "UPDATE runs SET status = %s, run_at = %s, lease_owner = NULL, lease_until = NULL,"
                f" exec_spent_us = %s, solo = 0, {_CLEARED} WHERE run_id = %s",
                [str(status), at, round(exec_spent * 1e6), run_id],
            )
            _add_event(c, run_id, now_us, event[0], event[1])
            # A signal or a child's end that came while we ran woke nobody: not missed. The
            # row lock _held took makes a send_signal in flight wait for this commit.
            signal = awaited_signal(status, entry)
            if child_ended or (
                signal is not None
                and c.execute(
                    "SELECT 1 FROM signals WHERE run_id = %s AND name = %s AND consumed_at IS NULL",
                    [run_id, signal],
                ).fetchone()
            ):
                at = now_us
                c.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", [at, run_id])
            if row[1]:
                return self._park_paused(c, _load_run(c, run_id), status, at, now_us)
            return Applied(status, _dt(at))

    @retried
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
        Store.complete_run)."""
        now_us = to_us(now)
        run_id = lease.run_id
        result_text = dumps(result, "the workflow's result")
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            if entry is not None:
                c.execute(
                    _UPSERT_ENTRY,
                    checkpoint_params(run_id, entry, now_us),
                )
            c.execute(
                "UPDATE runs SET status = 'completed', result = %s::jsonb, error = NULL,"
                " finished_at = %s, run_at = NULL, lease_owner = NULL, lease_until = NULL,"
                f" exec_spent_us = %s, pause_requested = 0, solo = 0, {_CLEARED}"
                " WHERE run_id = %s",
                [result_text, now_us, round(exec_spent * 1e6), run_id],
            )
            _add_event(c, run_id, now_us, "completed", {})
            _record_ending(c, run_id, RunStatus.COMPLETED, None, now_us)
            # Each skipped only when the claim showed the run has no parent / no schedule.
            if links is None or links[0] is not None:
                _wake_parent(c, run_id, now_us)
            if links is None or links[1] is not None:
                _release_held(c, run_id, now_us)
            return True

    @retried
    def fail_attempt(
        self,
        lease: Lease,
        error: dict[str, Any],
        now: datetime,
        exec_spent: float,
        retry_at: datetime | None,
    ) -> Applied | None:
        """End the current attempt with `error`: queue the next attempt or dead-letter the
        run. Returns what it applied, or None when the lease is lost."""
        now_us = to_us(now)
        with self._write() as c:
            row = _held(c, lease, _RUN_COLUMNS)
            if row is None:
                return None
            run = _run_from_row(row)
            c.execute(
                "UPDATE runs SET exec_spent_us = %s WHERE run_id = %s",
                [round(exec_spent * 1e6), run.run_id],
            )
            return self._fail(c, run, error, now_us, retry_at=_us(retry_at))

    @retried
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
                "UPDATE runs SET exec_spent_us = %s WHERE run_id = %s",
                [round(exec_spent * 1e6), run.run_id],
            )
            self._end(c, run, status, error, to_us(now))
            return True

    @retried
    def add_event(self, run_id: str, type_: str, data: dict[str, Any], now: datetime) -> None:
        with self._write() as c:
            _add_event(c, run_id, to_us(now), type_, data)

    @retried
    def add_events(
        self, run_ids: Sequence[str], type_: str, data: dict[str, Any], now: datetime
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            _add_events(c, [_event(rid, now_us, type_, data) for rid in run_ids])
