"""Leases after the claim: heartbeats, a dead owner's leases lapsed, runs handed back by a
stopping daemon, who holds what; and the daemons registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from flowctl.model import from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.mapping import _dt, _loads, _us
from flowctl.store.records import DaemonInfo, HeartbeatReply, Interrupts, Lease, dumps
from flowctl.store.rows import add_event, held_row, in_chunks
from flowctl.store.sql import Tx
from flowctl.transitions import held_notice

# Running runs of these ids with a cancel or a pause asked ({qs}: their marks).
_INTERRUPTS = (
    "SELECT run_id, cancel_requested, pause_requested FROM runs WHERE status = 'running'"
    " AND (cancel_requested = 1 OR pause_requested = 1) AND run_id IN ({qs})"
)


class Leases(StoreCore):
    """Heartbeats, lapsed and released leases, and the daemons registry."""

    def heartbeat(
        self,
        owner: str,
        held: Sequence[tuple[Lease, float]],
        lease_until: datetime,
        now: datetime,
        steps: Mapping[str, tuple[str, datetime] | None] | None = None,
    ) -> list[HeartbeatReply]:
        """Extend the leases of held runs (lease, exec_spent) in one transaction.

        Persists the execution time spent, so a budget survives restarts, and the step each
        handler is inside with when it began (`steps`, for `why` and the TUI); replies
        what each live handler must be told (transitions.held_notice): lease lost, cancel
        or pause requested, deadline passed, budget used up. Rows are taken in run id
        order, one order for every writer that locks several."""
        leases = sorted(held, key=lambda h: h[0].run_id)
        replies = self._write(
            lambda tx: _heartbeat(tx, owner, leases, to_us(lease_until), now, steps or {})
        )
        return [replies[lease.run_id] for lease, _ in held]

    def interrupts_requested(self, run_ids: Sequence[str]) -> Interrupts:
        """Which of these running runs an operator has asked to cancel or to pause: one read
        of their rows (a chunk at a time), both flags at once."""
        cancels: list[str] = []
        pauses: list[str] = []
        for chunk, qs in in_chunks(run_ids):
            for run_id, cancel, pause in self._read(_INTERRUPTS.format(qs=qs), list(chunk)):
                if cancel:
                    cancels.append(run_id)
                if pause:
                    pauses.append(run_id)
        return Interrupts(cancels, pauses)

    def running_owners(self) -> list[str]:
        """The daemons that hold running runs, or in which running runs rest."""
        rows = self._read(
            "SELECT DISTINCT COALESCE(lease_owner, rested_by) FROM {runs_by_status}"
            " WHERE status = 'running' AND (lease_owner IS NOT NULL OR rested_by IS NOT NULL)"
        )
        return [r[0] for r in rows]

    def held_count(self, owner: str) -> int:
        rows = self._read(
            "SELECT COUNT(*) FROM {runs_by_status} WHERE status = 'running' AND lease_owner = ?",
            [owner],
        )
        return int(rows[0][0])

    def expire_owner(self, owner: str, now: datetime) -> int:
        """Make every lease held by a provably dead owner due for reclaim now, and the runs
        resting in it (flowctl.store.resting): those are due now as runs handed back, no
        suspects (nobody died in them)."""
        now_us = to_us(now)

        def expire(tx: Tx) -> int:
            n = tx.execute(
                "UPDATE {runs_by_status} SET lease_until = ?, run_at = ?"
                " WHERE status = 'running' AND lease_owner = ? AND lease_until > ?",
                [now_us, now_us, owner, now_us],
            ).rowcount
            n += tx.execute(
                "UPDATE {runs_by_status} SET run_at = ?, rested_by = NULL WHERE status = 'running'"
                " AND lease_owner IS NULL AND rested_by = ? AND run_at > ?",
                [now_us, owner, now_us],
            ).rowcount
            tx.execute("DELETE FROM daemons WHERE owner = ?", [owner])
            return int(n)

        return self._write(expire)

    def release_runs(self, leases: Sequence[Lease], now: datetime, reason: str) -> int:
        """A stopping daemon hands back the runs it still holds: each due now, unless its
        lease was lost meanwhile (a run another worker has claimed since is left alone)."""
        now_us = to_us(now)

        def release(tx: Tx) -> int:
            done = 0
            for lease in sorted(leases, key=lambda x: x.run_id):  # one lock order
                if held_row(tx, lease) is None:
                    continue
                tx.execute(
                    # No owner: released by an orderly stop, not lapsed (claim_verdict: no suspect).
                    "UPDATE runs SET lease_owner = NULL, lease_until = ?, run_at = ?, solo = 0"
                    " WHERE run_id = ?",
                    [now_us, now_us, lease.run_id],
                )
                done += 1
                data = {"by": lease.owner, "reason": reason}
                add_event(tx, lease.run_id, now_us, "released", data)
            return done

        return self._write(release)

    # -- the daemons registry ------------------------------------------------------

    def register_daemon(
        self,
        owner: str,
        host: str,
        pid: int,
        proc_start: str | None,
        now: datetime,
        info: dict[str, Any],
    ) -> None:
        """Say daemon `owner` serves this database (again: after an outage it may have been
        forgotten; its started_at then stands)."""
        row = [owner, host, pid, proc_start, to_us(now), to_us(now), dumps(info)]
        self._write(
            lambda tx: tx.execute(
                "INSERT INTO daemons (owner, host, pid, proc_start, started_at, seen_at, info)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (owner) DO UPDATE SET host = excluded.host,"
                " pid = excluded.pid, proc_start = excluded.proc_start,"
                " seen_at = excluded.seen_at,"
                " info = excluded.info",
                row,
            ),
            single=True,
        )

    def unregister_daemon(self, owner: str, now: datetime | None = None) -> None:
        """Forget a daemon, remembering when it was last seen (`now`, else its last heartbeat)."""

        def forget(tx: Tx) -> None:
            row = tx.one("SELECT seen_at FROM daemons WHERE owner = ?{for_update}", [owner])
            if row is not None:
                seen = row[0] if now is None else max(row[0], to_us(now))
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('daemon_last_seen', ?)"
                    " ON CONFLICT (key) DO UPDATE SET value = CASE WHEN CAST(meta.value AS BIGINT)"
                    " > CAST(excluded.value AS BIGINT) THEN meta.value ELSE excluded.value END",
                    [str(seen)],
                )
            tx.execute("DELETE FROM daemons WHERE owner = ?", [owner])

        self._write(forget)

    def daemon_last_seen(self) -> datetime | None:
        """When a daemon was last seen on this database: a stopped one's last moment, or the
        latest heartbeat of one still registered."""
        rows = self._read(
            "SELECT MAX(v) FROM (SELECT CAST(value AS BIGINT) AS v FROM meta"
            " WHERE key = 'daemon_last_seen' UNION ALL SELECT MAX(seen_at) FROM daemons) AS t"
        )
        return _dt(rows[0][0])

    def daemons(self) -> list[DaemonInfo]:
        rows = self._read(
            "SELECT owner, host, pid, proc_start, started_at, seen_at, info FROM daemons"
            " ORDER BY started_at"
        )
        return [
            DaemonInfo(r[0], r[1], r[2], r[3], from_us(r[4]), from_us(r[5]), _loads(r[6]) or {})
            for r in rows
        ]


def _heartbeat(
    tx: Tx,
    owner: str,
    leases: Sequence[tuple[Lease, float]],
    lease_us: int,
    now: datetime,
    steps: Mapping[str, tuple[str, datetime] | None],
) -> dict[str, HeartbeatReply]:
    """heartbeat's transaction: each held run's reply, by run id."""
    tx.execute("UPDATE daemons SET seen_at = ? WHERE owner = ?", [to_us(now), owner])
    replies: dict[str, HeartbeatReply] = {}
    for lease, spent in leases:
        run_id = lease.run_id
        row = held_row(tx, lease, "cancel_requested, deadline, timeout_us, pause_requested")
        if row is None:
            replies[run_id] = HeartbeatReply(run_id, lost=True)
            continue
        cancel, deadline_us, timeout_us, pause_requested = row
        spent_us = round(spent * 1e6)
        step, step_at = steps.get(run_id) or (None, None)
        tx.execute(
            "UPDATE runs SET lease_until = ?, run_at = ?, exec_spent_us = ?,"
            " current_step = ?, step_started_at = ? WHERE run_id = ?",
            [lease_us, lease_us, spent_us, step, _us(step_at), run_id],
        )
        notice = held_notice(
            cancel_requested=bool(cancel),
            pause_requested=bool(pause_requested),
            deadline=_dt(deadline_us),
            timeout=None if timeout_us is None else timeout_us / 1e6,
            spent=spent_us / 1e6,
            now=now,
        )
        replies[run_id] = HeartbeatReply(
            run_id,
            cancel=notice.cancel,
            deadline=notice.deadline,
            timeout=notice.timeout,
            pause=notice.pause,
        )
    return replies
