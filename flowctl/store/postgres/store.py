"""The PostgreSQL store: the same transitions as the SQLite store, promise for promise.

Each write method is one transaction on a pooled connection. Rows a transition reads to
decide a write are locked (`FOR UPDATE`), so concurrent writers on many hosts serialise
per run exactly as SQLite's single writer does; claims lock their candidates with
`FOR UPDATE SKIP LOCKED`, so daemons never wait on each other's claims and never claim
the same run. Worker writes carry the fence given at claim time and change nothing when
it has moved on (a False/None return, not an exception).

Change detection: every commit that writes runs, signals or schedules NOTIFYs one channel
(a trigger, so any client's writes count); `data_version()` counts those from other
processes (LISTEN on a connection of its own), and writes by this process's stores at
once (except this store's own_writes(), as in SQLite), so the daemon's
existing 50 ms change check works across hosts; `refresh_interval` asks the daemon for a
bounded safety re-read (every BACKSTOP_S) besides.

The policy (claim verdicts, next attempts, pause and resume) comes from
flowctl.transitions, as for SQLite: the store applies it and returns what it applied.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from flowctl.errors import (
    DatabaseError,
    DatabaseNotFoundError,
    FlowctlError,
    RunNotFoundError,
    ScheduleError,
    ScheduleNotFoundError,
)
from flowctl.model import (
    DUE,
    CallKind,
    EntryState,
    JournalEntry,
    Run,
    RunStatus,
    TimelineEvent,
    from_us,
    to_us,
)
from flowctl.store.postgres import schema
from flowctl.store.postgres.connect import cause, connect, describe, driver, redact, session_options
from flowctl.store.records import (
    Claim,
    DaemonInfo,
    FireOutcome,
    FirePlan,
    HeartbeatReply,
    Lease,
    NewRun,
    NewSchedule,
    ScheduleEvent,
    ScheduleRow,
    dumps,
)
from flowctl.store.sqlite.connection import CommitStats
from flowctl.store.sqlite.schedules import HISTORY_KEEP
from flowctl.transitions import (
    Action,
    Applied,
    ClaimAction,
    ClaimVerdict,
    cancel_error,
    claim_verdict,
    error_kind,
    guard,
    next_attempt,
    parked_run_at,
    pause,
    resume,
)

CHANNEL = "flowctl_changes"
BACKSTOP_S = 5.0  # the daemon re-reads its wheel at least this often: a bounded safety net
POOL_MAX = 10
POOL_TIMEOUT_S = 15.0

# The stores open in this process, by URL, and the server processes of their pooled
# connections: a write through one store is seen by the others at once, and its NOTIFY,
# arriving later, is recognised by its sender's pid and ignored.
_OPEN: dict[str, weakref.WeakSet[PostgresStore]] = {}
_OWN_PIDS: set[int] = set()

Conn = Any  # a psycopg.Connection; Any so that a SQLite-only install type-checks too


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dt(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def _us(when: datetime | None) -> int | None:
    return None if when is None else to_us(when)


_RUN_COLUMNS = (
    "run_id, workflow, target, kind, status, input, created_at, run_at, started_at, finished_at,"
    " attempt, max_attempts, deadline, timeout_us, exec_spent_us, result, error, lease_owner,"
    " lease_until, fence, reclaims, cancel_requested, cancel_reason, key, parent_run_id,"
    " schedule, scheduled_at, cwd, source_hash, source_path, backoff, pause_requested,"
    " paused_status, paused_run_at, current_step, secret_keys, suspect, solo, crashes"
)


def _run_from_row(r: Sequence[Any]) -> Run:
    return Run(
        run_id=r[0],
        workflow=r[1],
        target=r[2],
        kind=r[3],
        status=RunStatus(r[4]),
        input=json.loads(r[5]),
        created_at=from_us(r[6]),
        run_at=_dt(r[7]),
        started_at=_dt(r[8]),
        finished_at=_dt(r[9]),
        attempt=r[10],
        max_attempts=r[11],
        deadline=_dt(r[12]),
        timeout=None if r[13] is None else r[13] / 1e6,
        exec_spent=r[14] / 1e6,
        result=_loads(r[15]),
        error=_loads(r[16]),
        lease_owner=r[17],
        lease_until=_dt(r[18]),
        fence=r[19],
        reclaims=r[20],
        cancel_requested=bool(r[21]),
        cancel_reason=r[22],
        key=r[23],
        parent_run_id=r[24],
        schedule=r[25],
        scheduled_at=_dt(r[26]),
        cwd=r[27],
        source_hash=r[28],
        source_path=r[29],
        backoff=_loads(r[30]),
        pause_requested=bool(r[31]),
        paused_status=None if r[32] is None else RunStatus(r[32]),
        paused_run_at=_dt(r[33]),
        current_step=r[34],
        secret_keys=tuple(_loads(r[35]) or ()),
        suspect=bool(r[36]),
        solo=bool(r[37]),
        crashes=r[38],
    )


# Progress (a checkpoint) or an end: no longer a suspect, the crashes charged forgiven.
_CLEARED = "reclaims = 0, suspect = 0, crashes = 0"

_ENTRY_COLUMNS = (
    "run_id, call_index, kind, name, state, value, wake_at, recorded_at, resolved_at,"
    " tries, duration_us"
)
# Insert or replace one journal row (SQLite's INSERT OR REPLACE).
_UPSERT_ENTRY = (
    f"INSERT INTO journal ({_ENTRY_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s::json,%s,%s,%s,%s,%s)"
    " ON CONFLICT (run_id, call_index) DO UPDATE SET kind = EXCLUDED.kind,"
    " name = EXCLUDED.name, state = EXCLUDED.state, value = EXCLUDED.value,"
    " wake_at = EXCLUDED.wake_at, recorded_at = EXCLUDED.recorded_at,"
    " resolved_at = EXCLUDED.resolved_at, tries = EXCLUDED.tries,"
    " duration_us = EXCLUDED.duration_us"
)
_INSERT_EVENT = "INSERT INTO timeline (run_id, at, type, data) VALUES (%s,%s,%s,%s::jsonb)"


def _entry_from_row(r: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        run_id=r[0],
        call_index=r[1],
        kind=CallKind(r[2]),
        name=r[3],
        state=EntryState(r[4]),
        value=_loads(r[5]),
        wake_at=_dt(r[6]),
        recorded_at=_dt(r[7]),
        resolved_at=_dt(r[8]),
        tries=r[9],
        duration=None if r[10] is None else r[10] / 1e6,
    )


def _event(
    run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> tuple[str, int, str, str | None]:
    return (run_id, at_us, type_, None if not data else json.dumps(data, separators=(",", ":")))


def _add_event(
    c: Conn, run_id: str, at_us: int, type_: str, data: dict[str, Any] | None = None
) -> None:
    """Append one timeline event inside the caller's transaction."""
    c.execute(_INSERT_EVENT, _event(run_id, at_us, type_, data))


def _add_events(c: Conn, events: Sequence[tuple[str, int, str, str | None]]) -> None:
    if events:
        with c.cursor() as cur:
            cur.executemany(_INSERT_EVENT, events)


def _configure(conn: Conn) -> None:
    """json and jsonb arrive as their text, parsed by the same json.loads as in SQLite."""
    from psycopg.types.string import TextLoader

    conn.adapters.register_loader("json", TextLoader)
    conn.adapters.register_loader("jsonb", TextLoader)


def _configure_pooled(conn: Conn) -> None:
    _configure(conn)
    _OWN_PIDS.add(conn.info.backend_pid)


class PostgresStore:
    """One PostgreSQL database. Thread-safe: each call takes a pooled connection."""

    # NOTIFYs cross a network and a LISTEN connection can drop unseen: the daemon refills
    # its wheel at least this often (seconds, its own clock) as a backstop.
    refresh_interval = BACKSTOP_S

    def __init__(
        self,
        url: str,
        *,
        durability: str = "full",
        create: bool = True,
        allow_read_only: bool = False,
        pool_max: int = POOL_MAX,
    ) -> None:
        """Connect to the database at `url` and create or migrate its schema.

        Without `create`, a database with no flowctl schema is a DatabaseNotFoundError and
        nothing is created. A server that cannot be reached, refuses the login or has no
        such database is one line naming the server and the cause.
        """
        self.url = url.strip()
        self.path = redact(self.url)  # what messages and front ends show: no password
        self.where = describe(self.url)
        if durability not in ("full", "normal"):
            raise FlowctlError(f"durability must be 'full' or 'normal', got {durability!r}")
        self.durability = durability
        self.read_only = False
        del allow_read_only  # a login that cannot write is a server-side error on write
        first = connect(self.url)
        try:
            _configure(first)
            if not create and not _has_schema(first):
                raise DatabaseNotFoundError(self.path)
            try:
                schema.migrate(first, f"PostgreSQL database {self.where}", lambda: to_us_now())
            except driver().Error as e:
                raise self._fault(e) from None
        finally:
            first.close()
        from psycopg_pool import ConnectionPool

        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 10, **session_options()}
        if durability == "normal":  # a commit returns before its WAL is flushed
            kwargs["options"] += " -c synchronous_commit=off"
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=pool_max,
            kwargs=kwargs,
            configure=_configure_pooled,
            timeout=POOL_TIMEOUT_S,
            open=True,
            name=f"flowctl-{self.where}",
        )
        self._tl = threading.local()
        self._listen_lock = threading.Lock()
        self._listener: Conn | None = None
        self._version = 0
        self._commits = 0
        self._stats_lock = threading.Lock()
        self._pending = 0
        self._listen()
        _OPEN.setdefault(self.url, weakref.WeakSet()).add(self)

    # -- plumbing ----------------------------------------------------------

    def close(self) -> None:
        _OPEN.get(self.url, weakref.WeakSet()).discard(self)
        with self._listen_lock:
            if self._listener is not None:
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_group_commit(self, on: bool) -> None:
        """Nothing to do: PostgreSQL commits concurrent writers' transactions together."""

    def file_replaced(self) -> str | None:
        """A server database has no file to be deleted or replaced under the daemon."""
        return None

    def _fault(self, e: BaseException) -> FlowctlError:
        """A server error as one line naming the server."""
        pg = driver()
        if isinstance(e, pg.OperationalError | pg.InterfaceError):
            return DatabaseError(f"lost the connection to PostgreSQL at {self.where}: {cause(e)}")
        return DatabaseError(f"PostgreSQL at {self.where}: {cause(e)}")

    @contextlib.contextmanager
    def own_writes(self) -> Iterator[None]:
        """Mark this thread's writes as the caller's own while the block runs: they are not
        counted by this store's data_version() (as in the SQLite store)."""
        self._tl.own = getattr(self._tl, "own", 0) + 1
        try:
            yield
        finally:
            self._tl.own -= 1

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        pg = driver()
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {self.where}: no connection within"
                f" {POOL_TIMEOUT_S:g} s (is the server running?)"
            ) from None
        except (pg.OperationalError, pg.InterfaceError) as e:
            raise self._fault(e) from None

    @contextlib.contextmanager
    def _write(self) -> Iterator[Conn]:
        """One transaction; nested in this thread's write it is part of that one. Commits
        with a NOTIFY, so other stores' data_version() see the change."""
        conn = getattr(self._tl, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._stats_lock:
            self._pending += 1
        try:
            with self._connection() as conn:
                self._tl.conn = conn
                try:
                    with conn.transaction():
                        yield conn
                finally:
                    self._tl.conn = None
            with self._stats_lock:
                self._commits += 1
            # Stores of this process see it at once, as with SQLite's data_version (the
            # trigger's NOTIFY reaches them a little later and is ignored: it comes from one
            # of this process's connections).
            own = bool(getattr(self._tl, "own", 0))
            for store in list(_OPEN.get(self.url, ())):
                if store is not self or not own:
                    store._changed()
        finally:
            with self._stats_lock:
                self._pending -= 1

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Conn]:
        conn = getattr(self._tl, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._connection() as conn:
            yield conn

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as c:
            rows: list[Any] = c.execute(sql, params).fetchall()
            return rows

    def _listen(self) -> None:
        """(Re)open the LISTEN connection; holding no lock."""
        try:
            conn = connect(self.url)
            conn.execute(f"LISTEN {CHANNEL}")
        except FlowctlError:
            conn = None
        with self._listen_lock:
            self._listener = conn

    def _changed(self) -> None:
        with self._listen_lock:
            self._version += 1

    def data_version(self) -> int:
        """Changes when another writer commits, or when this store is written outside
        own_writes(); reads the queued NOTIFYs, no query. A lost LISTEN connection counts
        as a change (notices may have been missed) and is reopened."""
        with self._listen_lock:
            listener = self._listener
            changed = False
            if listener is not None:
                try:
                    for n in listener.notifies(timeout=0):
                        if n.pid not in _OWN_PIDS:  # a writer outside this process's stores
                            changed = True
                except driver().Error:
                    listener = self._listener = None
                    changed = True
            if changed:
                self._version += 1
            version = self._version
        if listener is None:
            self._listen()
        return version

    def integrity_check(self) -> str:
        return "ok"

    def pragmas(self) -> dict[str, int | str]:
        """The server settings that bear on durability, for diagnostics."""
        rows = self._read(
            "SELECT name, setting FROM pg_settings WHERE name IN"
            " ('synchronous_commit', 'fsync', 'default_transaction_isolation')"
        )
        return {r[0]: r[1] for r in rows}

    def pending_writes(self) -> int:
        with self._stats_lock:
            return self._pending

    def commit_stats(self) -> CommitStats:
        with self._stats_lock:
            return CommitStats(self._commits, self._commits)

    # -- runs: create and read --------------------------------------------

    def create_run(self, new: NewRun, now: datetime) -> tuple[Run, bool]:
        """Insert a queued run. With an idempotency key already used, return that run instead.

        Returns (run, created).
        """
        with self._write() as c:
            return self._insert_run(c, new, to_us(now))

    def create_runs(self, news: Sequence[NewRun], now: datetime) -> list[tuple[Run, bool]]:
        """create_run for each of `news`, in order, in one transaction: all or none. A key
        used before, or earlier in `news`, gives that run and False."""
        now_us = to_us(now)
        with self._write() as c:
            return [self._insert_run(c, new, now_us) for new in news]

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

    def _insert_run(self, c: Conn, new: NewRun, now_us: int) -> tuple[Run, bool]:
        """create_run inside the caller's transaction. A key taken by a concurrent writer
        is found, not an error: ON CONFLICT waits for it and returns its run."""
        start_at = from_us(now_us) if new.run_at is None else new.run_at
        run_at = to_us(parked_run_at(start_at, deadline=new.deadline) or start_at)
        if new.key is not None:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = %s", [new.key]).fetchone()
            if row is not None:
                return _run_from_row(row), False
        inserted = c.execute(
            "INSERT INTO runs (run_id, workflow, target, kind, source, source_hash, source_path,"
            " cwd, input, status, run_at, created_at, max_attempts, backoff, deadline,"
            " timeout_us, key, parent_run_id, schedule, scheduled_at, secret_keys)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s::jsonb,%s,%s,%s,%s,%s::jsonb,%s,%s,%s,%s,%s,%s,"
            "%s::jsonb) ON CONFLICT (key) DO NOTHING",
            [
                new.run_id,
                new.workflow,
                new.target,
                new.kind,
                new.source,
                new.source_hash,
                new.source_path,
                new.cwd,
                dumps(new.input, "the input"),
                str(RunStatus.QUEUED),
                run_at,
                now_us,
                new.max_attempts,
                None if new.backoff is None else dumps(new.backoff),
                _us(new.deadline),
                None if new.timeout is None else round(new.timeout * 1e6),
                new.key,
                new.parent_run_id,
                new.schedule,
                _us(new.scheduled_at),
                dumps(sorted(new.secret_keys)) if new.secret_keys else None,
            ],
        ).rowcount
        if inserted == 0:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key = %s", [new.key]).fetchone()
            return _run_from_row(row), False
        data: dict[str, Any] = {"attempt": 1}
        if run_at > now_us:
            data["run_at"] = from_us(run_at).isoformat(timespec="microseconds")
        if new.parent_run_id:
            data["parent"] = new.parent_run_id
        if new.schedule:
            data["schedule"] = new.schedule
        _add_event(c, new.run_id, now_us, "created", data)
        return _load_run(c, new.run_id, lock=False), True

    def get_run(self, run_id: str) -> Run:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s", [run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return _run_from_row(rows[0])

    def find_run(self, ref: str) -> Run:
        """A run by full id or unique prefix."""
        ref = ref.strip()
        if not ref:
            raise RunNotFoundError(ref, "a run id is required")
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
        where: list[str] = []
        params: list[Any] = []
        if statuses:
            where.append("status = ANY(%s)")
            params.append([str(s) for s in statuses])
        if workflow:
            where.append("workflow = %s")
            params.append(workflow)
        if since is not None:
            where.append("created_at >= %s")
            params.append(to_us(since))
        if search:
            clause, args = _search_clause(search)
            where.append(clause)
            params.extend(args)
        orders = {
            "created_desc": "created_at DESC, run_id DESC",
            "run_at": "run_at, run_id",
            "finished_desc": "finished_at DESC NULLS LAST, run_id DESC",
        }
        sql = f"SELECT {_RUN_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {orders[order]} LIMIT %s OFFSET %s"
        params.extend([limit, offset])
        return [_run_from_row(r) for r in self._read(sql, params)]

    def runs_by_ids(self, run_ids: Sequence[str]) -> list[Run]:
        if not run_ids:
            return []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ANY(%s)", [list(run_ids)]
        )
        return [_run_from_row(r) for r in rows]

    def count_by_status(self, workflow: str | None = None) -> dict[RunStatus, int]:
        counts = {s: 0 for s in RunStatus}
        if workflow:
            rows = self._read(
                "SELECT status, COUNT(*) FROM runs WHERE workflow = %s GROUP BY status", [workflow]
            )
        else:
            rows = self._read("SELECT status, COUNT(*) FROM runs GROUP BY status")
        for status, n in rows:
            counts[RunStatus(status)] = n
        return counts

    def workflows_seen(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT workflow FROM runs ORDER BY workflow")]

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

    # -- the daemon's view ---------------------------------------------------

    def next_due(self, limit: int) -> list[tuple[int, str]]:
        """The soonest (run_at µs, run_id) pairs over every claimable status, in order."""
        out: list[tuple[int, str]] = []
        with self._reading() as c:
            for status in DUE:
                out.extend(
                    tuple(r)
                    for r in c.execute(
                        "SELECT run_at, run_id FROM runs WHERE status = %s AND run_at IS NOT NULL"
                        " ORDER BY run_at LIMIT %s",
                        [str(status), limit],
                    ).fetchall()
                )
        out.sort()
        return out[:limit]

    def running_owners(self) -> list[str]:
        rows = self._read(
            "SELECT DISTINCT lease_owner FROM runs WHERE status = 'running'"
            " AND lease_owner IS NOT NULL"
        )
        return [r[0] for r in rows]

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

    def release_runs(self, leases: Sequence[Lease], now: datetime, reason: str) -> int:
        """A stopping daemon hands back the runs it still holds: each due now, unless its
        lease was lost meanwhile (a run another worker has claimed since is left alone)."""
        now_us = to_us(now)
        released = 0
        with self._write() as c:
            for lease in sorted(leases, key=lambda x: x.run_id):  # one lock order
                if _held(c, lease) is None:
                    continue
                c.execute(
                    "UPDATE runs SET lease_until = %s, run_at = %s, solo = 0 WHERE run_id = %s",
                    [now_us, now_us, lease.run_id],
                )
                released += 1
                _add_event(
                    c, lease.run_id, now_us, "released", {"by": lease.owner, "reason": reason}
                )
        return released

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

        Candidates are locked with FOR UPDATE SKIP LOCKED, soonest run_at first: another
        daemon's claim in flight is skipped, never waited for and never claimed twice.
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
                found: list[tuple[int, str]] = []
                for status in ("queued", "sleeping", "waiting", "running", "paused"):
                    found.extend(
                        (r[0], r[1])
                        for r in c.execute(
                            "SELECT run_at, run_id FROM runs WHERE status = %s AND run_at <= %s"
                            " ORDER BY run_at LIMIT %s FOR UPDATE SKIP LOCKED",
                            [status, now_us, limit + 16],
                        ).fetchall()
                    )
                found.sort()
                candidates = [rid for _, rid in found]
            for rid in candidates:
                if len(claims) >= limit:
                    break
                claim = self._claim_one(c, rid, owner, now_us, lease_us, ended, alone)
                if claim is not None:
                    claims.append(claim)
        return claims, ended

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
        run = _load_run(c, rid)
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
            " current_step = NULL, suspect = %s, solo = %s, crashes = %s WHERE run_id = %s",
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

    # -- fenced writes by the worker holding a run --------------------------

    def record_entry(
        self,
        lease: Lease,
        entry: JournalEntry,
        now: datetime,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
    ) -> bool:
        """Journal one call's outcome (insert or replace its row). False: the lease is lost."""
        now_us = to_us(now)
        run_id = lease.run_id
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                _UPSERT_ENTRY,
                [
                    run_id,
                    entry.call_index,
                    str(entry.kind),
                    entry.name,
                    str(entry.state),
                    None
                    if entry.value is None
                    else dumps(entry.value, f"result of {entry.name!r}"),
                    _us(entry.wake_at),
                    now_us,
                    _us(entry.resolved_at),
                    entry.tries,
                    None if entry.duration is None else round(entry.duration * 1e6),
                ],
            )
            c.execute(
                f"UPDATE runs SET {_CLEARED} WHERE run_id = %s AND (reclaims != 0 OR suspect != 0)",
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

    def heartbeat(
        self,
        owner: str,
        held: Sequence[tuple[Lease, float]],
        lease_until: datetime,
        now: datetime,
        steps: Mapping[str, str | None] | None = None,
    ) -> list[HeartbeatReply]:
        """Extend the leases of held runs (lease, exec_spent) in one transaction.

        Persists the execution time spent and the step each handler is inside; reports what
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
                c.execute(
                    "UPDATE runs SET lease_until = %s, run_at = %s, exec_spent_us = %s,"
                    " current_step = %s WHERE run_id = %s",
                    [lease_us, lease_us, spent_us, (steps or {}).get(run_id), run_id],
                )
                replies[run_id] = HeartbeatReply(
                    run_id,
                    cancel=bool(cancel),
                    deadline=deadline is not None and deadline <= now_us,
                    timeout=timeout_us is not None and spent_us >= timeout_us,
                    pause=bool(pause_requested),
                )
        return [replies[lease.run_id] for lease, _ in held]

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
        with self._write() as c:
            row = _held(c, lease, "deadline, pause_requested")
            if row is None:
                return None
            if status is RunStatus.PAUSED:  # stopped at a durable call to honour a pause
                status, run_at = RunStatus.QUEUED, now
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
            if status is RunStatus.WAITING and entry is not None:
                has = c.execute(
                    "SELECT 1 FROM signals WHERE run_id = %s AND name = %s AND consumed_at IS NULL",
                    [run_id, entry.name],
                ).fetchone()
                if has:
                    at = now_us
                    c.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", [at, run_id])
            if row[1]:
                return self._park_paused(c, _load_run(c, run_id), status, at, now_us)
            return Applied(status, _dt(at))

    def complete_run(self, lease: Lease, result: Any, now: datetime, exec_spent: float) -> bool:
        now_us = to_us(now)
        run_id = lease.run_id
        result_text = dumps(result, "the workflow's result")
        with self._write() as c:
            if _held(c, lease) is None:
                return False
            c.execute(
                "UPDATE runs SET status = 'completed', result = %s::jsonb, error = NULL,"
                " finished_at = %s, run_at = NULL, lease_owner = NULL, lease_until = NULL,"
                f" exec_spent_us = %s, pause_requested = 0, solo = 0, {_CLEARED}"
                " WHERE run_id = %s",
                [result_text, now_us, round(exec_spent * 1e6), run_id],
            )
            _add_event(c, run_id, now_us, "completed", {})
            _wake_parent(c, run_id, now_us)
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

    def _fail(
        self,
        c: Conn,
        run: Run,
        error: dict[str, Any],
        now_us: int,
        *,
        retry_at: int | None = None,
        timeline_extra: dict[str, Any] | None = None,
    ) -> Applied:
        """Apply next_attempt(): queue the next attempt, or dead-letter the run."""
        verdict = next_attempt(run, error, from_us(now_us), retry_at=_dt(retry_at))
        error = verdict.error
        kind = error_kind(error)
        data = {"attempt": run.attempt, "kind": str(kind), "error": _first_line(error)}
        data.update(timeline_extra or {})
        events = [_event(run.run_id, now_us, kind.label, data)]
        if verdict.retry_at is not None:
            at = to_us(verdict.retry_at)
            c.execute(
                "DELETE FROM journal WHERE run_id = %s AND call_index >= (SELECT MIN(call_index)"
                " FROM journal WHERE run_id = %s AND state = 'error')",
                [run.run_id, run.run_id],
            )
            c.execute(
                "UPDATE runs SET status = 'queued', run_at = %s, attempt = attempt + 1,"
                " error = %s::jsonb, exec_spent_us = 0, lease_owner = NULL, lease_until = NULL,"
                f" solo = 0, {_CLEARED} WHERE run_id = %s",
                [at, dumps(error), run.run_id],
            )
            events.append(
                _event(
                    run.run_id,
                    now_us,
                    "retry scheduled",
                    {
                        "attempt": run.attempt + 1,
                        "at": from_us(at).isoformat(timespec="microseconds"),
                    },
                )
            )
            _add_events(c, events)
            if run.pause_requested:
                return self._park_paused(c, _load_run(c, run.run_id), RunStatus.QUEUED, at, now_us)
            return Applied(RunStatus.QUEUED, from_us(at))
        _add_events(c, events)
        self._end(c, run, RunStatus.DEAD, error, now_us)
        return Applied(RunStatus.DEAD, None)

    def _park_paused(
        self,
        c: Conn,
        run: Run,
        status: RunStatus,
        at_us: int | None,
        now_us: int,
        *,
        by: str | None = None,
    ) -> Applied:
        """Park `run` paused inside the caller's transaction: `status` and `at_us` are what
        resume gives back; meanwhile run_at is its deadline (for the deadline check only)."""
        parked = pause(status, _dt(at_us), run.deadline)
        if by is None:
            asked = c.execute(
                "SELECT data FROM timeline WHERE run_id = %s AND type = 'pause requested'"
                " ORDER BY seq DESC LIMIT 1",
                [run.run_id],
            ).fetchone()
            by = (_loads(asked[0]) or {}).get("by") if asked else None
        c.execute(
            "UPDATE runs SET status = 'paused', paused_status = %s, paused_run_at = %s,"
            " run_at = %s, pause_requested = 0, lease_owner = NULL, lease_until = NULL,"
            f" solo = 0, {_CLEARED} WHERE run_id = %s",
            [str(parked.paused_status), _us(parked.paused_run_at), _us(parked.run_at), run.run_id],
        )
        data: dict[str, Any] = {"by": by, "was": str(status)}
        if parked.paused_run_at is not None:
            data["due"] = from_us(to_us(parked.paused_run_at)).isoformat(timespec="microseconds")
        _add_event(c, run.run_id, now_us, "paused", data)
        return Applied(RunStatus.PAUSED, parked.run_at)

    def request_pause(self, run_id: str, by: str, now: datetime) -> Run:
        """Pause a run: parked at once unless running; a running run is asked to park at its
        next durable call. Pausing it again changes nothing."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.PAUSE, run_id, run.status)
            if run.status is RunStatus.RUNNING:
                if not run.pause_requested:
                    c.execute("UPDATE runs SET pause_requested = 1 WHERE run_id = %s", [run_id])
                    _add_event(c, run_id, now_us, "pause requested", {"by": by})
            else:
                self._park_paused(c, run, run.status, _us(run.run_at), now_us, by=by)
            return _load_run(c, run_id)

    def resume(self, run_id: str, by: str, now: datetime) -> Run:
        """Give a paused run back its status (due at once if its wake passed meanwhile); for a
        running run, withdraw the pause it was asked for."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.RESUME, run_id, run.status, pause_requested=run.pause_requested)
            if run.status is RunStatus.RUNNING:
                c.execute("UPDATE runs SET pause_requested = 0 WHERE run_id = %s", [run_id])
                _add_event(c, run_id, now_us, "resumed", {"by": by, "was": "pause requested"})
                return _load_run(c, run_id)
            back = resume(run, from_us(now_us))
            c.execute(
                "UPDATE runs SET status = %s, run_at = %s, paused_status = NULL,"
                " paused_run_at = NULL WHERE run_id = %s",
                [str(back.status), _us(back.run_at), run_id],
            )
            data: dict[str, Any] = {"by": by, "status": str(back.status)}
            if back.run_at is not None:
                data["due"] = back.run_at.isoformat(timespec="microseconds")
            _add_event(c, run_id, now_us, "resumed", data)
            if run.schedule is not None and back.run_at is None:
                _release_next(c, run.schedule, now_us, after=None)
            return _load_run(c, run_id)

    def pauses_requested(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these running runs an operator has asked to pause (a read, no write)."""
        if not run_ids:
            return []
        rows = self._read(
            "SELECT run_id FROM runs WHERE status = 'running' AND pause_requested = 1"
            " AND run_id = ANY(%s)",
            [list(run_ids)],
        )
        return [r[0] for r in rows]

    def _end(
        self,
        c: Conn,
        run: Run,
        status: RunStatus,
        error: dict[str, Any] | None,
        now_us: int,
    ) -> None:
        c.execute(
            "UPDATE runs SET status = %s, error = %s::jsonb, finished_at = %s, run_at = NULL,"
            " lease_owner = NULL, lease_until = NULL, pause_requested = 0, paused_status = NULL,"
            f" paused_run_at = NULL, solo = 0, {_CLEARED} WHERE run_id = %s",
            [str(status), None if error is None else dumps(error), now_us, run.run_id],
        )
        label = "dead-lettered" if status is RunStatus.DEAD else str(status)
        data = {} if error is None else {"kind": error.get("kind"), "error": _first_line(error)}
        _add_event(c, run.run_id, now_us, label, data)
        _wake_parent(c, run.run_id, now_us)
        _release_held(c, run.run_id, now_us)

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

    def add_event(self, run_id: str, type_: str, data: dict[str, Any], now: datetime) -> None:
        with self._write() as c:
            _add_event(c, run_id, to_us(now), type_, data)

    def add_events(
        self, run_ids: Sequence[str], type_: str, data: dict[str, Any], now: datetime
    ) -> None:
        now_us = to_us(now)
        with self._write() as c:
            _add_events(c, [_event(rid, now_us, type_, data) for rid in run_ids])

    # -- operator actions ----------------------------------------------------

    def send_signal(self, run_id: str, name: str, payload: Any, now: datetime) -> RunStatus:
        """Buffer a signal; a run waiting for a signal becomes due now."""
        now_us = to_us(now)
        text = dumps(payload, "the signal payload")
        with self._write() as c:
            row = c.execute(
                "SELECT status FROM runs WHERE run_id = %s FOR UPDATE", [run_id]
            ).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            status = RunStatus(row[0])
            guard(Action.SIGNAL, run_id, status)
            c.execute(
                "INSERT INTO signals (run_id, name, payload, sent_at) VALUES (%s,%s,%s::jsonb,%s)",
                [run_id, name, text, now_us],
            )
            c.execute(
                "UPDATE runs SET run_at = %s WHERE run_id = %s AND status = 'waiting'",
                [now_us, run_id],
            )
            c.execute(
                "UPDATE runs SET paused_run_at = %s WHERE run_id = %s AND status = 'paused'"
                " AND paused_status = 'waiting'",
                [now_us, run_id],
            )
            _add_event(c, run_id, now_us, "signal sent", {"name": name})
            return status

    def request_cancel(self, run_id: str, reason: str | None, by: str, now: datetime) -> RunStatus:
        """Cancel at once unless running; a running run gets the request at its next heartbeat.

        Returns the status after the call (cancelled, or running when only requested).
        """
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.CANCEL, run_id, run.status)
            data = {"by": by, **({"reason": reason} if reason else {})}
            c.execute(
                "UPDATE runs SET cancel_requested = 1, cancel_reason = %s WHERE run_id = %s",
                [reason, run_id],
            )
            if run.status is RunStatus.RUNNING:
                _add_event(c, run_id, now_us, "cancel requested", data)
                return RunStatus.RUNNING
            self._end(c, run, RunStatus.CANCELLED, cancel_error(reason, by), now_us)
            return RunStatus.CANCELLED

    def redrive(self, run_id: str, by: str, now: datetime) -> Run:
        """Put a dead (or cancelled) run back in the queue with a fresh attempt budget."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.REDRIVE, run_id, run.status)
            c.execute(
                "DELETE FROM journal WHERE run_id = %s AND call_index >= (SELECT MIN(call_index)"
                " FROM journal WHERE run_id = %s AND state IN ('error', 'retrying'))",
                [run_id, run_id],
            )
            c.execute(
                "UPDATE runs SET status = 'queued', run_at = %s, attempt = 1, deadline = NULL,"
                " exec_spent_us = 0, finished_at = NULL, cancel_requested = 0,"
                f" cancel_reason = NULL, {_CLEARED}, solo = 0, lease_owner = NULL,"
                " lease_until = NULL WHERE run_id = %s",
                [now_us, run_id],
            )
            _add_event(c, run_id, now_us, "redriven", {"by": by, "was": str(run.status)})
            return _load_run(c, run_id)

    def wake_now(self, run_id: str, by: str, now: datetime) -> Run:
        """End a sleep early (operator action); the recorded wake_at is kept for history."""
        now_us = to_us(now)
        with self._write() as c:
            run = _load_run(c, run_id)
            guard(Action.WAKE, run_id, run.status)
            c.execute(
                "UPDATE journal SET state = 'done', resolved_at = %s WHERE run_id = %s"
                " AND kind = 'sleep' AND state = 'pending'",
                [now_us, run_id],
            )
            c.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", [now_us, run_id])
            _add_event(
                c, run_id, now_us, "woken by operator", {"by": by, "was_due": _iso_us(run.run_at)}
            )
            return _load_run(c, run_id)

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
                "INSERT INTO daemons (owner, host, pid, proc_start, started_at, seen_at, info)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s::jsonb) ON CONFLICT (owner) DO UPDATE SET"
                " host = EXCLUDED.host, pid = EXCLUDED.pid, proc_start = EXCLUDED.proc_start,"
                " started_at = EXCLUDED.started_at, seen_at = EXCLUDED.seen_at,"
                " info = EXCLUDED.info",
                [owner, host, pid, proc_start, now_us, now_us, dumps(info)],
            )

    def unregister_daemon(self, owner: str, now: datetime | None = None) -> None:
        """Forget a daemon, remembering when it was last seen (`now`, else its last heartbeat)."""
        with self._write() as c:
            row = c.execute(
                "SELECT seen_at FROM daemons WHERE owner = %s FOR UPDATE", [owner]
            ).fetchone()
            if row is not None:
                seen = row[0] if now is None else max(row[0], to_us(now))
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('daemon_last_seen', %s) ON CONFLICT"
                    " (key) DO UPDATE SET value = GREATEST(CAST(meta.value AS BIGINT),"
                    " CAST(EXCLUDED.value AS BIGINT))::text",
                    [str(seen)],
                )
            c.execute("DELETE FROM daemons WHERE owner = %s", [owner])

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

    def due_ahead(self, run_id: str, run_at: datetime) -> int:
        """How many runs the claim order (run_at, then run id) puts before one due at run_at."""
        at_us = to_us(run_at)
        total = 0
        for status in ("queued", "sleeping", "waiting", "running"):
            total += int(
                self._read(
                    "SELECT COUNT(*) FROM runs WHERE status = %s AND run_at <= %s"
                    " AND (run_at < %s OR run_id < %s)",
                    [status, at_us, at_us, run_id],
                )[0][0]
            )
        return total

    def last_event(self, run_id: str, types: Sequence[str]) -> TimelineEvent | None:
        """The run's newest timeline event of one of these types."""
        rows = self._read(
            "SELECT run_id, at, type, data FROM timeline WHERE run_id = %s AND type = ANY(%s)"
            " ORDER BY seq DESC LIMIT 1",
            [run_id, list(types)],
        )
        if not rows:
            return None
        r = rows[0]
        return TimelineEvent(r[0], from_us(r[1]), r[2], _loads(r[3]) or {})

    def held_count(self, owner: str) -> int:
        return int(
            self._read(
                "SELECT COUNT(*) FROM runs WHERE status = 'running' AND lease_owner = %s", [owner]
            )[0][0]
        )

    # -- TUI support ---------------------------------------------------------

    def count_by_status_matching(
        self, workflow: str | None, search: str | None
    ) -> dict[RunStatus, int]:
        """Counts per status under the same workflow/search narrowing as list_runs."""
        where: list[str] = []
        params: list[Any] = []
        if workflow:
            where.append("workflow = %s")
            params.append(workflow)
        if search:
            clause, args = _search_clause(search)
            where.append(clause)
            params.extend(args)
        sql = "SELECT status, COUNT(*) FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        counts = {s: 0 for s in RunStatus}
        for status, n in self._read(sql + " GROUP BY status", params):
            counts[RunStatus(status)] = n
        return counts

    def pending_calls(self, run_ids: Sequence[str]) -> dict[str, tuple[CallKind, str]]:
        """The unresolved call (kind, name) each run is parked on, for a page of runs."""
        if not run_ids:
            return {}
        rows = self._read(
            "SELECT run_id, kind, name FROM journal WHERE state = 'pending' AND run_id = ANY(%s)"
            " ORDER BY call_index",
            [list(run_ids)],
        )
        return {r[0]: (CallKind(r[1]), r[2]) for r in rows}

    # -- schedules -----------------------------------------------------------

    def add_schedule(
        self, new: NewSchedule, now: datetime, *, replace: bool = False
    ) -> ScheduleRow:
        """Insert a schedule, or with `replace` redefine an existing one (see the SQLite
        store): a redefinition takes effect from `now` and never backfills."""
        now_us = to_us(now)
        exists = ScheduleError(
            f"schedule {new.name!r} already exists: use --replace to redefine it,"
            " or choose another name"
        )
        with self._write() as c:
            row = c.execute(
                "SELECT paused FROM schedules WHERE name = %s FOR UPDATE", [new.name]
            ).fetchone()
            if row is not None and not replace:
                raise exists
            if row is None:
                n = c.execute(
                    "INSERT INTO schedules (name, target, cwd, input, spec, paused, created_at,"
                    " updated_at, active_from, last_fire_at, next_fire_at, revision, source,"
                    " origin, secret_keys) VALUES (%s,%s,%s,%s::jsonb,%s,0,%s,%s,%s,NULL,%s,1,%s,"
                    "%s,%s::jsonb) ON CONFLICT (name) DO NOTHING",
                    [
                        new.name,
                        new.target,
                        new.cwd,
                        dumps(new.input, "the schedule's input"),
                        new.spec,
                        now_us,
                        now_us,
                        now_us,
                        _us(new.next_fire_at),
                        new.source,
                        new.origin,
                        _secret_keys_json(new.secret_keys),
                    ],
                ).rowcount
                if n == 0:  # added by a concurrent writer since our read
                    raise exists
            else:
                c.execute(
                    "UPDATE schedules SET target = %s, cwd = %s, input = %s::jsonb, spec = %s,"
                    " updated_at = %s, active_from = %s, next_fire_at = CASE WHEN paused = 1"
                    " THEN NULL ELSE %s END, revision = revision + 1, source = %s, origin = %s,"
                    " secret_keys = %s::jsonb WHERE name = %s",
                    [
                        new.target,
                        new.cwd,
                        dumps(new.input, "the schedule's input"),
                        new.spec,
                        now_us,
                        now_us,
                        _us(new.next_fire_at),
                        new.source,
                        new.origin,
                        _secret_keys_json(new.secret_keys),
                        new.name,
                    ],
                )
            return _schedule_row(c, new.name)

    def get_schedule(self, name: str) -> ScheduleRow:
        with self._reading() as c:
            return _schedule_row(c, name)

    def list_schedules(self) -> list[ScheduleRow]:
        rows = self._read(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules ORDER BY name")
        return [_schedule_from_row(r) for r in rows]

    def set_schedule_paused(
        self, name: str, paused: bool, next_fire_at: datetime | None, now: datetime
    ) -> ScheduleRow:
        """Pause (no fires at all) or resume, taking effect from `now`."""
        now_us = to_us(now)
        with self._write() as c:
            _schedule_row(c, name, lock=True)  # raises when it does not exist
            if paused:
                c.execute(
                    "UPDATE schedules SET paused = 1, next_fire_at = NULL, updated_at = %s,"
                    " revision = revision + 1 WHERE name = %s",
                    [now_us, name],
                )
            else:
                c.execute(
                    "UPDATE schedules SET paused = 0, next_fire_at = %s, active_from = %s,"
                    " updated_at = %s, revision = revision + 1 WHERE name = %s AND paused = 1",
                    [_us(next_fire_at), now_us, now_us, name],
                )
            return _schedule_row(c, name)

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule and its history. Its runs stay, still naming it."""
        with self._write() as c:
            n = c.execute("DELETE FROM schedules WHERE name = %s", [name]).rowcount
            if n == 0:
                raise ScheduleNotFoundError(name)

    def schedule_history(self, name: str, limit: int = 20) -> list[ScheduleEvent]:
        """The most recent `limit` decisions for a schedule, oldest first."""
        rows = self._read(
            "SELECT schedule, fire_at, action, run_id, at, detail, status FROM"
            f" (SELECT {_HISTORY_COLUMNS}, h.seq FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id WHERE h.schedule = %s"
            " ORDER BY h.seq DESC LIMIT %s) AS t ORDER BY seq",
            [name, limit],
        )
        return [_history_from_row(r) for r in rows]

    def last_schedule_events(self) -> dict[str, ScheduleEvent]:
        """Each schedule's latest history row (for `schedule ls`), with its run's status."""
        rows = self._read(
            f"SELECT {_HISTORY_COLUMNS} FROM schedule_history h"
            " LEFT JOIN runs r ON r.run_id = h.run_id"
            " WHERE h.seq IN (SELECT MAX(seq) FROM schedule_history GROUP BY schedule)"
        )
        return {r[0]: _history_from_row(r) for r in rows}

    def due_schedules(self, now: datetime) -> list[ScheduleRow]:
        rows = self._read(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE next_fire_at <= %s AND paused = 0"
            " ORDER BY next_fire_at",
            [to_us(now)],
        )
        return [_schedule_from_row(r) for r in rows]

    def next_schedule_fire(self) -> datetime | None:
        """The soonest unhandled fire over all active schedules: when the daemon must wake."""
        row = self._read(
            "SELECT MIN(next_fire_at) FROM schedules WHERE next_fire_at IS NOT NULL AND paused = 0"
        )
        return _dt(row[0][0])

    def fire_schedule(
        self,
        name: str,
        revision: int,
        plans: Sequence[FirePlan],
        *,
        overlap: str,
        last_fire_at: datetime | None,
        next_fire_at: datetime | None,
        now: datetime,
    ) -> list[FireOutcome] | None:
        """Carry out one tick's decisions for a schedule in ONE transaction (see the SQLite
        store). The schedule row is locked, so of several daemons deciding the same fire
        one applies it and the others find the revision moved: None, nothing changed."""
        now_us = to_us(now)
        with self._write() as c:
            row = c.execute(
                "SELECT revision, paused FROM schedules WHERE name = %s FOR UPDATE", [name]
            ).fetchone()
            if row is None or row[0] != revision or row[1]:
                return None
            outcomes = [_fire_plan(self, c, name, plan, overlap, now_us) for plan in plans]
            c.execute(
                "UPDATE schedules SET last_fire_at = %s, next_fire_at = %s,"
                " revision = revision + 1 WHERE name = %s",
                [_us(last_fire_at), _us(next_fire_at), name],
            )
            c.execute(
                "DELETE FROM schedule_history WHERE schedule = %s AND seq < (SELECT seq FROM"
                " schedule_history WHERE schedule = %s ORDER BY seq DESC LIMIT 1 OFFSET %s)",
                [name, name, HISTORY_KEEP - 1],
            )
            return outcomes

    def trigger_schedule(
        self, name: str, plan: FirePlan, *, overlap: str, now: datetime
    ) -> FireOutcome:
        """A manual fire: under the same overlap policy, but last/next fire do not move."""
        with self._write() as c:
            _schedule_row(c, name, lock=True)
            return _fire_plan(self, c, name, plan, overlap, to_us(now))

    def agenda_runs(self, until: datetime, limit: int) -> list[tuple[datetime, str, Run]]:
        """(when, kind, run) for every active run's next due time and deadline up to `until`,
        soonest first; overdue ones are included. Kinds: start, retry, wake, timeout, deadline.
        """
        until_us = to_us(until)
        out: list[tuple[datetime, str, Run]] = []
        rows = self._read(
            f"SELECT {_RUN_COLUMNS}, EXISTS (SELECT 1 FROM journal j WHERE j.run_id = runs.run_id"
            " AND j.state = 'retrying') FROM runs WHERE status IN ('queued', 'sleeping', 'waiting')"
            " AND run_at IS NOT NULL AND run_at <= %s ORDER BY run_at LIMIT %s",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.run_at is not None
            if run.status is RunStatus.SLEEPING:
                kind = "wake"
            elif run.status is RunStatus.WAITING:
                kind = "timeout"
            else:
                kind = "retry" if (r[-1] or run.attempt > 1) else "start"
            out.append((run.run_at, kind, run))
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE deadline IS NOT NULL AND deadline <= %s"
            " AND status IN ('queued', 'running', 'sleeping', 'waiting', 'paused')"
            " ORDER BY deadline LIMIT %s",
            [until_us, limit],
        )
        for r in rows:
            run = _run_from_row(r)
            assert run.deadline is not None
            out.append((run.deadline, "deadline", run))
        out.sort(key=lambda item: (item[0], item[2].run_id))
        return out[:limit]


def to_us_now() -> int:
    """The wall clock for the schema table's applied_at (not a transition time)."""
    from flowctl.clock import SystemClock

    return to_us(SystemClock().now())


def _has_schema(conn: Conn) -> bool:
    row = conn.execute("SELECT to_regclass('flowctl_schema') IS NOT NULL").fetchone()
    return bool(row[0])


def _search_clause(search: str) -> tuple[str, list[Any]]:
    """`ls --search`: the run id, or the input as shown, with every secret value replaced
    by "***" before matching, so a secret never matches."""
    pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    clause = (
        "(run_id LIKE %s ESCAPE '\\' OR (CASE WHEN secret_keys IS NULL THEN input ELSE"
        " input || (SELECT jsonb_object_agg(k, to_jsonb('***'::text))"
        " FROM jsonb_array_elements_text(runs.secret_keys) AS k) END)::text LIKE %s ESCAPE '\\')"
    )
    return clause, [pattern, pattern]


def _load_run(c: Conn, run_id: str, *, lock: bool = True) -> Run:
    """The run as it is inside this transaction; locked to its end unless `lock` is False,
    so the transition decided from it cannot race another writer's."""
    sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s" + (" FOR UPDATE" if lock else "")
    row = c.execute(sql, [run_id]).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    return _run_from_row(row)


def _held(c: Conn, lease: Lease, columns: str = "1") -> Sequence[Any] | None:
    """THE fence check, made first by every write a lease holder makes: the run's row
    (`columns` of it) if it is still running under this lease's fence and owner, else None.

    The row is locked (FOR UPDATE) to the end of the transaction, so no claim can move the
    fence between this check and the writes after it. `columns` is a constant of the
    caller's, never input.
    """
    row: Sequence[Any] | None = c.execute(
        f"SELECT {columns} FROM runs WHERE run_id = %s AND fence = %s AND lease_owner = %s"
        " AND status = 'running' FOR UPDATE",
        [lease.run_id, lease.fence, lease.owner],
    ).fetchone()
    return row


def _iso_us(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat(timespec="microseconds")


def _first_line(error: dict[str, Any]) -> str:
    msg = str(error.get("message") or "")
    first = msg.splitlines()[0] if msg else ""
    return f"{error.get('type', 'Error')}: {first}" if first else str(error.get("type", "Error"))


def _suspect_data(run: Run, verdict: ClaimVerdict) -> dict[str, Any]:
    note = (
        "its worker died while running it alone: the crash is charged to it"
        if verdict.charged
        else "its worker died with other runs in flight: it runs alone next, to tell"
    )
    return {"from": run.lease_owner, "crashes": verdict.crashes, "note": note}


def _wake_parent(c: Conn, run_id: str, now_us: int) -> None:
    """A child run ended: its waiting parent becomes due (when resumed, if it is paused)."""
    c.execute(
        "UPDATE runs SET run_at = %s WHERE status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = %s)",
        [now_us, run_id],
    )
    c.execute(
        "UPDATE runs SET paused_run_at = %s WHERE status = 'paused'"
        " AND paused_status = 'waiting' AND run_id ="
        " (SELECT parent_run_id FROM runs WHERE run_id = %s)",
        [now_us, run_id],
    )


# ---------------------------------------------------------------------------
# Schedules: rows and the fire transaction's pieces

_SCHEDULE_COLUMNS = (
    "name, target, cwd, input, spec, paused, created_at, updated_at, active_from, last_fire_at,"
    " next_fire_at, revision, source, origin, secret_keys"
)
_HISTORY_COLUMNS = "h.schedule, h.fire_at, h.action, h.run_id, h.at, h.detail, r.status"
_ACTIVE_SQL = "('queued', 'running', 'sleeping', 'waiting', 'paused')"
# A run of a schedule that is active and not held behind another (overlap=queue).
_RUNNING_OF_SCHEDULE = (
    f"schedule = %s AND status IN {_ACTIVE_SQL} AND NOT (status = 'queued' AND run_at IS NULL)"
    " AND NOT (status = 'paused' AND paused_status = 'queued' AND paused_run_at IS NULL)"
)


def _schedule_from_row(r: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(
        name=r[0],
        target=r[1],
        cwd=r[2],
        input=json.loads(r[3]),
        spec=r[4],
        paused=bool(r[5]),
        created_at=from_us(r[6]),
        updated_at=from_us(r[7]),
        active_from=from_us(r[8]),
        last_fire_at=_dt(r[9]),
        next_fire_at=_dt(r[10]),
        revision=r[11],
        source=r[12],
        origin=r[13],
        secret_keys=tuple(_loads(r[14]) or ()),
    )


def _secret_keys_json(keys: tuple[str, ...]) -> str | None:
    return dumps(sorted(keys)) if keys else None


def _schedule_row(c: Conn, name: str, *, lock: bool = False) -> ScheduleRow:
    sql = f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE name = %s" + (
        " FOR UPDATE" if lock else ""
    )
    row = c.execute(sql, [name]).fetchone()
    if row is None:
        raise ScheduleNotFoundError(name)
    return _schedule_from_row(row)


def _history_from_row(r: Sequence[Any]) -> ScheduleEvent:
    return ScheduleEvent(
        schedule=r[0],
        fire_at=_dt(r[1]),
        action=r[2],
        run_id=r[3],
        at=from_us(r[4]),
        detail=r[5],
        run_status=None if r[6] is None else RunStatus(r[6]),
    )


def _add_history(
    c: Conn,
    name: str,
    fire_at: datetime | None,
    action: str,
    run_id: str | None,
    now_us: int,
    detail: str | None,
) -> None:
    c.execute(
        "INSERT INTO schedule_history (schedule, fire_at, action, run_id, at, detail)"
        " VALUES (%s,%s,%s,%s,%s,%s)",
        [name, _us(fire_at), action, run_id, now_us, detail],
    )


def _fire_plan(
    store: PostgresStore, c: Conn, name: str, plan: FirePlan, overlap: str, now_us: int
) -> FireOutcome:
    """Apply one fire decision inside the caller's transaction, under the overlap policy
    (see the SQLite store's _fire_plan)."""
    if plan.run is None:
        _add_history(c, name, plan.fire_at, plan.action, None, now_us, plan.detail)
        return FireOutcome(plan.fire_at, plan.action, None, False, plan.detail)
    new = plan.run
    if new.key is not None:
        row = c.execute("SELECT run_id FROM runs WHERE key = %s", [new.key]).fetchone()
        if row is not None:
            return FireOutcome(plan.fire_at, "duplicate", row[0], False, "already fired")
    if overlap == "queue":
        _release_next(c, name, now_us, after=None)
    active = c.execute(
        f"SELECT run_id, status FROM runs WHERE {_RUNNING_OF_SCHEDULE}"
        " ORDER BY created_at DESC LIMIT 1",
        [name],
    ).fetchone()
    detail = plan.detail
    if active is not None and overlap == "skip":
        why = f"run {active[0]} is still {active[1]}"
        if plan.action == "manual":
            why = f"manual trigger: {why}"
        _add_history(c, name, plan.fire_at, "skipped-overlap", None, now_us, why)
        return FireOutcome(plan.fire_at, "skipped-overlap", None, False, why)
    run, created = store._insert_run(c, new, now_us)
    action = plan.action
    if active is not None and overlap == "queue":
        c.execute("UPDATE runs SET run_at = NULL WHERE run_id = %s", [run.run_id])
        _add_event(c, run.run_id, now_us, "held", {"schedule": name, "behind": active[0]})
        held = f"held until run {active[0]} ends"
        detail = f"{detail}; {held}" if detail else held
        if action == "fired":
            action = "queued-overlap"
    _add_history(c, name, plan.fire_at, action, run.run_id, now_us, detail)
    return FireOutcome(plan.fire_at, action, run.run_id, created, detail)


def _release_next(c: Conn, schedule: str, now_us: int, after: str | None) -> None:
    """Make the oldest held run of `schedule` due now, unless one of its runs still runs."""
    if c.execute(f"SELECT 1 FROM runs WHERE {_RUNNING_OF_SCHEDULE} LIMIT 1", [schedule]).fetchone():
        return
    row = c.execute(
        "SELECT run_id FROM runs WHERE schedule = %s AND status = 'queued' AND run_at IS NULL"
        " ORDER BY scheduled_at, created_at, run_id LIMIT 1 FOR UPDATE",
        [schedule],
    ).fetchone()
    if row is None:
        return
    c.execute("UPDATE runs SET run_at = %s WHERE run_id = %s", [now_us, row[0]])
    data = {"schedule": schedule, **({"after": after} if after else {})}
    _add_event(c, row[0], now_us, "released", data)


def _release_held(c: Conn, run_id: str, now_us: int) -> None:
    """A run ended: if it belongs to a schedule with held runs (overlap=queue), start the next,
    in the same transaction as the terminal transition."""
    row = c.execute("SELECT schedule FROM runs WHERE run_id = %s", [run_id]).fetchone()
    if row is not None and row[0] is not None:
        _release_next(c, row[0], now_us, after=run_id)
