"""The Store protocol: every operation the engine, daemon, scheduler, ops, client, TUI and
CLI call, each with the promise it keeps (see flowctl.store for the rules every backend
keeps)."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from flowctl.store.schedule_store import ScheduleStore

if TYPE_CHECKING:
    from flowctl.flow.tokens import LimitSpec
    from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus, TimelineEvent
    from flowctl.store.records import (
        Claim,
        DaemonInfo,
        HeartbeatReply,
        Interrupts,
        Lease,
        LimitState,
        LimitTake,
        MetricsSnapshot,
        NewRun,
        OutputChunk,
        PrunedRun,
    )
    from flowctl.store.rekey import Sealed
    from flowctl.store.resting import Resumed
    from flowctl.store.round import WriteRound
    from flowctl.store.values import Values
    from flowctl.transitions import Applied


class RunListing(Protocol):
    """What reading the run list needs (`flowctl ls`, the TUI's lists, flowctl.ops.listing):
    a Store has all of it; `open_run_list` may open just this (SQLite: without the rest of
    the store, so `flowctl ls` starts without compiling it)."""

    # -- the handle ------------------------------------------------------------

    @property
    def path(self) -> str:
        """Where the database is, as shown to the user (a file path, or a URL without password)."""
        ...

    @property
    def read_only(self) -> bool:
        """True when opened for reading only: every write raises ReadOnlyDatabaseError."""
        ...

    def close(self) -> None:
        """Release the connection(s); no call may follow."""
        ...

    # -- the run list ----------------------------------------------------------

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
        """A page of runs narrowed by status, workflow, creation time and `search` (run id or
        input with secrets masked: a secret value never matches), in `order`
        (created_desc | run_at | finished_desc, which lists finished runs only); ties in the
        order go by insertion.

        Bounded at any size: each status is read from an index in order (several are
        merged), and `search` looks only at the newest 5,000 runs plus the run whose id
        or key is exactly `search` (a substring of the input cannot be indexed)."""
        ...

    def count_by_status(self, workflow: str | None = None) -> dict[RunStatus, int]:
        """How many runs have each status (every status present, 0 when none). O(1) in the
        number of runs: a backend keeps per-(workflow, status) counts in the same
        transaction as every insert, delete and status change (SQLite: run_counts)."""
        ...

    def count_by_status_matching(
        self, workflow: str | None, search: str | None
    ) -> dict[RunStatus, int]:
        """count_by_status under the same workflow/search narrowing as list_runs (a search
        counts within the same bounded window list_runs searches)."""
        ...

    def workflows_seen(self) -> list[str]:
        """Every workflow name any run has, sorted (from the counts, not a scan)."""
        ...

    def pending_calls(self, run_ids: Sequence[str]) -> dict[str, tuple[CallKind, str]]:
        """For each of these runs parked on an unresolved call, that call's (kind, name)."""
        ...

    def last_event(self, run_id: str, types: Sequence[str]) -> TimelineEvent | None:
        """The run's newest timeline event of one of these types."""
        ...


class Store(RunListing, ScheduleStore, Protocol):
    """A flowctl database. Thread-safe: any thread may call any operation. Its handle
    (path, read_only, close) and run-list reads are RunListing's."""

    # -- the handle ------------------------------------------------------------

    def data_version(self) -> int:
        """Changes whenever a write not made inside own_writes() commits (another process's,
        or another thread's); cheap enough to poll."""
        ...

    def own_writes(self) -> AbstractContextManager[None]:
        """This thread's writes in the block leave data_version() alone (the daemon keeps
        its wheel true from what they return)."""
        ...

    def leave_untold(self, statuses: Collection[str]) -> None:
        """Runs that end with one of these statuses put nothing in the notification outbox
        unless they have a notify override of their own: no channel of this process's
        [notify] wants them (notify.unwanted_endings), so a notifier would only drop the
        rows. Applied where a run completes, the ending nearly every run has; the rarer
        endings (dead, cancelled) are recorded still, and the notifier drops those."""
        ...

    def set_group_commit(self, on: bool) -> None:
        """Let concurrent writers share one commit (fewer fsyncs); each write returns once
        durable, and a failed writer's changes alone are undone."""
        ...

    def file_replaced(self) -> str | None:
        """None while the database opened is at `path`; else one line (a daemon stops)."""
        ...

    def file_identity(self) -> tuple[int, int] | None:
        """(device, inode) of the SQLite file opened (a worker checks it has the same)."""
        ...

    @property
    def location(self) -> str:
        """What another process opens to reach this same database: a SQLite file's absolute
        path, or the PostgreSQL URL with its password. Never shown to a user (`path` is)."""
        ...

    @property
    def durability(self) -> str:
        """'full' or 'normal', as the store was opened."""
        ...

    @property
    def refresh_interval(self) -> float | None:
        """Seconds after which a daemon re-reads what is due though data_version() did not
        move (PostgreSQL: notices can be lost); None where it is never wrong (SQLite)."""
        ...

    def take_turns(self) -> None:
        """Take turns with other processes' write transactions, so each writes while the
        others run Python (SQLite: a lock file; elsewhere nothing)."""
        ...

    def writers(self, n: int) -> None:
        """`n` threads of this process write at once: a connection for each (a server's)."""
        ...

    def write_round(self, wait: Callable[[], None]) -> AbstractContextManager[WriteRound]:
        """Open a write round on this thread for the block: every write made on this thread
        is queued in the round and returns once the round's `commit()` has made it
        durable; `wait` parks the writer until then (the batch runner's; see
        flowctl.store.round). One transaction and one COMMIT per round."""
        ...

    def free_bytes(self) -> int | None:
        """Bytes free on the filesystem holding the database, for the daemon's reserve (it
        starts no new run below it); None where the store cannot tell (a server)."""
        ...

    # -- runs: create and read -------------------------------------------------

    def create_run(self, new: NewRun, now: datetime) -> tuple[Run, bool]:
        """Insert a queued run due at new.run_at (or now), clamped to its deadline; with an
        idempotency key already used, return that run and False instead."""
        ...

    def create_runs(self, news: Sequence[NewRun], now: datetime) -> list[tuple[Run, bool]]:
        """create_run for each of `news`, in order, in one transaction: all or none. A key
        used before, or earlier in `news`, gives that run and False (issue 14)."""
        ...

    def fork_run(
        self, new: NewRun, origin: str, upto: int, now: datetime, *, by: str | None = None
    ) -> Run:
        """Create `new` holding run `origin`'s journal before call index `upto` and the
        version markers recorded up to the last copied entry, all in one transaction."""
        ...

    def get_run(self, run_id: str) -> Run:
        """The run with this id; RunNotFoundError when there is none."""
        ...

    def find_run(self, ref: str) -> Run:
        """The run with this id or unique id prefix; RunNotFoundError when none or ambiguous."""
        ...

    def get_run_by_key(self, key: str) -> Run | None:
        """The run created with this idempotency key, if any."""
        ...

    def run_source(self, run_id: str) -> tuple[str | None, str | None]:
        """The workflow source text and its hash recorded when the run started (YAML runs).
        The text is stored once per hash (SQLite: the sources table), not per run."""
        ...

    def children_of(self, run_id: str) -> list[Run]:
        """Every child run `run_id` started (ctx.child, ctx.children), oldest first."""
        ...

    def journal(self, run_id: str) -> dict[int, JournalEntry]:
        """The run's journal by call index, as last recorded."""
        ...

    def versions(self, run_id: str) -> dict[str, int]:
        """The version markers (ctx.version) the run recorded, by change id."""
        ...

    def versions_detail(self, run_id: str) -> list[tuple[str, int, datetime]]:
        """(change id, version, recorded at) for each marker, oldest first."""
        ...

    def timeline(self, run_id: str, limit: int | None = None) -> list[TimelineEvent]:
        """The run's timeline in the order written; with `limit`, the newest `limit` of it."""
        ...

    def journal_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[JournalEntry], int]:
        """One page of the run's checkpoints and how many it has in all: the newest `limit`
        (every one when None) after the `skip` newest, in call-index order. Read by the
        journal's key, LIMIT and OFFSET, so a 100,000-step run costs one page, not a load."""
        ...

    def timeline_page(
        self, run_id: str, limit: int | None, skip: int = 0
    ) -> tuple[list[TimelineEvent], int]:
        """One page of the run's timeline and how many events it has in all: the newest
        `limit` (every one when None) after the `skip` newest, in the order written."""
        ...

    def last_entry(self, run_id: str, states: Sequence[EntryState]) -> JournalEntry | None:
        """The run's checkpoint with the highest call index in one of these states."""
        ...

    def pending_signals(self, run_id: str) -> list[tuple[str, Any, datetime]]:
        """Signals sent to the run and not yet consumed: (name, payload, sent at), oldest first."""
        ...

    def published(self, run_id: str) -> dict[str, tuple[Any, datetime]]:
        """The values the run published (ctx.publish), by key, with when each was set."""
        ...

    def recent_wakes(self, since: datetime, limit: int = 10_000) -> list[float]:
        """Lateness in seconds of timer wakes recorded since `since`, newest first."""
        ...

    def due_ahead(self, run_id: str, run_at: datetime) -> int:
        """How many claimable runs the claim order (run_at, then run id) puts before this one."""
        ...

    def agenda_runs(self, until: datetime, limit: int) -> list[tuple[datetime, str, Run]]:
        """(when, kind, run) for every active run's next due time and deadline up to `until`,
        overdue included, soonest first; kind is start, retry, wake, timeout or deadline."""
        ...

    # -- operator transitions --------------------------------------------------

    def send_signal(self, run_id: str, name: str, payload: Any, now: datetime) -> RunStatus:
        """Buffer a signal (a status transitions.guard refuses raises InvalidStateError); a
        run waiting for one becomes due now. Returns the run's status."""
        ...

    def request_cancel(self, run_id: str, reason: str | None, by: str, now: datetime) -> RunStatus:
        """Cancel at once unless running; a running run is asked, and told at its next
        heartbeat. Returns cancelled, or running when only requested."""
        ...

    def redrive(self, run_id: str, by: str, now: datetime, *, deadline: datetime | None) -> Run:
        """Queue a dead or cancelled run again, due now, with a fresh attempt budget and its
        journal kept up to the first step error; `deadline` is the one it runs under (None:
        none), which the caller decides (flowctl.ops keeps a run's own, refuses a passed one)."""
        ...

    def wake_now(self, run_id: str, by: str, now: datetime) -> Run:
        """End a sleep early: its pending sleeps resolve now; the recorded wake_at is kept."""
        ...

    def request_pause(self, run_id: str, by: str, now: datetime) -> Run:
        """Park a run paused at once, or, running, at its next durable call (nothing is
        interrupted); pausing a paused run changes nothing."""
        ...

    def resume(self, run_id: str, by: str, now: datetime) -> Run:
        """Give a paused run back its status, due at its wake or now if that passed; for a
        running run, withdraw the pause it was asked for."""
        ...

    # -- the daemon: claims and leases -----------------------------------------

    def next_due(self, limit: int) -> list[tuple[int, str]]:
        """The soonest (run_at in UTC microseconds, run_id) over every claimable status."""
        ...

    def runs_due_between(self, lo: datetime, hi: datetime, *, limit: int) -> list[str]:
        """Ids of claimable runs whose run_at lies in [lo, hi] (passed over by a clock jump)."""
        ...

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
        """Claim up to `limit` due runs (or just `run_id`) in one transaction, soonest first,
        each with a lease to `lease_until` and a new, higher fence; runs claim_verdict ends
        (deadline, cancelled, poison, pause) are ended instead. Returns (claims, ended ids)."""
        ...

    def claim_suspect(
        self, owner: str, now: datetime, lease_until: datetime
    ) -> tuple[Claim | None, list[str]]:
        """Claim one due suspect (its worker died under it) for a claimer that runs it alone,
        fewest crashes charged first. Returns (claim or None, ids of runs ended)."""
        ...

    def suspect_due(self, now: datetime) -> bool:
        """Whether a suspect is due (a read): it waits for a claimer that runs it alone."""
        ...

    def suspects_due(self, now: datetime, limit: int, spread: bytes = b"") -> list[str]:
        """Ids of due suspects (lapsed under an owner, or suspects already; a run a drain
        released is none), fewest crashes charged first, then due order or the order of
        the daemon whose `spread` it is (transitions.suspect_order) (a read)."""
        ...

    def suspect_counts(self, now: datetime) -> tuple[int, int]:
        """(suspects running alone now, due suspects waiting to run alone) (a read)."""
        ...

    def charge_crash(self, lease: Lease, now: datetime) -> int | None:
        """The isolated worker holding `lease` died while its daemon lived: charge the crash
        to the run and make it due now. The crashes charged, or None if not held."""
        ...

    def heartbeat(
        self,
        owner: str,
        held: Sequence[tuple[Lease, float]],
        lease_until: datetime,
        now: datetime,
        steps: Mapping[str, tuple[str, datetime] | None] | None = None,
    ) -> list[HeartbeatReply]:
        """For each (lease, execution seconds spent) still held: extend it to `lease_until`
        and persist the time spent and current step (`steps`: run id -> (label, when it
        began), None between steps); reply what its handler must be told
        (lost, cancel, pause, deadline, budget). Marks the daemon `owner` seen."""
        ...

    def interrupts_requested(self, run_ids: Sequence[str]) -> Interrupts:
        """Which of these running runs an operator asked to cancel or to pause (one read)."""
        ...

    def running_owners(self) -> list[str]:
        """The owners holding a lease on a running run."""
        ...

    def expire_owner(self, owner: str, now: datetime) -> int:
        """A provably dead owner: its leases lapse now (due for reclaim) and it is forgotten.
        Returns how many leases lapsed."""
        ...

    def release_runs(self, leases: Sequence[Lease], now: datetime, reason: str) -> int:
        """A stopping daemon hands back runs it still holds: each due now for another
        worker, unless its lease was lost meanwhile. Returns how many were released."""
        ...

    def held_count(self, owner: str) -> int:
        """How many running runs `owner` holds a lease on."""
        ...

    # -- fenced writes by the worker holding a lease --------------------------

    def record_entry(
        self,
        lease: Lease,
        entry: JournalEntry,
        now: datetime,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
        suspicion: bool = True,
    ) -> bool:
        """Journal one call's outcome at its index (replacing what was there), and the
        timeline `event`; progress clears the run's suspicion. False: the lease is lost.

        `suspicion=False` says the run has none to clear (its claim showed reclaims and
        suspect at zero, or an earlier write of this attempt cleared them): the store may
        skip that update."""
        ...

    def consume_signal(
        self, lease: Lease, name: str, call_index: int, now: datetime
    ) -> tuple[bool, Any, bool]:
        """Take the oldest buffered signal `name` and journal it at `call_index`.
        Returns (lease held, payload, found)."""
        ...

    def record_version(self, lease: Lease, change_id: str, version: int, now: datetime) -> bool:
        """Record a version marker unless one is recorded already. False: the lease is lost."""
        ...

    def publish(self, lease: Lease, key: str, value: Any, now: datetime) -> bool:
        """Set a value the run shows operators (last write wins). False: the lease is lost."""
        ...

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
        """Park a held run (sleeping, waiting, queued for a step retry, or paused) with its
        pending call journaled and its lease cleared; run_at is clamped to the deadline, and
        is now when what it waits for came while it ran (an awaited signal is buffered, an
        awaited child has ended: see `awaited_signal`, `awaited_child`). Returns what it
        applied; None: lost."""
        ...

    def rest_run(
        self,
        lease: Lease,
        entry: JournalEntry,
        until: datetime,
        now: datetime,
        exec_spent: float,
        event: tuple[str, dict[str, Any]],
        *,
        checkpoint: JournalEntry | None = None,
        journaled: bool = False,
    ) -> bool:
        """Let a held run rest until `until` (flowctl.store.resting). False: not written."""
        ...

    def resume_run(
        self,
        lease: Lease,
        parked: RunStatus,
        scheduled: datetime,
        now: datetime,
        lease_until: datetime,
        attempt: int,
        *,
        keep_from: datetime | None = None,
    ) -> Resumed | None:
        """Take back a run let rest under `lease`, with the lease it let go if that ends at
        or after `keep_from`, else a new one; None: it moved on (nothing written)."""
        ...

    def release_rest(self, lease: Lease, now: datetime) -> bool:
        """A resting run whose daemon stops: due now to any. False: it moved on."""
        ...

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
        """Mark a held run completed with `result`, waking a waiting parent and releasing a
        held run of its schedule. False: the lease is lost (and nothing is written).

        `entry`: the last call's checkpoint, journaled in the same transaction (the handler
        returned after it, so no step ran between the two). `links`: the run's
        (parent_run_id, schedule) as its claim read them (neither changes while the run is
        held); None: the store reads them under the lease."""
        ...

    def fail_attempt(
        self,
        lease: Lease,
        error: dict[str, Any],
        now: datetime,
        exec_spent: float,
        retry_at: datetime | None,
    ) -> Applied | None:
        """End the attempt with `error`: the next attempt queued as next_attempt decides (or
        at `retry_at`), else the run dead-lettered. Returns what it applied; None: lost."""
        ...

    def end_run(
        self,
        lease: Lease,
        status: RunStatus,
        error: dict[str, Any] | None,
        now: datetime,
        exec_spent: float,
    ) -> bool:
        """End a held run terminally (cancelled, or dead without retry). False: lost."""
        ...

    def add_event(self, run_id: str, type_: str, data: dict[str, Any], now: datetime) -> None:
        """Append one timeline event (a note: it changes no state)."""
        ...

    def add_events(
        self, run_ids: Sequence[str], type_: str, data: dict[str, Any], now: datetime
    ) -> None:
        """Append the same timeline event to each of these runs, in one transaction."""
        ...

    # -- the daemons registry --------------------------------------------------

    def register_daemon(
        self,
        owner: str,
        host: str,
        pid: int,
        proc_start: str | None,
        now: datetime,
        info: dict[str, Any],
    ) -> None:
        """Record a live daemon (replacing an earlier record of the same owner)."""
        ...

    def unregister_daemon(self, owner: str, now: datetime | None = None) -> None:
        """Forget a daemon, remembering when a daemon was last seen (`now`, else its last
        heartbeat) for daemon_last_seen."""
        ...

    def daemons(self) -> list[DaemonInfo]:
        """The registered daemons, oldest first."""
        ...

    def daemon_last_seen(self) -> datetime | None:
        """When a daemon was last seen on this database (a stopped one's last moment, or the
        latest heartbeat of one registered); None if never."""
        ...

    # -- care of a long-lived database (issue 15) --------------------------------

    def append_output(
        self,
        run_id: str,
        call_index: int,
        step: str,
        at: datetime,
        chunks: Sequence[tuple[str, str]],
    ) -> None:
        """Store (stream, text) chunks a step printed, in order, in one transaction; not
        fenced (output is a record of what ran, even late); nothing for a run that is gone."""
        ...

    def output(
        self, run_id: str, *, after: int = 0, step: str | None = None, limit: int = 1000
    ) -> list[OutputChunk]:
        """The run's output chunks with seq above `after` (of `step` only, if given), in the
        order written, at most `limit`."""
        ...

    def output_tail(self, run_id: str, chunks: int = 20) -> list[OutputChunk]:
        """The last `chunks` chunks of the run's highest call index that printed, in order."""
        ...

    def prunable_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        """Finished runs of these statuses (completed, cancelled, dead only) that finished
        before `before`, oldest first, at most `limit` (a read)."""
        ...

    def prune_runs(
        self, statuses: Sequence[RunStatus], before: datetime, limit: int
    ) -> list[PrunedRun]:
        """Delete, in one transaction, up to `limit` of prunable_runs with everything they
        recorded (journal, versions, timeline, signals, published, output); the status is
        re-checked by the delete, so a run that is not finished is never deleted."""
        ...

    def integrity_check(self) -> str:
        """The database checked whole: "ok", or what is wrong (SQLite's PRAGMA
        integrity_check)."""
        ...

    def vacuum(self) -> tuple[int, int]:
        """Give the space of deleted rows back: (bytes before, bytes after)."""
        ...

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write a consistent copy of the database to `dest` while others write, checked
        whole (integrity check) before it appears at `dest`; refuses an existing `dest`
        unless `overwrite`; on failure `dest` is untouched."""
        ...

    # -- encryption at rest (flowctl.store.values, flowctl.store.rekey) ----------

    values: Values  # seals what is written, opens what is read

    def check_keys(self) -> None:
        """Refuse (KeyNeededError, one line naming the key) a database sealed with a key
        this store does not hold; adopt a rotation's new key; record a first key."""
        ...

    def reload_keys(self) -> bool:
        """Adopt the new key a rotation is handing over (a daemon calls it when another
        process wrote); whether it did."""
        ...

    def begin_rotation(self, secret: bytes) -> None:
        """Hand the new key `secret` to the processes holding the current one, sealed with
        it (meta key_next), and seal with it from now on."""
        ...

    def reseal_batch(
        self, which: Sealed, after: tuple[Any, ...] | None, limit: int
    ) -> tuple[tuple[Any, ...] | None, int]:
        """Re-seal with the writing key up to `limit` values of one column after row
        `after`, each only if unchanged since read: (next `after` or None, rows changed)."""
        ...

    def end_rotation(self) -> None:
        """Record the writing key as the database's key; drop the hand-over."""
        ...

    # -- metrics ---------------------------------------------------------------

    def metrics_snapshot(
        self, lateness_bounds: Sequence[float], step_bounds: Sequence[float]
    ) -> MetricsSnapshot:
        """Runs by status and workflow, wake-lateness and step-duration histograms (bounds in
        seconds), claim and reclaim counts, daemons with leases held, outbox rows by state,
        all read in one transaction."""
        ...

    # -- named limits (issue 37) -------------------------------------------------

    def set_limit(
        self, name: str, concurrency: int | None, rate: tuple[int, int] | None, now: datetime
    ) -> LimitSpec:
        """Create or change the named limit (`rate`: N starts per period in µs)."""
        ...

    def remove_limit(self, name: str) -> bool:
        """Remove a limit with its holds and starts; False when there was none."""
        ...

    def limit_names(self) -> list[str]:
        """The names of the defined limits, sorted."""
        ...

    def limit_states(self, now: datetime, name: str | None = None) -> list[LimitState]:
        """Each limit (or the one named) with its live holders, its starts in the rate's
        window and when the next start may come, read in one snapshot."""
        ...

    def key_holders(self, key: str) -> list[tuple[str, datetime | None]]:
        """The runs running under concurrency key `key`, with when each was last claimed."""
        ...

    def collapsed_starts(self, run_id: str) -> int:
        """How many starts of a debounced workflow were collapsed into the run."""
        ...

    def take_limit(self, lease: Lease, name: str, call_index: int, now: datetime) -> LimitTake:
        """Take the limit for a step's start, with the fence check, in one transaction:
        taken, not yet (the run marked waiting, and until when), unknown, or lost."""
        ...

    def release_limit(self, lease: Lease, name: str, call_index: int, now: datetime) -> None:
        """Give back the hold of the step at `call_index`, making the first waiter due."""
        ...
