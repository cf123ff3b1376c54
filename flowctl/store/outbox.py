"""The notification outbox: rows written with each run's ending, read and settled by the
daemon's notifier (policy in flowctl.notify; this module only applies it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.model import from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.mapping import _loads
from flowctl.store.records import Notification
from flowctl.store.rows import add_events, event, marks
from flowctl.store.sql import Tx
from flowctl.transitions import notification_state


class Notifications(StoreCore):
    """The outbox's side of the store."""

    def due_notifications(self, now: datetime, limit: int = 64) -> list[Notification]:
        """Pending outbox rows due at `now`, oldest first."""
        rows = self._read(
            "SELECT n.seq, n.run_id, n.status, n.error_kind, n.created_at, n.tries,"
            " n.channels_done, r.notify FROM notifications n JOIN runs r USING (run_id)"
            " WHERE n.state = 'pending' AND n.due_at <= ? ORDER BY n.due_at, n.seq LIMIT ?",
            [to_us(now), limit],
        )
        return [
            Notification(
                seq=r[0],
                run_id=r[1],
                status=r[2],
                error_kind=r[3],
                created_at=from_us(r[4]),
                tries=r[5],
                channels_done=tuple(_loads(r[6]) or ()),
                override=_loads(r[7]),
            )
            for r in rows
        ]

    def claim_notification(self, seq: int, now: datetime, until: datetime, owner: str) -> bool:
        """Take one pending row for a delivery try: it is due again at `until` (so a crash
        mid-delivery leaves it to the next try), and its try count goes up. False, changing
        nothing, when another deliverer took it first."""
        params = [to_us(until), owner, seq, to_us(now)]
        return self._write(
            lambda tx: bool(
                tx.execute(
                    "UPDATE notifications SET due_at = ?, tries = tries + 1, claimed_by = ?"
                    " WHERE seq = ? AND state = 'pending' AND due_at <= ?",
                    params,
                ).rowcount
                == 1
            ),
            single=True,
        )

    def notification_claims(self, now: datetime) -> list[tuple[int, str]]:
        """(seq, owner) of pending rows a deliverer holds for a try not yet due again."""
        rows = self._read(
            "SELECT seq, claimed_by FROM notifications WHERE state = 'pending'"
            " AND claimed_by IS NOT NULL AND due_at > ? ORDER BY seq",
            [to_us(now)],
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def release_notification(self, seq: int, owner: str, now: datetime) -> bool:
        """Make a row `owner` held due at `now` (its owner is gone); False if it moved on."""
        params = [to_us(now), seq, owner]
        return self._write(
            lambda tx: bool(
                tx.execute(
                    "UPDATE notifications SET due_at = ?, claimed_by = NULL"
                    " WHERE seq = ? AND state = 'pending' AND claimed_by = ?",
                    params,
                ).rowcount
                == 1
            ),
            single=True,
        )

    def settle_notification(
        self,
        seq: int,
        run_id: str,
        now: datetime,
        *,
        done: Sequence[str],
        error: str | None,
        retry_at: datetime | None,
        events: Sequence[tuple[str, dict[str, Any]]],
    ) -> None:
        """Record a try's outcome: the channels that have it now, and the row delivered (no
        error), pending again at `retry_at`, or failed for good (an error, no retry)."""
        now_us = to_us(now)
        state = notification_state(error, retry_at)
        params = [
            json.dumps(sorted(done)),
            error,
            state,
            None if retry_at is None else to_us(retry_at),
            None if state == "pending" else now_us,
            seq,
        ]
        rows = [event(run_id, now_us, type_, data) for type_, data in events]

        def write(tx: Tx) -> None:
            settled = tx.execute(
                "UPDATE notifications SET channels_done = ?, last_error = ?, state = ?,"
                " due_at = COALESCE(?, due_at), finished_at = ?, claimed_by = NULL WHERE seq = ?",
                params,
            ).rowcount
            if settled:  # else the run was pruned meanwhile: nothing to note it on
                add_events(tx, rows)

        self._write(write)

    def drop_notifications(self, seqs: Sequence[int]) -> None:
        """Forget outbox rows that no channel wants (no [notify] event matched)."""
        if not seqs:
            return
        self._write(
            lambda tx: tx.many("DELETE FROM notifications WHERE seq = ?", [[s] for s in seqs])
        )

    def drop_unwanted_notifications(
        self, statuses: Sequence[str], now: datetime, limit: int
    ) -> int:
        """Forget, in one statement, due rows no channel here wants (see the protocol)."""
        if not statuses:
            return 0
        params = [to_us(now), *statuses, limit]
        return self._write(
            lambda tx: int(
                tx.execute(
                    "DELETE FROM notifications WHERE seq IN (SELECT n.seq FROM notifications n"
                    " JOIN runs r USING (run_id) WHERE n.state = 'pending' AND n.due_at <= ?"
                    f" AND n.status IN ({marks(len(statuses))}) AND r.notify IS NULL LIMIT ?)",
                    params,
                ).rowcount
            ),
            single=True,
        )
