"""Claims: the daemon's view of what is due, and taking due runs under a new lease.

A claim is one transaction: it reads the soonest due runs (one statement in the usual
case), applies `transitions.claim_verdict` to each, and claims it (a new, higher fence)
or passes it over (held as a suspect, parked paused, ended). Where several daemons claim
at once (PostgreSQL), each candidate row is locked with FOR UPDATE SKIP LOCKED: another
daemon's claim in flight is skipped, never waited for and never claimed twice.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from flowctl.model import DUE, Run, RunStatus, from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.endings import end, fail, move_counts, park_paused
from flowctl.store.keyslots import PRIORITY, STATUS, KeySlots, hold
from flowctl.store.mapping import _RUN_COLUMNS, _run_from_row
from flowctl.store.prefetch import with_replay
from flowctl.store.records import Claim, Lease
from flowctl.store.rows import (
    RUNS,
    EventRow,
    add_event,
    add_events,
    event,
    held_row,
    marks,
    suspect_data,
)
from flowctl.store.sql import Row, Tx
from flowctl.store.values import Values
from flowctl.transitions import (
    ClaimAction,
    ClaimVerdict,
    claim_verdict,
    claim_wakes,
    suspect_order,
)

_CLAIMABLE = ("queued", "sleeping", "waiting", "running", "paused")

# Each claimable status's soonest (priority, woke, run_at, run_id) due by ?, at most ? of
# each, from its own range of the (status, run_at, run_id) index, in index order: no scan,
# no sort; the queued runs that have run before (retries, runs released or taken back)
# from the partial index runs_resumed; and the runs with a priority of the statuses that
# wait, highest first, from the partial index runs_priority (empty, and free, where nobody
# gives one). A run of the first arms counts 0 there, a run of both its own priority (the
# sum): a run with a negative one orders after the others among the runs read, which it
# may still enter. `woke` is 1 for a wake (a sleeper, a waiter, a lapsed lease, a resumed
# queued run), 0 for a fresh run: among runs of one priority, wakes go first (issue 40),
# so a daemon saturated with fresh work still wakes its sleepers on time.
# The caller sorts the union (a few rows; the order of the whole is not SQL's to give).
_PRIORITIZED = ("queued", "sleeping", "waiting")
_WOKE = {"queued": 0, "sleeping": 1, "waiting": 1, "running": 1, "paused": 0}
_ARMS = [
    *(
        f"SELECT 0 AS prio, {_WOKE[status]} AS woke, run_at, run_id FROM runs"
        f" WHERE status = '{status}' AND run_at <= ? ORDER BY run_at, run_id LIMIT ?"
        for status in _CLAIMABLE
    ),
    "SELECT 0 AS prio, 1 AS woke, run_at, run_id FROM {runs_resumed} WHERE status = 'queued'"
    " AND started_at IS NOT NULL AND run_at <= ? ORDER BY run_at, run_id LIMIT ?",
    *(
        f"SELECT priority AS prio, {_WOKE[status]} AS woke, run_at, run_id FROM runs"
        f" WHERE status = '{status}' AND priority <> 0 AND run_at <= ?"
        " ORDER BY priority DESC, run_at, run_id LIMIT ?"
        for status in _PRIORITIZED
    ),
]
_CANDIDATES = " UNION ALL ".join(f"SELECT * FROM ({arm}) AS c{i}" for i, arm in enumerate(_ARMS))

# A run's row as a claim reads it, and whether it has no journal rows and no version
# markers (two index probes): a fresh run's replay then reads neither.
# Then the runs running under its concurrency key (not looked for when it has none):
# SQLite's claim counts its keys from it, in the same statement.
CLAIM_COLUMNS = (
    f"{_RUN_COLUMNS}, CASE WHEN runs.flow_key IS NULL THEN 0 ELSE (SELECT COUNT(*) FROM"
    " runs k WHERE k.flow_key = runs.flow_key AND k.status = 'running') END,"
    " NOT EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id),"
    " NOT EXISTS (SELECT 1 FROM versions v WHERE v.run_id = runs.run_id)"
)
_KEY_COUNT = -3  # where a CLAIM_COLUMNS row holds that count

# The rows of the ? soonest due runs (each status's first ? by _CANDIDATES, merged by one
# sort of those few), in one statement: a claim that finds nothing passed over (the usual
# case) reads the candidates and their rows at once. Not in order: see _due_order.
_DUE_ROWS = (
    f"SELECT {CLAIM_COLUMNS} FROM {RUNS} WHERE run_id IN (SELECT run_id FROM ({_CANDIDATES})"
    " AS due GROUP BY run_id ORDER BY SUM(prio) DESC, MAX(woke) DESC, MIN(run_at), run_id"
    " LIMIT ?){skip_locked}"
)

# Each claimable status's soonest due times, for the daemon's wheel: (run_at, run_id).
_NEXT_DUE = (
    "SELECT run_at, run_id FROM runs WHERE status = ? AND run_at IS NOT NULL"
    " ORDER BY run_at LIMIT ?"
)

# One run's row, if it is due (`flowctl run --wait`'s claim).
_ONE_DUE = (
    f"SELECT {CLAIM_COLUMNS} FROM {RUNS} WHERE run_id = ? AND runs.status IN"
    f" ({', '.join(repr(s) for s in _CLAIMABLE)}) AND runs.run_at <= ?{{skip_locked}}"
)

# A due suspect: lapsed under its owner's name (not released by a drain), or one already.
_SUSPECT_DUE = "status = 'running' AND run_at <= ? AND (suspect = 1 OR lease_owner IS NOT NULL)"

# Due suspects are read in due order (the runs_by_status index, no sort), this many at
# most, and the fewest crashes charged are taken first among them
# (transitions.suspect_order): a run that keeps killing its worker does not hold up the
# others.
_SUSPECTS_READ = 64

SLEEPS_DUE = (
    "UPDATE journal SET state = 'done', resolved_at = ? WHERE run_id = ?"
    " AND kind = 'sleep' AND state = 'pending' AND wake_at <= ?"
)
_CLAIM_UPDATE = (
    "UPDATE runs SET status = 'running', lease_owner = ?, lease_until = ?, run_at = ?,"
    " fence = ?, reclaims = ?, started_at = COALESCE(started_at, ?), current_step = NULL,"
    " step_started_at = NULL, suspect = ?, solo = ?, crashes = ?, held_at = NULL"
    " WHERE run_id = ?"
)

# Enum members looked up once: `ClaimAction.CLAIM` is an attribute lookup through the
# enum's metaclass each time (Python 3.11), and a claim makes several per run.
_CLAIM = ClaimAction.CLAIM
_RUNNING, _QUEUED = RunStatus.RUNNING, RunStatus.QUEUED


class Claims(StoreCore):
    """The daemon's side of due runs: what is due, and claims."""

    def next_due(self, limit: int) -> list[tuple[int, str]]:
        """The soonest (run_at µs, run_id) pairs over every claimable status, in order."""
        out: list[tuple[int, str]] = []
        with self.db.reading() as tx:
            for status in sorted(DUE):
                # The drivers' own rows, (int, str) tuples on both stores, as they come: a
                # daemon refills its wheel after most commits of a sibling worker process,
                # and a pair built per row here cost as much as the reads themselves.
                out.extend(cast("list[tuple[int, str]]", tx.all(_NEXT_DUE, [str(status), limit])))
        out.sort()
        return out[:limit]

    def runs_due_between(self, lo: datetime, hi: datetime, *, limit: int) -> list[str]:
        """Ids of active runs whose run_at lies in [lo, hi] (e.g. passed over by a clock jump)."""
        out: list[str] = []
        with self.db.reading() as tx:
            for status in sorted(DUE):
                out.extend(
                    r[0]
                    for r in tx.all(
                        "SELECT run_id FROM runs WHERE status = ? AND run_at BETWEEN ? AND ?"
                        " ORDER BY run_at LIMIT ?",
                        [str(status), to_us(lo), to_us(hi), limit],
                    )
                )
        return out[:limit]

    def suspect_due(self, now: datetime) -> bool:
        """Whether a run whose worker died under it is due (a read): it waits to run alone."""
        return bool(self.suspects_due(now, 1))

    def suspects_due(self, now: datetime, limit: int, spread: bytes = b"") -> list[str]:
        """Ids of due suspects in the order a daemon isolates them (suspect_order: the
        fewest crashes charged first; `spread`, that daemon's own order among equals) (a
        read): runs whose lease lapsed under a live owner's name (its worker died or hangs)
        or that were suspects already. A run released by a drain (no owner) and no suspect
        is not one."""
        rows = self._read(
            f"SELECT run_id, crashes FROM runs WHERE {_SUSPECT_DUE} ORDER BY run_at LIMIT ?",
            [to_us(now), _SUSPECTS_READ + limit],
        )
        return suspect_order(((str(r[0]), int(r[1])) for r in rows), spread)[:limit]

    def suspect_counts(self, now: datetime) -> tuple[int, int]:
        """(suspects running alone now, due suspects waiting for a worker of their own): what
        `status` and `why` say of recovery (a read)."""
        now_us = to_us(now)
        alone = self._read(
            "SELECT COUNT(*) FROM runs WHERE status = 'running' AND suspect = 1 AND solo = 1"
            " AND lease_owner IS NOT NULL AND run_at > ?",
            [now_us],
        )
        waiting = self._read(f"SELECT COUNT(*) FROM runs WHERE {_SUSPECT_DUE}", [now_us])
        return int(alone[0][0]), int(waiting[0][0])

    def charge_crash(self, lease: Lease, now: datetime) -> int | None:
        """The isolated worker that held `lease` on a suspect died while the daemon that
        started it lived to see it: charge the crash to that run (this worker ran nothing
        else) and make it due now. Returns the crashes charged since its last checkpoint,
        or None (nothing changed) if the lease was no longer held: the run ended or moved on
        before its worker died."""
        now_us = to_us(now)

        def charge(tx: Tx) -> int | None:
            row = held_row(tx, lease, "crashes")
            if row is None:
                return None
            crashes = int(row[0]) + 1
            tx.execute(
                "UPDATE runs SET crashes = ?, suspect = 1, solo = 0, lease_until = ?, run_at = ?"
                " WHERE run_id = ?",
                [crashes, now_us, now_us, lease.run_id],
            )
            note = "its isolated worker died while running it alone: the crash is charged to it"
            data = {"by": lease.owner, "fence": lease.fence, "crashes": crashes, "note": note}
            add_event(tx, lease.run_id, now_us, "crashed", data)
            return crashes

        return self._write(charge)

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
        times = _ClaimTimes(to_us(now), to_us(lease_until), owner, alone, self.values)
        return self._write(lambda tx: _claim_due(tx, times, limit, run_id))

    def claim_suspect(
        self, owner: str, now: datetime, lease_until: datetime
    ) -> tuple[Claim | None, list[str]]:
        """Claim one due suspect (a run whose worker died under it) for a claimer that runs
        it alone, the one with the fewest crashes charged first. Returns the claim (or None)
        and the ids of runs ended on the way (poison, deadline, cancelled)."""

        def claim(tx: Tx) -> tuple[Claim | None, list[str]]:
            times = _ClaimTimes(to_us(now), to_us(lease_until), owner, True, self.values)
            times.begin(tx)
            rows = tx.all(
                f"SELECT run_id, crashes FROM runs WHERE {_SUSPECT_DUE}"
                " ORDER BY run_at LIMIT ?{skip_locked}",
                [times.now_us, _SUSPECTS_READ],
            )
            for rid in suspect_order((str(r[0]), int(r[1])) for r in rows):
                got = _claim_one(tx, rid, times)
                if got is not None:
                    times.flush(tx)
                    return got, times.ended
            return None, times.ended

        return self._write(claim)


def _claim_due(
    tx: Tx, times: _ClaimTimes, limit: int, run_id: str | None
) -> tuple[list[Claim], list[str]]:
    """claim_due's transaction."""
    times.begin(tx)
    claims: list[Claim] = []
    if run_id is not None:
        first = tx.all(_ONE_DUE, [run_id, times.now_us])
    else:
        first = tx.all(_DUE_ROWS, [times.now_us, limit] * len(_ARMS) + [limit])
    read = len(first)
    first = still_due(first)
    times.slots.note(first, _KEY_COUNT)
    for r in first:
        if not times.ended and times.slots.full(tx, r, times.now_us):
            continue  # held behind its full key, as its row says
        # A run ended here may have woken a parent or released a held run: the rows read
        # before that are read again.
        row: Run | str = r[0] if times.ended else _run_from_row(r)
        claim = _claim_one(tx, row, times, (bool(r[-2]), bool(r[-1])))
        if claim is not None:
            claims.append(claim)
    if run_id is None and len(claims) < limit and read == limit:
        # Some were passed over (held as suspects, paused, ended): the next candidates.
        _claim_more(tx, times, limit, claims, {r[0] for r in first})
    times.flush(tx)
    return with_replay(tx, times.values, claims), times.ended


def _claim_more(
    tx: Tx, times: _ClaimTimes, limit: int, claims: list[Claim], seen: set[str]
) -> None:
    """Claims from the candidates after the first read (limit + 16, and twice the claims
    still wanted, in all, as one statement of their ids), their rows read as many at a
    time as claims still wanted.
    The few rows (at most 5 x (limit + 16)) are merged here: SQLite's ORDER BY over the
    compound built a temporary b-tree per arm, ten times the whole read."""
    # Twice as many again as were passed over: runs held behind busy keys (flow control)
    # can pass over many of a batch, and the claim still fills it in one more read.
    want = limit + 16 + 2 * (limit - len(claims))
    rows = tx.all(_CANDIDATES, [times.now_us, want] * len(_ARMS))
    candidates = sorted((-int(r[0]), -int(r[1]), r[2], r[3]) for r in rows)[:want]
    ids = list(dict.fromkeys(c[-1] for c in candidates if c[-1] not in seen))
    while ids and len(claims) < limit:
        chunk, ids = ids[: limit - len(claims)], ids[limit - len(claims) :]
        loaded, settled = _load_rows(tx, chunk, times), len(times.ended)
        for rid in chunk:
            r = loaded.get(rid)  # absent: another claimer holds it
            if r is None:
                continue
            if len(times.ended) != settled:  # read before a run ended here: read again
                claim = _claim_one(tx, rid, times)
            elif times.ended or not times.slots.full(tx, r, times.now_us):
                claim = _claim_one(tx, _run_from_row(r), times, (bool(r[-2]), bool(r[-1])))
            else:
                continue  # held behind its full key, as its row says (not decoded)
            if claim is not None:
                claims.append(claim)


def still_due(rows: list[Row]) -> list[Row]:
    """The candidate rows still due as locked, in claim order (_due_order).

    On PostgreSQL a row another transaction updated and committed after this statement's
    snapshot is locked and returned as it is now, since its id still matches the ids the
    snapshot chose: it may have ended meanwhile (no run_at). It is dropped here, not
    compared (a run_at of None cannot be ordered); its claim would pass it over anyway."""
    due = [r for r in rows if r[_RUN_AT] is not None and r[STATUS] in _CLAIMABLE]
    due.sort(key=_due_order)
    return due


def _due_order(row: Row) -> tuple[Any, ...]:
    """A CLAIM_COLUMNS row's place in claim order: the highest priority first, then wakes
    before fresh runs (see _ARMS), then (run_at, run_id)."""
    return -row[PRIORITY], not _woke(row), row[_RUN_AT], row[0]


_RUN_AT, _STARTED_AT = 7, 8  # a run row's run_at and started_at (mapping._RUN_COLUMNS)


def _woke(row: Row) -> bool:
    """A due run that has run before: any status but queued and paused, or a queued run
    that started once (its retry, a release, a take-back)."""
    status = row[STATUS]
    if status == "queued":
        return row[_STARTED_AT] is not None
    return bool(status != "paused")


def _load_rows(tx: Tx, run_ids: Sequence[str], times: _ClaimTimes) -> dict[str, Row]:
    """CLAIM_COLUMNS rows of these runs as they are inside this transaction (those another
    claimer holds are skipped), by id, not decoded: a run held behind its full key is
    passed over from its row alone."""
    rows = tx.all(
        f"SELECT {CLAIM_COLUMNS} FROM {RUNS} WHERE run_id IN ({marks(len(run_ids))})"
        "{skip_locked}",
        list(run_ids),
    )
    times.slots.note(rows, _KEY_COUNT)
    return {r[0]: r for r in rows}


def _claim_one(
    tx: Tx,
    run: Run | str,
    times: _ClaimTimes,
    empty: tuple[bool, bool] | None = None,
) -> Claim | None:
    """Claim one run (its row as read in this transaction, or its id) if still due.

    `empty` (read with the row): whether it has no journal rows, no version markers; the
    claim then says so and the replay reads neither (a fresh run: two statements fewer)."""
    if isinstance(run, str):
        row = tx.one(f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE run_id = ?{{skip_locked}}", [run])
        if row is None:
            return None  # another claimer holds it
        run, empty = _run_from_row(row), None
    prev = run.status
    if prev not in DUE or run.run_at is None or run.run_at > times.now:
        return None
    verdict = claim_verdict(run, times.now, alone=times.alone)
    if verdict.action is not _CLAIM:
        _pass_over(tx, run, verdict, times)
        return None
    if run.flow_key is not None and not times.slots.take(
        tx, run, times.now_us, reclaim=prev is _RUNNING, counted=not times.ended
    ):
        return None  # held behind its full key (or the key is being decided elsewhere)
    fence = run.fence + 1
    times.update(
        [
            times.owner,
            times.lease_us,
            times.lease_us,
            fence,
            verdict.reclaims,
            times.now_us,
            int(verdict.suspect),
            int(times.alone),
            verdict.crashes,
            run.run_id,
        ],
    )
    # Sleeps whose deadline has passed resolve now; their resolved_at records the actual
    # wake. A queued run is parked on no sleep (a suspended sleep leaves it sleeping, and
    # pause/resume keep that status), so its claim skips the statement; a pending sleep a
    # fork copied into it is resolved by the replay itself (Context._sleep).
    if prev is not _QUEUED:
        tx.send(SLEEPS_DUE, [times.now_us, run.run_id, times.now_us])
    return times.claimed(run, verdict, fence, empty)


def _pass_over(tx: Tx, run: Run, verdict: ClaimVerdict, times: _ClaimTimes) -> None:
    """What a due run that is not claimed gets (claim_verdict): held as a suspect, parked
    paused, ended, or left alone (SKIP). Runs ended go to `times.ended`."""
    rid, now_us, action = run.run_id, times.now_us, verdict.action
    if action is ClaimAction.SKIP:
        return
    if action is ClaimAction.SUSPECT:
        # Held for a claimer that runs it alone (flowctl.daemon.isolation). Said once.
        if not run.suspect:
            tx.execute("UPDATE runs SET suspect = 1, solo = 0 WHERE run_id = ?", [rid])
            add_event(tx, rid, now_us, "suspect", suspect_data(run, verdict.crashes))
        return
    if action is ClaimAction.PAUSE:  # its worker died with a pause requested
        park_paused(tx, run, RunStatus.QUEUED, now_us, now_us)
    elif action is ClaimAction.END and verdict.status is not None:
        end(tx, times.values, run, verdict.status, verdict.error, now_us)
    elif action is ClaimAction.FAIL and verdict.error is not None:
        extra = {"lease": "lapsed"}
        fail(tx, times.values, run, verdict.error, now_us, timeline_extra=extra)
    else:
        raise RuntimeError(f"claim verdict {verdict!r} not handled")
    times.ended.append(rid)


class _ClaimTimes:
    """A claim transaction's `now` and lease end, in µs and as the datetimes its rows get,
    its owner (and as JSON text), its claim statement, and what it gathers to write
    before it ends: each made once per transaction rather than per run claimed."""

    __slots__ = (
        "alone",
        "ended",
        "events",
        "lease_until",
        "lease_us",
        "moved",
        "now",
        "now_us",
        "owner",
        "owner_json",
        "slots",
        "update",
        "values",
    )

    def __init__(self, now_us: int, lease_us: int, owner: str, alone: bool, values: Values) -> None:
        self.values = values  # seals an ending's error, opens a claimed run's values
        self.now_us, self.lease_us = now_us, lease_us
        self.now, self.lease_until = from_us(now_us), from_us(lease_us)
        self.owner, self.owner_json, self.alone = owner, _owner_json(owner), alone

    def begin(self, tx: Tx) -> None:
        """A (new) try of the claim's transaction: nothing gathered yet."""
        self.update = tx.statement(_CLAIM_UPDATE)
        self.ended: list[str] = []  # runs ended instead of claimed
        # The claimed runs' timeline rows (woke, claimed, reclaimed), written together by
        # flush before the transaction ends: one executemany, not one per run. Each run's
        # rows keep their order, and nothing else in a claim transaction writes to a
        # claimed run's timeline (a run passed over is not claimed).
        self.events: list[EventRow] = []
        # Runs claimed into `running`, by (workflow, status they left): the claim moves
        # them in the run counts itself (the schema's trigger leaves that to it).
        self.moved: dict[tuple[str, RunStatus], int] = {}
        self.slots = KeySlots()  # concurrency keys met (flowctl.store.keyslots)

    def claimed(
        self, run: Run, verdict: ClaimVerdict, fence: int, empty: tuple[bool, bool] | None
    ) -> Claim:
        """The claim of `run` as its UPDATE wrote it, with its timeline rows and counts
        move gathered. Not read back (one statement fewer per claim): `run` was decoded
        for this claim alone and nothing else holds it, so its fields are set to what the
        UPDATE wrote rather than copied into a new Run."""
        prev = run.status
        wakes = run.run_at is not None and claim_wakes(prev, run.run_at, run.created_at)
        self._note(run, verdict, fence, wakes)
        fields = run.__dict__
        fields["status"] = _RUNNING
        fields["lease_owner"] = self.owner
        fields["lease_until"] = fields["run_at"] = self.lease_until
        fields["fence"] = fence
        fields["reclaims"] = verdict.reclaims
        fields["started_at"] = run.started_at or self.now
        fields["suspect"] = verdict.suspect
        fields["solo"] = self.alone
        fields["crashes"] = verdict.crashes
        fields["held_at"] = None
        no_journal, no_versions = empty or (False, False)
        return Claim(
            run=self.values.run(run),  # in the claim's transaction: no key, no claim
            lease=Lease(run.run_id, fence, self.owner),
            woke_from=prev,
            wakes=wakes,
            journal={} if no_journal else None,
            versions={} if no_versions else None,
        )

    def _note(self, run: Run, verdict: ClaimVerdict, fence: int, wakes: bool) -> None:
        """The timeline rows and the counts move of claiming `run` (still as it was read)."""
        rid, prev, now_us = run.run_id, run.status, self.now_us
        if prev is _RUNNING:
            data: dict[str, Any] = {"from": run.lease_owner, "by": self.owner, "fence": fence}
            if verdict.suspect:
                data.update(alone=self.alone, crashes=verdict.crashes)
            self.events.append(event(rid, now_us, "reclaimed", data))
            return
        move = (run.workflow, prev)  # its text made once per move, at flush
        self.moved[move] = self.moved.get(move, 0) + 1
        if wakes:
            assert run.run_at is not None  # claim_wakes compared it
            scheduled = to_us(run.run_at)
            woke = {
                "from": str(prev),
                "scheduled": from_us(scheduled).isoformat(timespec="microseconds"),
                "late_ms": round((now_us - scheduled) / 1000, 3),
            }
            self.events.append(event(rid, now_us, "woke", woke))
        # {"by": owner, "fence": fence, "attempt": attempt} as `event` spells it (compact
        # JSON), the owner's JSON made once per transaction.
        data_text = f'{{"by":{self.owner_json},"fence":{fence},"attempt":{run.attempt:d}}}'
        self.events.append((rid, now_us, "claimed", data_text))

    def flush(self, tx: Tx) -> None:
        """Write the claimed runs' timeline rows and their counts moves, before the claim's
        transaction ends (so both are in it, or neither)."""
        hold(tx, self.slots.held, self.slots.passed, self.now_us)
        self.slots.held, self.slots.passed = set(), []
        add_events(tx, self.events)
        self.events = []
        move_counts(tx, {(wf, str(prev), "running"): n for (wf, prev), n in self.moved.items()})
        self.moved = {}


@functools.lru_cache(maxsize=64)
def _owner_json(owner: str) -> str:
    """An owner as a JSON string (a daemon claims under one owner all its life)."""
    return json.dumps(owner)
