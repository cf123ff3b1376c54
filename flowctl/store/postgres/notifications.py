"""The notification outbox on PostgreSQL: rows written with each run's ending (see
Transitions._end and complete_run), read and settled by the daemon's notifier (policy in
flowctl.notify; this module only applies it). The same statements as the SQLite store's,
so a row is claimed by one deliverer at a time however many daemons share the database:
the claim is a compare-and-set on (state, due_at)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.model import RunStatus, from_us, to_us
from flowctl.store.postgres.connection import PostgresConnection, retried
from flowctl.store.postgres.rows import Conn, _add_events, _event, _loads
from flowctl.store.records import Notification
from flowctl.transitions import notification_state


def _record_ending(c: Conn, run_id: str, status: RunStatus, kind: Any, now_us: int) -> None:
    """Put the run's ending in the outbox, in the ending's own transaction. Every ending is
    recorded; whether anyone is told is the notifier's decision, made when it delivers."""
    c.execute(
        "INSERT INTO notifications (run_id, status, error_kind, created_at, due_at)"
        " VALUES (%s,%s,%s,%s,%s)",
        [run_id, str(status), None if kind is None else str(kind), now_us, now_us],
    )


class Notifications(PostgresConnection):
    """The outbox's side of the store."""

    def due_notifications(self, now: datetime, limit: int = 64) -> list[Notification]:
        """Pending outbox rows due at `now`, oldest first."""
        rows = self._read(
            "SELECT n.seq, n.run_id, n.status, n.error_kind, n.created_at, n.tries,"
            " n.channels_done, r.notify FROM notifications n JOIN runs r USING (run_id)"
            " WHERE n.state = 'pending' AND n.due_at <= %s ORDER BY n.due_at, n.seq LIMIT %s",
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

    @retried
    def claim_notification(self, seq: int, now: datetime, until: datetime, owner: str) -> bool:
        """Take one pending row for a delivery try: due again at `until` (a crash mid-delivery
        leaves it to the next try), its try count up. False, changing nothing, when another
        deliverer took it first (the row's lock makes the second UPDATE re-check and miss)."""
        with self._write() as c:
            n: int = c.execute(
                "UPDATE notifications SET due_at = %s, tries = tries + 1, claimed_by = %s"
                " WHERE seq = %s AND state = 'pending' AND due_at <= %s",
                [to_us(until), owner, seq, to_us(now)],
            ).rowcount
            return n == 1

    def notification_claims(self, now: datetime) -> list[tuple[int, str]]:
        """(seq, owner) of pending rows a deliverer holds for a try not yet due again."""
        rows = self._read(
            "SELECT seq, claimed_by FROM notifications WHERE state = 'pending'"
            " AND claimed_by IS NOT NULL AND due_at > %s ORDER BY seq",
            [to_us(now)],
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    @retried
    def release_notification(self, seq: int, owner: str, now: datetime) -> bool:
        """Make a row `owner` held due at `now` (its owner is gone); False if it moved on."""
        with self._write() as c:
            n: int = c.execute(
                "UPDATE notifications SET due_at = %s, claimed_by = NULL"
                " WHERE seq = %s AND state = 'pending' AND claimed_by = %s",
                [to_us(now), seq, owner],
            ).rowcount
            return n == 1

    @retried
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
        with self._write() as c:
            c.execute(
                "UPDATE notifications SET channels_done = %s::jsonb, last_error = %s, state = %s,"
                " due_at = COALESCE(%s, due_at), finished_at = %s, claimed_by = NULL"
                " WHERE seq = %s",
                [
                    json.dumps(sorted(done)),
                    error,
                    state,
                    None if retry_at is None else to_us(retry_at),
                    None if state == "pending" else now_us,
                    seq,
                ],
            )
            _add_events(c, [_event(run_id, now_us, type_, data) for type_, data in events])

    @retried
    def drop_notifications(self, seqs: Sequence[int]) -> None:
        """Forget outbox rows that no channel wants (no [notify] event matched)."""
        if not seqs:
            return
        with self._write() as c:
            c.execute("DELETE FROM notifications WHERE seq = ANY(%s)", [list(seqs)])

    @retried
    def drop_unwanted_notifications(
        self, statuses: Sequence[str], now: datetime, limit: int
    ) -> int:
        """Forget, in one statement, due rows no channel here wants (see the protocol)."""
        if not statuses:
            return 0
        with self._write() as c:
            cur = c.execute(
                "DELETE FROM notifications WHERE seq IN (SELECT n.seq FROM notifications n"
                " JOIN runs r USING (run_id) WHERE n.state = 'pending' AND n.due_at <= %s"
                " AND n.status = ANY(%s) AND r.notify IS NULL LIMIT %s)",
                [to_us(now), list(statuses), limit],
            )
            return int(cur.rowcount)
