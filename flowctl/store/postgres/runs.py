"""The PostgreSQL store: creating and reading runs, and the daemon's view (due runs, claims)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import (
    RunNotFoundError,
    RunRefMissingError,
)
from flowctl.model import (
    DUE,
    EntryState,
    JournalEntry,
    Run,
    RunStatus,
    TimelineEvent,
    from_us,
    to_us,
)
from flowctl.store.postgres.connection import retried
from flowctl.store.postgres.rows import (
    _COUNTS,
    _ENTRY_COLUMNS,
    _RUN_COLUMNS,
    Conn,
    _add_event,
    _add_events,
    _entry_from_row,
    _event,
    _held,
    _load_run,
    _loads,
    _run_from_row,
    _search_clause,
    _search_source,
    _suspect_data,
)
from flowctl.store.postgres.transitions import Transitions
from flowctl.store.records import (
    Claim,
    Lease,
    NewRun,
)
from flowctl.transitions import (
    ClaimAction,
    claim_verdict,
)

_CLAIM_ORDER = ("queued", "sleeping", "waiting", "running", "paused")
# The soonest run_at of each claimable status (an index scan of (status, run_at) each),
# one round trip for all of them. Parameters: (status, limit) per arm.
_SOONEST_PER_STATUS = " UNION ALL ".join(
    "(SELECT run_at, run_id FROM runs WHERE status = %s AND run_at IS NOT NULL"
    " ORDER BY run_at LIMIT %s)"
    for _ in sorted(DUE)
)
# Due candidates of each claimable status, read without a lock (each is locked only when
# the claim comes to it). Parameters: (status, now_us, limit) per arm.
_DUE_PER_STATUS = " UNION ALL ".join(
    "(SELECT run_at, run_id FROM runs WHERE status = %s AND run_at <= %s ORDER BY run_at LIMIT %s)"
    for _ in _CLAIM_ORDER
)


class RunReads(Transitions):
    """Create and read runs; find and claim due ones (FOR UPDATE SKIP LOCKED)."""

    @retried
    def create_run(self, new: NewRun, now: datetime) -> tuple[Run, bool]:
        """Insert a queued run. With an idempotency key already used, return that run instead.

        Returns (run, created).
        """
        with self._write() as c:
            return self._insert_run(c, new, to_us(now))

    @retried
    def create_runs(self, news: Sequence[NewRun], now: datetime) -> list[tuple[Run, bool]]:
        """create_run for each of `news`, in order, in one transaction: all or none. A key
        used before, or earlier in `news`, gives that run and False."""
        now_us = to_us(now)
        with self._write() as c:
            return [self._insert_run(c, new, now_us) for new in news]

    @retried
    def fork_run(
        self, new: NewRun, origin: str, upto: int, now: datetime, *, by: str | None = None
    ) -> Run:
        """Create `new` with the journal rows of run `origin` before call index `upto`, in one
        transaction (see the SQLite store). The origin is only read."""
        now_us = to_us(now)
        with self._write() as c:
            _load_run(c, origin, lock=False)  # raises when it does not exist
            run, _ = self._insert_run(c, new, now_us)
            copied = c.execute(
                f"INSERT INTO journal ({_ENTRY_COLUMNS}) SELECT %s::text, call_index, kind, name,"
                " state, value, wake_at, recorded_at, resolved_at, tries, duration_us FROM journal"
                " WHERE run_id = %s AND call_index < %s",
                [run.run_id, origin, upto],
            ).rowcount
            last = c.execute(
                "SELECT recorded_at FROM journal WHERE run_id = %s AND call_index = %s",
                [origin, upto - 1],
            ).fetchone()
            if last is not None:
                c.execute(
                    "INSERT INTO versions (run_id, change_id, version, recorded_at) SELECT"
                    " %s::text, change_id, version, recorded_at FROM versions WHERE run_id = %s"
                    " AND recorded_at <= %s",
                    [run.run_id, origin, last[0]],
                )
            data: dict[str, Any] = {"from_run": origin, "from_index": upto, "checkpoints": copied}
            if by:
                data["by"] = by
            _add_event(c, run.run_id, now_us, "forked", data)
            return run

    def get_run(self, run_id: str) -> Run:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return _run_from_row(rows[0])

    def find_run(self, ref: str) -> Run:
        """A run by full id or unique prefix."""
        ref = ref.strip()
        if not ref:
            raise RunRefMissingError()
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s", [ref])
        if rows:
            return _run_from_row(rows[0])
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE starts_with(run_id, %s)"
            " ORDER BY run_id LIMIT 2",
            [ref],
        )
        if not rows:
            raise RunNotFoundError(ref)
        if len(rows) > 1:
            raise RunNotFoundError(ref, f"run id prefix {ref!r} is ambiguous: give more characters")
        return _run_from_row(rows[0])

    def get_run_by_key(self, key: str) -> Run | None:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = %s", [key])
        return _run_from_row(rows[0]) if rows else None

    def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        search: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
        order: str = "created_desc",
    ) -> list[Run]:
        """One page of runs, newest first (or by run_at, or by finished_at); a search reads
        a bounded window of runs (see _search_source), as on SQLite."""
        where: list[str] = []
        params: list[Any] = []
        source, source_params = "runs", list[Any]()
        if search:
            source, source_params = _search_source(search)
        if statuses:
            where.append("status = ANY(%s)")
            params.append([str(s) for s in statuses])
        if workflow:
            where.append("workflow = %s")
            params.append(workflow)
        if since is not None:
            where.append("created_at >= %s")
            params.append(to_us(since))
        if order == "finished_desc":
            where.append("finished_at IS NOT NULL")  # as SQLite: finished runs only
        if search:
            clause, args = _search_clause(search)
            where.append(clause)
            params.extend(args)
        orders = {
            "created_desc": "created_at DESC, run_id DESC",
            "run_at": "run_at, run_id",
            "finished_desc": "finished_at DESC NULLS LAST, run_id DESC",
        }
        sql = f"SELECT {_RUN_COLUMNS} FROM {source}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {orders[order]} LIMIT %s OFFSET %s"
        return [_run_from_row(r) for r in self._read(sql, [*source_params, *params, limit, offset])]

    def runs_by_ids(self, run_ids: Sequence[str]) -> list[Run]:
        if not run_ids:
            return []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ANY(%s)", [list(run_ids)]
        )
        return [_run_from_row(r) for r in rows]

    def count_by_status(self, workflow: str | None = None) -> dict[RunStatus, int]:
        """Runs per status (of one workflow): summed from run_counts and its deltas, which
        triggers keep in the transaction of every status change; never a scan of runs."""
        counts = {s: 0 for s in RunStatus}
        if workflow:
            rows = self._read(
                f"SELECT status, SUM(n) FROM {_COUNTS} WHERE workflow = %s GROUP BY status",
                [workflow],
            )
        else:
            rows = self._read(f"SELECT status, SUM(n) FROM {_COUNTS} GROUP BY status")
        for status, n in rows:
            if n:
                counts[RunStatus(status)] = int(n)
        return counts

    def count_by_status_matching(
        self, workflow: str | None, search: str | None
    ) -> dict[RunStatus, int]:
        """Counts per status under the same workflow/search narrowing as list_runs: without
        a search from run_counts, with one in its bounded window."""
        if not search:
            return self.count_by_status(workflow)
        source, params = _search_source(search)
        where: list[str] = []
        if workflow:
            where.append("workflow = %s")
            params.append(workflow)
        clause, args = _search_clause(search)
        where.append(clause)
        params.extend(args)
        sql = f"SELECT status, COUNT(*) FROM {source} WHERE " + " AND ".join(where)
        counts = {s: 0 for s in RunStatus}
        for status, n in self._read(sql + " GROUP BY status", params):
            counts[RunStatus(status)] = n
        return counts

    def workflows_seen(self) -> list[str]:
        return [
            r[0]
            for r in self._read(
                f"SELECT workflow FROM {_COUNTS} GROUP BY workflow HAVING SUM(n) > 0"
                " ORDER BY workflow"
            )
        ]

    def run_source(self, run_id: str) -> tuple[str | None, str | None]:
        rows = self._read("SELECT source, source_hash FROM runs WHERE run_id = %s", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return rows[0][0], rows[0][1]

    def journal(self, run_id: str) -> dict[int, JournalEntry]:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = %s ORDER BY call_index",
            [run_id],
        )
        return {r[1]: _entry_from_row(r) for r in rows}

    def versions(self, run_id: str) -> dict[str, int]:
        rows = self._read("SELECT change_id, version FROM versions WHERE run_id = %s", [run_id])
        return {r[0]: r[1] for r in rows}

    def versions_detail(self, run_id: str) -> list[tuple[str, int, datetime]]:
        rows = self._read(
            "SELECT change_id, version, recorded_at FROM versions WHERE run_id = %s"
            " ORDER BY recorded_at",
            [run_id],
        )
        return [(r[0], r[1], from_us(r[2])) for r in rows]

    def timeline(self, run_id: str, limit: int | None = None) -> list[TimelineEvent]:
        sql = "SELECT run_id, at, type, data FROM timeline WHERE run_id = %s ORDER BY seq"
        params: list[Any] = [run_id]
        if limit is not None:
            sql = (
                "SELECT run_id, at, type, data FROM (SELECT run_id, at, type, data, seq FROM"
                " timeline WHERE run_id = %s ORDER BY seq DESC LIMIT %s) AS t ORDER BY seq"
            )
            params.append(limit)
        return [
            TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})
            for r in self._read(sql, params)
        ]

    def journal_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[JournalEntry], int]:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = %s ORDER BY call_index DESC"
            " LIMIT %s OFFSET %s",
            [run_id, limit, skip],
        )
        (total,) = self._read("SELECT COUNT(*) FROM journal WHERE run_id = %s", [run_id])[0]
        return [_entry_from_row(r) for r in reversed(rows)], int(total)

    def timeline_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[TimelineEvent], int]:
        rows = self._read(
            "SELECT run_id, at, type, data FROM timeline WHERE run_id = %s ORDER BY seq DESC"
            " LIMIT %s OFFSET %s",
            [run_id, limit, skip],
        )
        (total,) = self._read("SELECT COUNT(*) FROM timeline WHERE run_id = %s", [run_id])[0]
        events = [TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {}) for r in rows]
        return events[::-1], int(total)

    def last_entry(self, run_id: str, states: Sequence[EntryState]) -> JournalEntry | None:
        rows = self._read(
            f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run_id = %s AND state = ANY(%s)"
            " ORDER BY call_index DESC LIMIT 1",
            [run_id, [str(s) for s in states]],
        )
        return _entry_from_row(rows[0]) if rows else None

    def pending_signals(self, run_id: str) -> list[tuple[str, Any, datetime]]:
        rows = self._read(
            "SELECT name, payload, sent_at FROM signals WHERE run_id = %s AND consumed_at IS NULL"
            " ORDER BY seq",
            [run_id],
        )
        return [(r[0], _loads(r[1]), from_us(r[2])) for r in rows]

    def recent_wakes(self, since: datetime, limit: int = 10_000) -> list[float]:
        """Lateness (seconds) of recent timer wakes, from the timeline."""
        rows = self._read(
            "SELECT data FROM timeline WHERE type = 'woke' AND at >= %s ORDER BY at DESC LIMIT %s",
            [to_us(since), limit],
        )
        out = []
        for (data,) in rows:
            d = _loads(data) or {}
            if "late_ms" in d:
                out.append(float(d["late_ms"]) / 1000.0)
        return out

    def next_due(self, limit: int) -> list[tuple[int, str]]:
        """The soonest (run_at µs, run_id) pairs over every claimable status, in order.

        One round trip: the daemon refills its wheel with this after every commit another
        daemon makes, so on a busy fleet it runs many times a second. Each arm is an index
        scan of (status, run_at); the server merges them.
        """
        args = [a for status in sorted(DUE) for a in (str(status), limit)]
        rows = self._read(_SOONEST_PER_STATUS + " ORDER BY 1, 2 LIMIT %s", [*args, limit])
        return [(r[0], r[1]) for r in rows]

    def running_owners(self) -> list[str]:
        rows = self._read(
            "SELECT DISTINCT lease_owner FROM runs WHERE status = 'running'"
            " AND lease_owner IS NOT NULL"
        )
        return [r[0] for r in rows]

    @retried
    def expire_owner(self, owner: str, now: datetime) -> int:
        """Make every lease held by a provably dead owner due for reclaim now."""
        now_us = to_us(now)
        with self._write() as c:
            n: int = c.execute(
                "UPDATE runs SET lease_until = %s, run_at = %s WHERE status = 'running'"
                " AND lease_owner = %s AND lease_until > %s",
                [now_us, now_us, owner, now_us],
            ).rowcount
            c.execute("DELETE FROM daemons WHERE owner = %s", [owner])
            return n

    @retried
    def release_runs(self, leases: Sequence[Lease], now: datetime, reason: str) -> int:
        """A stopping daemon hands back the runs it still holds: each due now, unless its
        lease was lost meanwhile (a run another worker has claimed since is left alone)."""
        return self._let_go(leases, now, "released", reason, ", solo = 0")

    def _let_go(
        self, leases: Sequence[Lease], now: datetime, event: str, reason: str, also: str
    ) -> int:
        """Make each still-held run due now (plus `also`, a fixed SET fragment), noting
        `event` in its timeline; returns how many were held."""
        now_us = to_us(now)
        done = 0
        with self._write() as c:
            for lease in sorted(leases, key=lambda x: x.run_id):  # one lock order
                if _held(c, lease) is None:
                    continue
                c.execute(
                    f"UPDATE runs SET lease_until = %s, run_at = %s{also} WHERE run_id = %s",
                    [now_us, now_us, lease.run_id],
                )
                done += 1
                _add_event(c, lease.run_id, now_us, event, {"by": lease.owner, "reason": reason})
        return done

    def runs_due_between(self, lo: datetime, hi: datetime, *, limit: int) -> list[str]:
        """Ids of active runs whose run_at lies in [lo, hi] (e.g. passed over by a clock jump)."""
        out: list[str] = []
        with self._reading() as c:
            for status in sorted(DUE):
                out.extend(
                    r[0]
                    for r in c.execute(
                        "SELECT run_id FROM runs WHERE status = %s AND run_at BETWEEN %s AND %s"
                        " ORDER BY run_at LIMIT %s",
                        [str(status), to_us(lo), to_us(hi), limit],
                    ).fetchall()
                )
        return out[:limit]

    def cancels_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to cancel (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND cancel_requested = 1"
            " AND run_id = ANY(%s)",
            [list(run_ids)],
        )
        return [r[0] for r in rows]

    @retried
    def claim_due(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        *,
        run_id: str | None = None,
        alone: bool = False,
    ) -> tuple[list[Claim], list[str]]:
        """Claim up to `limit` due runs in one transaction, bumping each fence.

        Candidates are taken soonest run_at first and each is locked with FOR UPDATE SKIP
        LOCKED only when the claim comes to it: another daemon's claim in flight is skipped,
        never waited for and never claimed twice, and a claim holds locks only on the runs
        it examined (locking every candidate up front held spares another daemon could have
        claimed at once, and made it skip them until the next change notice).
        Applies claim_verdict() as the SQLite store does. Returns the claims and the ids of
        runs ended.
        """
        now_us, lease_us = to_us(now), to_us(lease_until)
        claims: list[Claim] = []
        ended: list[str] = []
        with self._write() as c:
            if run_id is not None:
                candidates = [
                    r[0]
                    for r in c.execute(
                        "SELECT run_id FROM runs WHERE run_id = %s AND status IN"
                        " ('queued','sleeping','waiting','running','paused') AND run_at <= %s"
                        " FOR UPDATE SKIP LOCKED",
                        [run_id, now_us],
                    ).fetchall()
                ]
            else:
                n = limit + 16  # spares, for candidates that turn out not claimable
                found = c.execute(
                    _DUE_PER_STATUS + " ORDER BY 1, 2 LIMIT %s",
                    [*(a for status in _CLAIM_ORDER for a in (status, now_us, n)), n],
                ).fetchall()
                candidates = [rid for _, rid in found]
            for rid in candidates:
                if len(claims) >= limit:
                    break
                claim = self._claim_one(c, rid, owner, now_us, lease_us, ended, alone)
                if claim is not None:
                    claims.append(claim)
        return claims, ended

    @retried
    def claim_suspect(
        self, owner: str, now: datetime, lease_until: datetime
    ) -> tuple[Claim | None, list[str]]:
        """Claim one due suspect for a claimer that runs it alone, the one with the fewest
        crashes charged first. Returns the claim (or None) and the ids of runs ended."""
        now_us, lease_us = to_us(now), to_us(lease_until)
        ended: list[str] = []
        with self._write() as c:
            rows = c.execute(
                "SELECT run_id FROM runs WHERE status = 'running' AND run_at <= %s"
                " ORDER BY crashes, run_at LIMIT 16 FOR UPDATE SKIP LOCKED",
                [now_us],
            ).fetchall()
            for (rid,) in rows:
                claim = self._claim_one(c, rid, owner, now_us, lease_us, ended, True)
                if claim is not None:
                    return claim, ended
        return None, ended

    def suspect_due(self, now: datetime) -> bool:
        """Whether a run whose worker died under it is due (a read): it waits to run alone."""
        rows = self._read(
            "SELECT 1 FROM runs WHERE status = 'running' AND run_at <= %s LIMIT 1", [to_us(now)]
        )
        return bool(rows)

    def _claim_one(
        self,
        c: Conn,
        rid: str,
        owner: str,
        now_us: int,
        lease_us: int,
        ended: list[str],
        alone: bool,
    ) -> Claim | None:
        row = c.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s FOR UPDATE SKIP LOCKED", [rid]
        ).fetchone()
        if row is None:
            return None  # another claim holds it (a row this transaction locked is returned)
        run = _run_from_row(row)
        prev = run.status
        if prev not in DUE or run.run_at is None or to_us(run.run_at) > now_us:
            return None
        verdict = claim_verdict(run, from_us(now_us), alone=alone)
        if verdict.action is ClaimAction.SKIP:
            return None
        if verdict.action is ClaimAction.SUSPECT:
            if not run.suspect or verdict.charged:
                c.execute(
                    "UPDATE runs SET suspect = 1, solo = 0, crashes = %s WHERE run_id = %s",
                    [verdict.crashes, rid],
                )
                _add_event(c, rid, now_us, "suspect", _suspect_data(run, verdict))
            return None
        if verdict.action is ClaimAction.PAUSE:
            self._park_paused(c, run, RunStatus.QUEUED, now_us, now_us)
            ended.append(rid)
            return None
        if verdict.action is ClaimAction.END:
            assert verdict.status is not None
            self._end(c, run, verdict.status, verdict.error, now_us)
            ended.append(rid)
            return None
        if verdict.action is ClaimAction.FAIL:
            assert verdict.error is not None
            self._fail(c, run, verdict.error, now_us, timeline_extra={"lease": "lapsed"})
            ended.append(rid)
            return None
        reclaims = verdict.reclaims
        fence = run.fence + 1
        c.execute(
            "UPDATE runs SET status = 'running', lease_owner = %s, lease_until = %s, run_at = %s,"
            " fence = %s, reclaims = %s, started_at = COALESCE(started_at, %s),"
            " current_step = NULL, step_started_at = NULL, suspect = %s, solo = %s, crashes = %s WHERE run_id = %s",
            [
                owner,
                lease_us,
                lease_us,
                fence,
                reclaims,
                now_us,
                int(verdict.suspect),
                int(alone),
                verdict.crashes,
                rid,
            ],
        )
        events = []
        if prev is RunStatus.RUNNING:
            data: dict[str, Any] = {"from": run.lease_owner, "by": owner, "fence": fence}
            if verdict.suspect:
                data.update(alone=alone, crashes=verdict.crashes)
            events.append(_event(rid, now_us, "reclaimed", data))
        else:
            if prev in (RunStatus.SLEEPING, RunStatus.WAITING) or (
                prev is RunStatus.QUEUED
                and run.run_at is not None
                and to_us(run.run_at) > to_us(run.created_at)
            ):
                scheduled = to_us(run.run_at)
                events.append(
                    _event(
                        rid,
                        now_us,
                        "woke",
                        {
                            "from": str(prev),
                            "scheduled": from_us(scheduled).isoformat(timespec="microseconds"),
                            "late_ms": round((now_us - scheduled) / 1000, 3),
                        },
                    )
                )
            events.append(
                _event(
                    rid, now_us, "claimed", {"by": owner, "fence": fence, "attempt": run.attempt}
                )
            )
        _add_events(c, events)
        c.execute(
            "UPDATE journal SET state = 'done', resolved_at = %s WHERE run_id = %s"
            " AND kind = 'sleep' AND state = 'pending' AND wake_at <= %s",
            [now_us, rid, now_us],
        )
        claimed = dataclasses.replace(
            run,
            status=RunStatus.RUNNING,
            lease_owner=owner,
            lease_until=from_us(lease_us),
            run_at=from_us(lease_us),
            fence=fence,
            reclaims=reclaims,
            started_at=run.started_at or from_us(now_us),
            suspect=verdict.suspect,
            solo=alone,
            crashes=verdict.crashes,
        )
        return Claim(run=claimed, lease=Lease(rid, fence, owner), woke_from=prev)
