"""Claims, leases, heartbeats and the daemons registry (the fenced writes of the worker
holding a run are in fenced.py)."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from flowctl.model import (
    DUE,
    Run,
    RunStatus,
    from_us,
    to_us,
)
from flowctl.store.records import Claim, DaemonInfo, HeartbeatReply, Lease, dumps
from flowctl.store.sqlite.connection import SqliteConnection
from flowctl.store.sqlite.fenced import _held
from flowctl.store.sqlite.rows import (
    _RUN_COLUMNS,
    _RUNS,
    _RUNS_BY_STATUS,
    TIMELINE_INSERT,
    _add_event,
    _dt,
    _event,
    _load_run,
    _loads,
    _run_from_row,
    _suspect_data,
    _us,
)
from flowctl.store.sqlite.writes import (
    _end,
    _fail,
    _park_paused,
)
from flowctl.transitions import (
    ClaimAction,
    ClaimVerdict,
    claim_verdict,
    claim_wakes,
    held_notice,
)


class Leases(SqliteConnection):
    """The daemon's side: claims, heartbeats, fenced writes, the daemons registry."""

    # -- the daemon's view ---------------------------------------------------

    def next_due(self, limit: int) -> list[tuple[int, str]]:
        """The soonest (run_at µs, run_id) pairs over every claimable status, in order."""
        out: list[tuple[int, str]] = []
        with self._reading() as c:
            for status in DUE:
                out.extend(
                    c.execute(
                        "SELECT run_at, run_id FROM runs WHERE status = ? AND run_at IS NOT NULL"
                        " ORDER BY run_at LIMIT ?",
                        [str(status), limit],
                    ).fetchall()
                )
        out.sort()
        return out[:limit]

    def running_owners(self) -> list[str]:
        rows = self._read(
            f"SELECT DISTINCT lease_owner FROM {_RUNS_BY_STATUS}"
            " WHERE status = 'running' AND lease_owner IS NOT NULL"
        )
        return [r[0] for r in rows]

    def expire_owner(self, owner: str, now: datetime) -> int:
        """Make every lease held by a provably dead owner due for reclaim now."""
        now_us = to_us(now)
        with self._write() as c:
            cur = c.execute(
                f"UPDATE {_RUNS_BY_STATUS} SET lease_until = ?, run_at = ? WHERE status = 'running'"
                " AND lease_owner = ? AND lease_until > ?",
                [now_us, now_us, owner, now_us],
            )
            c.execute("DELETE FROM daemons WHERE owner = ?", [owner])
            return cur.rowcount

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
            for lease in leases:
                if _held(c, lease) is None:
                    continue
                c.execute(
                    f"UPDATE runs SET lease_until = ?, run_at = ?{also} WHERE run_id = ?",
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
                        "SELECT run_id FROM runs WHERE status = ? AND run_at BETWEEN ? AND ?"
                        " ORDER BY run_at LIMIT ?",
                        [str(status), to_us(lo), to_us(hi), limit],
                    )
                )
        return out[:limit]

    def cancels_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to cancel (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND cancel_requested = 1"
            f" AND run_id IN ({','.join('?' * len(run_ids))})",
            list(run_ids),
        )
        return [r[0] for r in rows]

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

        Applies claim_verdict(): runs past their deadline, cancelled while their worker
        died, or poison are ended here instead of claimed; a run reclaimed from a dead
        worker becomes a suspect, claimed only by a claimer that runs it `alone` (see
        claim_suspect). Returns the claims and the ids of runs ended.
        """
        now_us, lease_us = to_us(now), to_us(lease_until)
        times = _ClaimTimes(now_us, lease_us, owner)
        claims: list[Claim] = []
        ended: list[str] = []
        with self._write() as c:
            if run_id is not None:
                first = c.execute(_ONE_DUE, [run_id, now_us]).fetchall()
            else:
                # One statement: the rows of the `limit` soonest due runs (_DUE_ROWS).
                first = c.execute(_DUE_ROWS, [now_us, limit] * 5 + [limit]).fetchall()
                first.sort(key=_due_order)
            for r in first:
                # A run ended here may have woken a parent or released a held run: the
                # rows read before that are read again.
                if ended:
                    claim = self._claim_one(c, r[0], owner, times, ended, alone)
                else:
                    fresh = (bool(r[-2]), bool(r[-1]))
                    claim = self._claim_one(c, _run_from_row(r), owner, times, ended, alone, fresh)
                if claim is not None:
                    claims.append(claim)
            if run_id is not None or len(claims) == limit or len(first) < limit:
                times.flush_events(c)
                return claims, ended  # claimed all it could, or nothing more is due
            # Some were passed over (held as suspects, paused, ended): the next candidates
            # (limit + 16 in all, as one statement of their ids), then their rows. The few
            # rows (at most 5 x (limit + 16)) are merged here: SQLite's ORDER BY over the
            # compound built a temporary b-tree per arm, ten times the whole read.
            want, seen = limit + 16, {r[0] for r in first}
            candidates = sorted(c.execute(_CANDIDATES, [now_us, want] * 5))[:want]
            ids = [rid for _, rid in candidates if rid not in seen]
            while ids and len(claims) < limit:
                # The rows of as many candidates as claims still wanted, in one statement.
                chunk, ids = ids[: limit - len(claims)], ids[limit - len(claims) :]
                loaded, settled = _load_runs(c, chunk), len(ended)
                for rid in chunk:
                    # A run ended here may have woken a parent or released a held run: the
                    # rows read before that are read again.
                    run, empty = loaded[rid] if len(ended) == settled else (rid, None)
                    claim = self._claim_one(c, run, owner, times, ended, alone, empty)
                    if claim is not None:
                        claims.append(claim)
            times.flush_events(c)
        return claims, ended

    def claim_suspect(
        self, owner: str, now: datetime, lease_until: datetime
    ) -> tuple[Claim | None, list[str]]:
        """Claim one due suspect (a run whose worker died under it) for a claimer that runs
        it alone, the one with the fewest crashes charged first. Returns the claim (or None)
        and the ids of runs ended on the way (poison, deadline, cancelled)."""
        now_us = to_us(now)
        times = _ClaimTimes(now_us, to_us(lease_until), owner)
        ended: list[str] = []
        with self._write() as c:
            rows = c.execute(
                "SELECT run_id FROM runs WHERE status = 'running' AND run_at <= ?"
                " ORDER BY crashes, run_at LIMIT 16",
                [now_us],
            ).fetchall()
            for (rid,) in rows:
                claim = self._claim_one(c, rid, owner, times, ended, True)
                if claim is not None:
                    times.flush_events(c)
                    return claim, ended
        return None, ended

    def suspect_due(self, now: datetime) -> bool:
        """Whether a run whose worker died under it is due (a read): it waits to run alone."""
        rows = self._read(
            "SELECT 1 FROM runs WHERE status = 'running' AND run_at <= ? LIMIT 1", [to_us(now)]
        )
        return bool(rows)

    def _claim_one(
        self,
        c: sqlite3.Connection,
        run: Run | str,
        owner: str,
        times: _ClaimTimes,
        ended: list[str],
        alone: bool,
        empty: tuple[bool, bool] | None = None,
    ) -> Claim | None:
        """Claim one run (its row as read in this transaction, or its id) if still due.

        `empty` (read with the row): whether it has no journal rows, no version markers;
        the claim then says so and the replay reads neither (a fresh run: two statements
        fewer)."""
        if isinstance(run, str):
            run = _load_run(c, run)
        now_us, lease_us, now = times.now_us, times.lease_us, times.now
        rid = run.run_id
        prev = run.status
        if prev not in DUE or run.run_at is None or run.run_at > now:
            return None
        verdict = claim_verdict(run, now, alone=alone)
        if verdict.action is not _CLAIM:
            self._pass_over(c, run, verdict, times, ended)
            return None
        reclaims = verdict.reclaims
        fence = run.fence + 1
        c.execute(
            "UPDATE runs SET status = 'running', lease_owner = ?, lease_until = ?, run_at = ?,"
            " fence = ?, reclaims = ?, started_at = COALESCE(started_at, ?), current_step = NULL,"
            " step_started_at = NULL,"
            " suspect = ?, solo = ?, crashes = ? WHERE run_id = ?",
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
        events = times.events
        if prev is not _RUNNING:  # counted here, not by the runs trigger (migration 20)
            moved = (run.workflow, prev)
            times.moved[moved] = times.moved.get(moved, 0) + 1
        if prev is _RUNNING:
            data: dict[str, Any] = {"from": run.lease_owner, "by": owner, "fence": fence}
            if verdict.suspect:
                data.update(alone=alone, crashes=verdict.crashes)
            events.append(_event(rid, now_us, "reclaimed", data))
        else:
            if claim_wakes(prev, run.run_at, run.created_at):
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
            # {"by": owner, "fence": fence, "attempt": attempt} as _event spells it (compact
            # JSON), the owner's JSON made once per transaction: json.dumps of a dict per run.
            data_text = f'{{"by":{times.owner_json},"fence":{fence},"attempt":{run.attempt:d}}}'
            events.append((rid, now_us, "claimed", data_text))
        # Sleeps whose deadline has passed resolve now; their resolved_at records the actual
        # wake. A queued run is parked on no sleep (a suspended sleep leaves it sleeping, and
        # pause/resume keep that status), so its claim skips the statement; a pending sleep
        # a fork copied into it is resolved by the replay itself (Context._sleep).
        if prev is not _QUEUED:
            c.execute(
                "UPDATE journal SET state = 'done', resolved_at = ? WHERE run_id = ?"
                " AND kind = 'sleep' AND state = 'pending' AND wake_at <= ?",
                [now_us, rid, now_us],
            )
        # The row as just written, without reading it back (one statement fewer per claim):
        # `run` was decoded for this claim alone and nothing else holds it, so its fields
        # are set to what the UPDATE wrote rather than copied into a new Run.
        fields = run.__dict__
        fields["status"] = _RUNNING
        fields["lease_owner"] = owner
        fields["lease_until"] = fields["run_at"] = times.lease_until
        fields["fence"] = fence
        fields["reclaims"] = reclaims
        fields["started_at"] = run.started_at or now
        fields["suspect"] = verdict.suspect
        fields["solo"] = alone
        fields["crashes"] = verdict.crashes
        no_journal, no_versions = empty or (False, False)
        return Claim(
            run=run,
            lease=Lease(rid, fence, owner),
            woke_from=prev,
            journal={} if no_journal else None,
            versions={} if no_versions else None,
        )

    def _pass_over(
        self,
        c: sqlite3.Connection,
        run: Run,
        verdict: ClaimVerdict,
        times: _ClaimTimes,
        ended: list[str],
    ) -> None:
        """What a due run that is not claimed gets (claim_verdict): held as a suspect,
        parked paused, ended, or left alone (SKIP). Runs ended are added to `ended`."""
        rid, now_us, action = run.run_id, times.now_us, verdict.action
        if action is ClaimAction.SKIP:
            return
        if action is ClaimAction.SUSPECT:
            # Held for a claimer that runs it alone. Record the charge once (solo cleared).
            if not run.suspect or verdict.charged:
                c.execute(
                    "UPDATE runs SET suspect = 1, solo = 0, crashes = ? WHERE run_id = ?",
                    [verdict.crashes, rid],
                )
                _add_event(c, rid, now_us, "suspect", _suspect_data(run, verdict))
            return
        if action is ClaimAction.PAUSE:
            # Its worker died with a pause requested: the pause takes effect here.
            _park_paused(c, run, RunStatus.QUEUED, now_us, now_us)
            ended.append(rid)
            return
        if action is ClaimAction.END:
            assert verdict.status is not None
            _end(c, run, verdict.status, verdict.error, now_us)
            ended.append(rid)
            return
        if action is ClaimAction.FAIL:
            assert verdict.error is not None
            _fail(c, run, verdict.error, now_us, timeline_extra={"lease": "lapsed"})
            ended.append(rid)
            return
        raise AssertionError(f"claim verdict {action!r} not handled")

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
        handler is inside with when it began (`steps`, for `why` and the TUI); reports what each live handler must be told:
        lease lost, cancel or pause requested, deadline passed, budget used up.
        """
        now_us, lease_us = to_us(now), to_us(lease_until)
        replies = []
        with self._write() as c:
            c.execute("UPDATE daemons SET seen_at = ? WHERE owner = ?", [now_us, owner])
            for lease, spent in held:
                run_id = lease.run_id
                row = _held(c, lease, "cancel_requested, deadline, timeout_us, pause_requested")
                if row is None:
                    replies.append(HeartbeatReply(run_id, lost=True))
                    continue
                cancel, deadline_us, timeout_us, pause_requested = row
                spent_us = round(spent * 1e6)
                step, step_at = (steps or {}).get(run_id) or (None, None)
                c.execute(
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
                replies.append(
                    HeartbeatReply(
                        run_id,
                        cancel=notice.cancel,
                        deadline=notice.deadline,
                        timeout=notice.timeout,
                        pause=notice.pause,
                    )
                )
        return replies

    def add_event(self, run_id: str, type_: str, data: dict[str, Any], now: datetime) -> None:
        with self._write() as c:
            _add_event(c, run_id, to_us(now), type_, data)

    def add_events(
        self, run_ids: Sequence[str], type_: str, data: dict[str, Any], now: datetime
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            c.executemany(
                TIMELINE_INSERT,
                [_event(rid, now_us, type_, data) for rid in run_ids],
            )

    # -- daemons registry ---------------------------------------------------

    def register_daemon(
        self,
        owner: str,
        host: str,
        pid: int,
        proc_start: str | None,
        now: datetime,
        info: dict[str, Any],
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            c.execute(
                "INSERT OR REPLACE INTO daemons (owner, host, pid, proc_start, started_at, seen_at, info)"
                " VALUES (?,?,?,?,?,?,?)",
                [owner, host, pid, proc_start, now_us, now_us, dumps(info)],
            )

    def unregister_daemon(self, owner: str, now: datetime | None = None) -> None:
        """Forget a daemon, remembering when it was last seen (`now`, else its last heartbeat)."""
        with self._write() as c:
            row = c.execute("SELECT seen_at FROM daemons WHERE owner = ?", [owner]).fetchone()
            if row is not None:
                seen = row[0] if now is None else max(row[0], to_us(now))
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('daemon_last_seen', ?) ON CONFLICT(key)"
                    " DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS"
                    " INTEGER))",
                    [str(seen)],
                )
            c.execute("DELETE FROM daemons WHERE owner = ?", [owner])

    def daemon_last_seen(self) -> datetime | None:
        """When a daemon was last seen on this database: a stopped one's last moment, or the
        latest heartbeat of one still registered."""
        rows = self._read(
            "SELECT MAX(v) FROM (SELECT CAST(value AS INTEGER) AS v FROM meta"
            " WHERE key = 'daemon_last_seen' UNION ALL SELECT MAX(seen_at) FROM daemons)"
        )
        return _dt(rows[0][0])

    def daemons(self) -> list[DaemonInfo]:
        rows = self._read(
            "SELECT owner, host, pid, proc_start, started_at, seen_at, info FROM daemons ORDER BY started_at"
        )
        return [
            DaemonInfo(r[0], r[1], r[2], r[3], from_us(r[4]), from_us(r[5]), _loads(r[6]) or {})
            for r in rows
        ]

    def held_count(self, owner: str) -> int:
        return int(
            self._read(
                f"SELECT COUNT(*) FROM {_RUNS_BY_STATUS} WHERE status = 'running'"
                " AND lease_owner = ?",
                [owner],
            )[0][0]
        )


# Each claimable status's soonest (run_at, run_id) pairs due by ?, at most ? of each, from
# its own range of the (status, run_at, run_id) index, in index order: no scan, no sort.
# The caller sorts the union (a few rows; the order of the whole is not SQLite's to give).
_CANDIDATES = " UNION ALL ".join(
    f"SELECT * FROM (SELECT run_at, run_id FROM runs WHERE status = '{status}'"
    " AND run_at <= ? ORDER BY run_at, run_id LIMIT ?)"
    for status in ("queued", "sleeping", "waiting", "running", "paused")
)

# A run's row as a claim reads it, and whether it has no journal rows and no version
# markers (two index probes): a fresh run's replay then reads neither.
_CLAIM_COLUMNS = (
    f"{_RUN_COLUMNS}, NOT EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id),"
    " NOT EXISTS (SELECT 1 FROM versions v WHERE v.run_id = runs.run_id)"
)

# The rows of the ? soonest due runs (each status's first ? by _CANDIDATES, merged by one
# sort of those few), in one statement: a claim that finds nothing passed over (the usual
# case) reads the candidates and their rows at once. Not in order: see _due_order.
_DUE_ROWS = (
    f"SELECT {_CLAIM_COLUMNS} FROM {_RUNS} WHERE run_id IN"
    f" (SELECT run_id FROM ({_CANDIDATES}) ORDER BY run_at, run_id LIMIT ?)"
)

# One run's row, if it is due (`flowctl run --wait`'s claim).
_ONE_DUE = (
    f"SELECT {_CLAIM_COLUMNS} FROM {_RUNS} WHERE run_id = ?"
    " AND runs.status IN ('queued','sleeping','waiting','running','paused') AND runs.run_at <= ?"
)


def _due_order(row: Sequence[Any]) -> tuple[Any, Any]:
    """A _CLAIM_COLUMNS row's place in claim order: (run_at, run_id)."""
    return row[7], row[0]


def _load_runs(
    c: sqlite3.Connection, run_ids: Sequence[str]
) -> dict[str, tuple[Run, tuple[bool, bool]]]:
    """Rows of these runs as they are inside this transaction (each is known to exist),
    with whether each has no journal rows and no version markers (two index probes in
    the same statement)."""
    marks = ",".join("?" * len(run_ids))
    rows = c.execute(
        f"SELECT {_CLAIM_COLUMNS} FROM {_RUNS} WHERE run_id IN ({marks})", list(run_ids)
    )
    return {r[0]: (_run_from_row(r[:-2]), (bool(r[-2]), bool(r[-1]))) for r in rows}


class _ClaimTimes:
    """A claim transaction's `now` and lease end, in µs and as the datetimes its rows get,
    and its owner as JSON text: each made once per transaction rather than per run claimed."""

    __slots__ = ("events", "lease_until", "lease_us", "moved", "now", "now_us", "owner_json")

    def __init__(self, now_us: int, lease_us: int, owner: str) -> None:
        self.now_us, self.lease_us = now_us, lease_us
        self.now, self.lease_until = from_us(now_us), from_us(lease_us)
        self.owner_json = _owner_json(owner)
        # The claimed runs' timeline rows (woke, claimed, reclaimed), written together by
        # flush_events before the transaction ends: one executemany, not one per run. Each
        # run's rows keep their order, and nothing else in a claim transaction writes to a
        # claimed run's timeline (a run passed over is not claimed), so its seq numbers are
        # what one statement per run gave.
        self.events: list[tuple[str, int, str, str | None]] = []
        # Runs claimed into `running`, by (workflow, status they left): run_counts moves
        # them in two statements per transaction. The runs trigger leaves a move into
        # running to the claim (migration 20): it cost each claim ~8 µs, a sixth of it.
        self.moved: dict[tuple[str, RunStatus], int] = {}

    def flush_events(self, c: sqlite3.Connection) -> None:
        """Write the claimed runs' timeline rows and their moves in run_counts, before the
        claim's transaction ends (so both are in it, or neither)."""
        if self.events:
            c.executemany(TIMELINE_INSERT, self.events)
            self.events = []
        if self.moved:
            left = [(n, workflow, str(prev)) for (workflow, prev), n in self.moved.items()]
            c.executemany(_COUNTS_LEFT, left)
            into: dict[str, int] = {}
            for (workflow, _), n in self.moved.items():
                into[workflow] = into.get(workflow, 0) + n
            c.executemany(_COUNTS_RUNNING, list(into.items()))
            self.moved = {}


# A claim's moves in run_counts (see _ClaimTimes.moved): out of the statuses the runs left,
# into running.
_COUNTS_LEFT = "UPDATE run_counts SET n = n - ? WHERE workflow = ? AND status = ?"
_COUNTS_RUNNING = (
    "INSERT INTO run_counts (workflow, status, n) VALUES (?, 'running', ?)"
    " ON CONFLICT (workflow, status) DO UPDATE SET n = n + excluded.n"
)


@functools.lru_cache(maxsize=64)
def _owner_json(owner: str) -> str:
    """An owner as a JSON string (a daemon claims under one owner all its life)."""
    return json.dumps(owner)


# Enum members looked up once: `ClaimAction.CLAIM` is an attribute lookup through the
# enum's metaclass each time (Python 3.11), and a claim makes several per run.
_CLAIM = ClaimAction.CLAIM
_RUNNING, _QUEUED = RunStatus.RUNNING, RunStatus.QUEUED
