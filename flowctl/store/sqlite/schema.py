"""The SQLite schema: its migrations and the version they reach (flowctl.store.sqlite.migrating
applies them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

from flowctl.store.mapping import DEFINITION_COLUMNS, PLAIN_CREATED

APPLICATION_ID = 0x464C4F57  # "FLOW" in the SQLite header: the flowctl schema marker


def _migration_1(db: sqlite_utils.Database) -> None:
    db.execute(
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            target TEXT NOT NULL,
            kind TEXT NOT NULL,
            source TEXT,
            source_hash TEXT,
            source_path TEXT,
            cwd TEXT,
            input TEXT NOT NULL,
            status TEXT NOT NULL,
            run_at INTEGER,
            created_at INTEGER NOT NULL,
            started_at INTEGER,
            finished_at INTEGER,
            attempt INTEGER NOT NULL DEFAULT 1,
            max_attempts INTEGER NOT NULL DEFAULT 3,
            backoff TEXT,
            deadline INTEGER,
            timeout_us INTEGER,
            exec_spent_us INTEGER NOT NULL DEFAULT 0,
            result TEXT,
            error TEXT,
            lease_owner TEXT,
            lease_until INTEGER,
            fence INTEGER NOT NULL DEFAULT 0,
            reclaims INTEGER NOT NULL DEFAULT 0,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            cancel_reason TEXT,
            key TEXT UNIQUE,
            parent_run_id TEXT,
            schedule TEXT,
            scheduled_at INTEGER
        ) STRICT
        """
    )
    # run_at is "when is this run next due": start/retry time when queued, wake time
    # when sleeping, signal timeout when waiting, lease expiry when running.
    db.execute("CREATE INDEX runs_due ON runs(status, run_at)")
    db.execute("CREATE INDEX runs_created ON runs(created_at)")
    db.execute("CREATE INDEX runs_workflow ON runs(workflow, created_at)")
    db.execute("CREATE INDEX runs_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL")
    db.execute(
        """
        CREATE TABLE journal (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            call_index INTEGER NOT NULL,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            state TEXT NOT NULL,
            value TEXT,
            wake_at INTEGER,
            recorded_at INTEGER NOT NULL,
            resolved_at INTEGER,
            tries INTEGER NOT NULL DEFAULT 0,
            duration_us INTEGER,
            PRIMARY KEY (run_id, call_index)
        ) STRICT, WITHOUT ROWID
        """
    )
    db.execute(
        """
        CREATE TABLE versions (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            change_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            recorded_at INTEGER NOT NULL,
            PRIMARY KEY (run_id, change_id)
        ) STRICT, WITHOUT ROWID
        """
    )
    db.execute(
        """
        CREATE TABLE timeline (
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            at INTEGER NOT NULL,
            type TEXT NOT NULL,
            data TEXT
        ) STRICT
        """
    )
    db.execute("CREATE INDEX timeline_run ON timeline(run_id, seq)")
    db.execute("CREATE INDEX timeline_type_at ON timeline(type, at)")
    db.execute(
        """
        CREATE TABLE signals (
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            payload TEXT,
            sent_at INTEGER NOT NULL,
            consumed_at INTEGER,
            call_index INTEGER
        ) STRICT
        """
    )
    db.execute("CREATE INDEX signals_run ON signals(run_id, name, consumed_at)")
    db.execute(
        """
        CREATE TABLE daemons (
            owner TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            proc_start TEXT,
            started_at INTEGER NOT NULL,
            seen_at INTEGER NOT NULL,
            info TEXT
        ) STRICT
        """
    )


def _migration_2(db: sqlite_utils.Database) -> None:
    """Schedules (issue 7): definitions, fire bookkeeping, and a history of every decision.

    `spec` is ScheduleSpec.to_json(): the store keeps it opaque, the calendar lives in
    schedule.py. `last_fire_at` is the latest scheduled fire time already handled (fired or
    skipped), `next_fire_at` the soonest one not yet handled (NULL while paused): the daemon
    sleeps until MIN(next_fire_at). `active_from` is when the current definition took effect
    (creation, --replace, resume): fires at or before it are never considered, so a resume or
    a redefinition never backfills. `revision` changes with every write, so a fire decided on
    a stale read (another daemon fired, an operator paused) changes nothing.
    """
    db.execute(
        """
        CREATE TABLE schedules (
            name TEXT PRIMARY KEY,
            target TEXT NOT NULL,
            cwd TEXT,
            input TEXT NOT NULL,
            spec TEXT NOT NULL,
            paused INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            active_from INTEGER NOT NULL,
            last_fire_at INTEGER,
            next_fire_at INTEGER,
            revision INTEGER NOT NULL DEFAULT 1,
            source TEXT NOT NULL CHECK (source IN ('cli', 'yaml', 'toml')),
            origin TEXT
        ) STRICT
        """
    )
    db.execute(
        "CREATE INDEX schedules_next ON schedules(next_fire_at) WHERE next_fire_at IS NOT NULL"
    )
    db.execute(
        """
        CREATE TABLE schedule_history (
            seq INTEGER PRIMARY KEY,
            schedule TEXT NOT NULL REFERENCES schedules(name) ON DELETE CASCADE,
            fire_at INTEGER,
            action TEXT NOT NULL CHECK (action IN ('fired', 'skipped-missed', 'skipped-overlap',
                'queued-overlap', 'manual', 'error')),
            run_id TEXT,
            at INTEGER NOT NULL,
            detail TEXT
        ) STRICT
        """
    )
    db.execute("CREATE INDEX schedule_history_name ON schedule_history(schedule, seq)")
    # Overlap checks ("is a run of this schedule still active?") and agenda deadlines.
    db.execute("CREATE INDEX runs_schedule ON runs(schedule, status) WHERE schedule IS NOT NULL")
    db.execute("CREATE INDEX runs_deadline ON runs(deadline) WHERE deadline IS NOT NULL")


def _migration_3(db: sqlite_utils.Database) -> None:
    # Per-status listings (ls --status, the TUI's views) ordered without sorting every row.
    db.execute("CREATE INDEX runs_status_finished ON runs(status, finished_at)")
    db.execute("CREATE INDEX runs_status_created ON runs(status, created_at)")


def _migration_4(db: sqlite_utils.Database) -> None:
    db.execute(
        """
        CREATE TABLE published (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            value TEXT,
            at INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        ) STRICT, WITHOUT ROWID
        """
    )


def _migration_5(db: sqlite_utils.Database) -> None:
    """Facts about the database itself, e.g. when a daemon last ran (`flowctl why`)."""
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT")


def _migration_6(db: sqlite_utils.Database) -> None:
    """Pause and resume (issue 10). `status` is free text, so 'paused' needs no constraint
    change; a paused run keeps the status and run_at that resume gives back."""
    db.execute("ALTER TABLE runs ADD COLUMN pause_requested INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE runs ADD COLUMN paused_status TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN paused_run_at INTEGER")


def _migration_7(db: sqlite_utils.Database) -> None:
    """The step a running run's handler is inside, as its last heartbeat saw it (`why`)."""
    db.execute("ALTER TABLE runs ADD COLUMN current_step TEXT")


def _migration_8(db: sqlite_utils.Database) -> None:
    """The input keys a run's workflow declared secret (a JSON list, NULL for none): front
    ends mask them without importing the workflow, and `ls --search` never matches them."""
    db.execute("ALTER TABLE runs ADD COLUMN secret_keys TEXT")


def _migration_9(db: sqlite_utils.Database) -> None:
    """Poison is charged only to the guilty run (issue 11): a run reclaimed from a dead
    worker is a suspect and runs alone; `solo` says its lease runs it alone, `crashes`
    counts the crashes charged to it since its last checkpoint."""
    db.execute("ALTER TABLE runs ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE runs ADD COLUMN solo INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE runs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0")


def _migration_10(db: sqlite_utils.Database) -> None:
    """The input keys a schedule's workflow declared secret (a JSON list, NULL for none),
    resolved when it was added or synced: `schedule show/ls` mask them without importing
    the workflow. Older rows have NULL until they are added or synced again."""
    db.execute("ALTER TABLE schedules ADD COLUMN secret_keys TEXT")


# The runs triggers' moves in run_counts (migrations 11 and 20).
_COUNTS_ADD = (
    "INSERT INTO run_counts (workflow, status, n) VALUES (NEW.workflow, NEW.status, 1)"
    " ON CONFLICT (workflow, status) DO UPDATE SET n = n + 1;"
)
_COUNTS_REMOVE = (
    "UPDATE run_counts SET n = n - 1 WHERE workflow = OLD.workflow AND status = OLD.status;"
)


def _migration_11(db: sqlite_utils.Database) -> None:
    """Throughput at a million runs (issue 14).

    - `sources`: a workflow's pinned text, once per definition hash. A run keeps only its
      `source_hash`; `runs.source` stays NULL (it holds text only for a run with no hash).
    - `run_counts`: runs per (workflow, status), kept by triggers in the transaction of
      every insert, delete and status change, so counts cost O(workflows), not a scan.
      Rows may reach n = 0; readers skip them.
    - `runs_workflow` becomes (workflow, status, created_at): `ls --workflow W --status S`
      seeks instead of filtering every run of W. Listings break created_at ties by rowid,
      which every index already holds, so no listing sorts.
    """
    db.execute("CREATE TABLE sources (source_hash TEXT PRIMARY KEY, source TEXT NOT NULL) STRICT")
    db.execute(
        "INSERT OR IGNORE INTO sources (source_hash, source) SELECT source_hash, source"
        " FROM runs WHERE source_hash IS NOT NULL AND source IS NOT NULL"
    )
    db.execute("UPDATE runs SET source = NULL WHERE source_hash IS NOT NULL AND source IS NOT NULL")
    db.execute(
        """
        CREATE TABLE run_counts (
            workflow TEXT NOT NULL,
            status TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (workflow, status)
        ) STRICT, WITHOUT ROWID
        """
    )
    db.execute(
        "INSERT INTO run_counts (workflow, status, n)"
        " SELECT workflow, status, COUNT(*) FROM runs GROUP BY workflow, status"
    )
    add, remove = _COUNTS_ADD, _COUNTS_REMOVE
    db.execute(f"CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN {add} END")
    db.execute(f"CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN {remove} END")
    db.execute(
        "CREATE TRIGGER run_counts_update AFTER UPDATE OF status, workflow ON runs"
        " WHEN NEW.status IS NOT OLD.status OR NEW.workflow IS NOT OLD.workflow"
        f" BEGIN {remove} {add} END"
    )
    db.execute("DROP INDEX runs_workflow")
    db.execute("CREATE INDEX runs_workflow ON runs(workflow, status, created_at)")


def _migration_12(db: sqlite_utils.Database) -> None:
    """`runs_due` becomes (status, run_at, run_id): a claim's candidates, the wheel's refill
    and a listing in run_at order read only this index, in order, never the rows (issue 14)."""
    db.execute("DROP INDEX runs_due")
    db.execute("CREATE INDEX runs_due ON runs(status, run_at, run_id)")


def _migration_13(db: sqlite_utils.Database) -> None:
    """Notifications (issue 16): an outbox row is written in the transaction that ends a run,
    so a notification is never lost to a crash between the ending and its delivery. The
    daemon delivers it at least once, retrying at `due_at` with backoff, up to a bounded
    number of tries. `claimed_by` is the daemon trying it now: when that process is
    provably gone, the next daemon retries at once instead of waiting out the try's budget. `runs.notify` is the workflow's own `notify:` override (JSON), pinned
    when the run starts."""
    db.execute(_notifications("notifications"))
    db.execute("CREATE INDEX notifications_due ON notifications(state, due_at)")
    db.execute("ALTER TABLE runs ADD COLUMN notify TEXT")


def _notifications(name: str) -> str:
    """The outbox table (migration 13), made again by migration 26: its state is checked
    with OR, never IN (see there)."""
    return f"""
        CREATE TABLE {name} (
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            status TEXT NOT NULL,
            error_kind TEXT,
            created_at INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending'
                CHECK (state = 'pending' OR state = 'delivered' OR state = 'failed'),
            due_at INTEGER NOT NULL,
            tries INTEGER NOT NULL DEFAULT 0,
            channels_done TEXT,
            last_error TEXT,
            claimed_by TEXT,
            finished_at INTEGER
        ) STRICT
    """


def _migration_14(db: sqlite_utils.Database) -> None:
    """What steps printed (issue 15): chunks of complete lines per run, call index and
    stream, in the order they were written (`seq`); they go with the run."""
    db.execute(
        """
        CREATE TABLE output (
            seq INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            call_index INTEGER NOT NULL,
            step TEXT NOT NULL,
            stream TEXT NOT NULL,
            at INTEGER NOT NULL,
            text TEXT NOT NULL
        ) STRICT
        """
    )
    db.execute("CREATE INDEX output_run ON output(run_id, seq)")


def _migration_15(db: sqlite_utils.Database) -> None:
    """Disk per run (issue 14, item 6): indexes hold only the rows their queries read.

    - `timeline_type_at` indexed every event of every run (90 B per sleeping run) for the
      three queries that read events by type: wakes (`recent_wakes`, the lateness
      histogram) and claim counts (metrics). Two partial indexes hold just those events.
    - `runs_status_finished` holds finished runs only: the finished_at order lists
      finished runs, and an active run (most of a sleeping million) has no finished_at.
    """
    db.execute("DROP INDEX timeline_type_at")
    db.execute("CREATE INDEX timeline_woke ON timeline(at) WHERE type = 'woke'")
    db.execute(
        "CREATE INDEX timeline_claims ON timeline(type) WHERE type IN ('claimed', 'reclaimed')"
    )
    db.execute("DROP INDEX runs_status_finished")
    db.execute(
        "CREATE INDEX runs_status_finished ON runs(status, finished_at)"
        " WHERE finished_at IS NOT NULL"
    )


# What a run was started from, repeated by every run of the same file: kept once per
# distinct definition in `definitions` (migration 16), joined back when a run is read.


def _migration_16(db: sqlite_utils.Database) -> None:
    """A run's definition (target, kind, source hash, source path, cwd: 170 B of a
    sleeping run's row, the same for every run of one file started from one place) is
    stored once in `definitions`; a run keeps its def_id (issue 14, item 6).

    The unique key treats a missing value as '' so that a definition with no pinned
    source is found again, not added once per run. The columns are dropped in place
    (ALTER TABLE DROP COLUMN rewrites the rows; no table is recreated, so no foreign key
    of journal, timeline ... is touched).
    """
    db.execute(
        """
        CREATE TABLE definitions (
            def_id INTEGER PRIMARY KEY,
            target TEXT NOT NULL,
            kind TEXT NOT NULL,
            source_hash TEXT,
            source_path TEXT,
            cwd TEXT
        ) STRICT
        """
    )
    db.execute(f"CREATE UNIQUE INDEX definitions_key ON definitions ({_DEFINITION_KEY})")
    db.execute(
        "INSERT OR IGNORE INTO definitions (target, kind, source_hash, source_path, cwd)"
        " SELECT DISTINCT target, kind, source_hash, source_path, cwd FROM runs"
    )
    db.execute("ALTER TABLE runs ADD COLUMN def_id INTEGER")
    same = " AND ".join(
        f"IFNULL(d.{col}, '') = IFNULL(runs.{col}, '')" for col in DEFINITION_COLUMNS
    )
    db.execute(f"UPDATE runs SET def_id = (SELECT def_id FROM definitions d WHERE {same})")
    for col in DEFINITION_COLUMNS:
        db.execute(f"ALTER TABLE runs DROP COLUMN {col}")


# target and kind are never NULL; the others are '' in the key when missing.
_DEFINITION_KEY = "target, kind, " + ", ".join(
    f"IFNULL({col}, '')" for col in DEFINITION_COLUMNS[2:]
)


def _migration_17(db: sqlite_utils.Database) -> None:
    """When the step a running run's handler is inside began, as its heartbeat records it
    with `current_step` (the TUI shows the step running now and for how long)."""
    db.execute("ALTER TABLE runs ADD COLUMN step_started_at INTEGER")


# The timeline events metrics count (claims and reclaims), kept in event_counts.
COUNTED_EVENTS = ("claimed", "reclaimed")


def _migration_18(db: sqlite_utils.Database) -> None:
    """Disk per sleeping run (issue 14, item 6): three of a sleeping run's rows and index
    entries were repeats (770 B per sleeping run before).

    - Every run's first event was `created`, mostly {"attempt": 1} at runs.created_at:
      that plain one is no longer stored; the timeline reads add it back before the run's
      first stored event whenever that is not a `created` one (a start that says more, a
      later start, a parent, a schedule, is still stored).
    - `timeline_run` indexes run_id alone: an index entry ends with the rowid (seq)
      anyway, so (run_id, seq) held seq twice, and the run's events still come in seq order.
    - The claims and reclaims metrics counts are kept in `event_counts` by triggers, in the
      transaction of every insert and delete (a pruned run's events go with it, as before),
      instead of a partial index holding every claim event.
    """
    db.execute(
        "DELETE FROM timeline WHERE type = 'created' AND data = ?"
        " AND at = (SELECT created_at FROM runs WHERE runs.run_id = timeline.run_id)",
        [PLAIN_CREATED],
    )
    db.execute("DROP INDEX timeline_run")
    db.execute("CREATE INDEX timeline_run ON timeline(run_id)")
    db.execute(
        "CREATE TABLE event_counts (type TEXT PRIMARY KEY, n INTEGER NOT NULL) STRICT, WITHOUT ROWID"
    )
    counted = ", ".join(f"'{t}'" for t in COUNTED_EVENTS)
    db.execute(
        "INSERT INTO event_counts (type, n) SELECT type, COUNT(*) FROM timeline"
        f" WHERE type IN ({counted}) GROUP BY type"
    )
    _event_count_triggers(db)
    db.execute("DROP INDEX timeline_claims")


def _event_count_triggers(db: sqlite_utils.Database) -> None:
    """The triggers that keep event_counts in the transaction of each timeline write."""
    counted = ", ".join(f"'{t}'" for t in COUNTED_EVENTS)
    db.execute(
        f"CREATE TRIGGER event_counts_insert AFTER INSERT ON timeline WHEN NEW.type IN ({counted})"
        " BEGIN INSERT INTO event_counts (type, n) VALUES (NEW.type, 1)"
        " ON CONFLICT (type) DO UPDATE SET n = n + 1; END"
    )
    db.execute(
        f"CREATE TRIGGER event_counts_delete AFTER DELETE ON timeline WHEN OLD.type IN ({counted})"
        " BEGIN UPDATE event_counts SET n = n - 1 WHERE type = OLD.type; END"
    )


def _migration_19(db: sqlite_utils.Database) -> None:
    """Disk per sleeping run (issue 14, item 6): 652 B per sleeping run before.

    - `timeline` is keyed by (run_id, seq), WITHOUT ROWID: a run's events are one range
      of the table itself, so `timeline_run` (57 B per sleeping run: the run_id again and
      the rowid, for every event) is gone, and a run's events are read from one place.
      `seq` numbers a run's events 1, 2 ... in the order written (rows.TIMELINE_INSERT);
      nothing reads an order across runs.
    - `runs_created` (created_at, 19 B per run) is dropped: the newest-first listing of
      every status, and `--search`'s window, merge each status's own range of
      runs_status_created (status, created_at) as the several-status listings already do.
    - `key TEXT UNIQUE` indexed every run, keyless ones too (10 B per run): the runs table
      is rebuilt (rowids kept, so every listing's tie-break stands) with a plain `key`, and
      the unique index `runs_key` holds only the runs that have one. SQLite cannot drop a
      column's UNIQUE in place; migrate() holds foreign keys off for the rebuild, so that
      dropping the old table cascades to nothing, and checks them before it commits.
    """
    _rebuild_runs(db)
    db.execute(
        """
        CREATE TABLE timeline_keyed (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            at INTEGER NOT NULL,
            type TEXT NOT NULL,
            data TEXT,
            PRIMARY KEY (run_id, seq)
        ) STRICT, WITHOUT ROWID
        """
    )
    db.execute(
        "INSERT INTO timeline_keyed (run_id, seq, at, type, data) SELECT run_id,"
        " ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY seq), at, type, data FROM timeline"
        " ORDER BY run_id, seq"
    )
    # Dropping it drops its index and triggers (no trigger fires on the drop, and nothing
    # references the timeline), so the counts in event_counts stand.
    db.execute("DROP TABLE timeline")
    db.execute("ALTER TABLE timeline_keyed RENAME TO timeline")
    db.execute("CREATE INDEX timeline_woke ON timeline(at) WHERE type = 'woke'")
    _event_count_triggers(db)
    db.execute("DROP INDEX runs_created")


# The runs table as migration 19 leaves it: its columns in the order the migrations before
# it left them, `key` without its UNIQUE (runs_key holds the keys).
_RUNS_19 = """
    CREATE TABLE runs_rebuilt (
        run_id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        source TEXT,
        input TEXT NOT NULL,
        status TEXT NOT NULL,
        run_at INTEGER,
        created_at INTEGER NOT NULL,
        started_at INTEGER,
        finished_at INTEGER,
        attempt INTEGER NOT NULL DEFAULT 1,
        max_attempts INTEGER NOT NULL DEFAULT 3,
        backoff TEXT,
        deadline INTEGER,
        timeout_us INTEGER,
        exec_spent_us INTEGER NOT NULL DEFAULT 0,
        result TEXT,
        error TEXT,
        lease_owner TEXT,
        lease_until INTEGER,
        fence INTEGER NOT NULL DEFAULT 0,
        reclaims INTEGER NOT NULL DEFAULT 0,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        cancel_reason TEXT,
        key TEXT,
        parent_run_id TEXT,
        schedule TEXT,
        scheduled_at INTEGER,
        pause_requested INTEGER NOT NULL DEFAULT 0,
        paused_status TEXT,
        paused_run_at INTEGER,
        current_step TEXT,
        secret_keys TEXT,
        suspect INTEGER NOT NULL DEFAULT 0,
        solo INTEGER NOT NULL DEFAULT 0,
        crashes INTEGER NOT NULL DEFAULT 0,
        notify TEXT,
        def_id INTEGER,
        step_started_at INTEGER
    ) STRICT
"""


def _rebuild_runs(db: sqlite_utils.Database) -> None:
    """Copy runs into _RUNS_19 with their rowids, then put back the indexes and triggers
    the old table had (as their own SQL recorded them), and runs_key."""
    db.execute(_RUNS_19)
    cols = ", ".join(r[1] for r in db.execute("PRAGMA table_info(runs_rebuilt)").fetchall())
    db.execute(f"INSERT INTO runs_rebuilt (rowid, {cols}) SELECT rowid, {cols} FROM runs")
    kept = db.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'runs' AND type IN ('index', 'trigger')"
        " AND sql IS NOT NULL ORDER BY type, name"
    ).fetchall()
    db.execute("DROP TABLE runs")
    db.execute("ALTER TABLE runs_rebuilt RENAME TO runs")
    for (sql,) in kept:
        db.execute(sql)
    db.execute("CREATE UNIQUE INDEX runs_key ON runs(key) WHERE key IS NOT NULL")


def _migration_20(db: sqlite_utils.Database) -> None:
    """run_counts moves for the daemon's two hottest writes are made by those writes, not
    by the runs trigger (issue 14: the trigger cost ~8 µs per firing, a sixth of a
    three-step run's time under the write lock; a claim now moves all its runs in two
    statements, a completion in one).

    The trigger no longer fires for a move into `running` (only a claim makes one:
    `_ClaimTimes.moved`) or into `completed` (only `complete_run` makes one). Neither
    write changes a run's workflow; every other status change is counted as before.
    """
    db.execute("DROP TRIGGER run_counts_update")
    db.execute(
        "CREATE TRIGGER run_counts_update AFTER UPDATE OF status, workflow ON runs"
        " WHEN NEW.workflow IS NOT OLD.workflow OR (NEW.status IS NOT OLD.status"
        " AND NEW.status NOT IN ('running', 'completed'))"
        f" BEGIN {_COUNTS_REMOVE} {_COUNTS_ADD} END"
    )


def _migration_21(db: sqlite_utils.Database) -> None:
    """A run's W3C traceparent when it joins a trace it did not start (a caller's, or its
    parent run's): NULL for every other run, whose trace id is derived from its run id
    (flowctl/tracing/ids.py), so a run that joins nothing stores nothing more."""
    db.execute("ALTER TABLE runs ADD COLUMN traceparent TEXT")


def _migration_22(db: sqlite_utils.Database) -> None:
    """Flow control (issue 37): a run's priority, its concurrency key and limit (rendered
    when it is created), the due time it had while a full key holds it (`held_at`, its
    run_at then NULL or its deadline), the named limit a step of it waits for, and its
    debounce key; the named limits, the steps holding them and the starts of the rates.

    The trigger gives a key's slot back: a run of a limited key that leaves `running`
    (ends, sleeps, waits, parks, fails) makes the first held run of its key due again, in
    the transaction of that write, so no slot is ever leaked by a path that forgets it.
    """
    from flowctl.store.flowsql import FLOW_INDEXES, FLOW_RELEASE  # only when migrating

    for column in _FLOW_COLUMNS:
        db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
    for statement in (*_FLOW_TABLES, *FLOW_INDEXES):
        db.execute(statement)
    _release_trigger(db, FLOW_RELEASE)


def _release_trigger(db: sqlite_utils.Database, release: str) -> None:
    """The trigger that gives a key's slot back, its statement `release` (FLOW_RELEASE)."""
    db.execute(
        "CREATE TRIGGER runs_flow_release AFTER UPDATE OF status ON runs"
        " WHEN OLD.flow_key IS NOT NULL AND OLD.status = 'running' AND NEW.status <> 'running'"
        f" BEGIN {release.replace('?', 'OLD.flow_key')}; END"
    )


# Shared with the PostgreSQL schema (flowctl.store.postgres.schema), as are the tables.
_FLOW_COLUMNS = (
    "priority INTEGER NOT NULL DEFAULT 0",
    "flow_key TEXT",
    "flow_limit INTEGER",
    "held_at INTEGER",
    "flow_wait TEXT",
    "debounce_key TEXT",
)
_FLOW_TABLES = (
    """
    CREATE TABLE limits (
        name TEXT PRIMARY KEY,
        concurrency INTEGER,
        rate_n INTEGER,
        period_us INTEGER,
        updated_at INTEGER NOT NULL
    ) STRICT
    """,
    """
    CREATE TABLE limit_holds (
        name TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        call_index INTEGER NOT NULL,
        since INTEGER NOT NULL,
        PRIMARY KEY (name, run_id, call_index)
    ) STRICT, WITHOUT ROWID
    """,
    """
    CREATE TABLE limit_starts (
        name TEXT NOT NULL,
        at INTEGER NOT NULL,
        run_id TEXT NOT NULL
    ) STRICT
    """,
)


def _migration_23(db: sqlite_utils.Database) -> None:
    """Wakes before fresh work (issue 40): the queued runs that have run before (retries,
    runs released or taken back) in due order, for the claim's own arm."""
    from flowctl.store.flowsql import RESUMED_INDEX  # only when migrating

    db.execute(RESUMED_INDEX)


def _migration_24(db: sqlite_utils.Database) -> None:
    """Flow control's key indexes hold no finished run (issue 37, item 8): the runs running
    per key, and the keyed runs neither held nor running (flowsql.FLOW_RUNNING_INDEXES).
    The trigger that gives a slot back is made again with its statuses spelled with OR
    (flowsql.WAITS): an IN list built a temporary b-tree at every ending of a keyed run."""
    from flowctl.store.flowsql import FLOW_RELEASE, FLOW_RUNNING_INDEXES  # only when migrating

    db.execute("DROP INDEX runs_flow")
    for statement in FLOW_RUNNING_INDEXES:
        db.execute(statement)
    db.execute("DROP TRIGGER runs_flow_release")
    _release_trigger(db, FLOW_RELEASE)


def _migration_25(db: sqlite_utils.Database) -> None:
    """Which daemon a resting run's handler waits in (issue 40, flowctl.store.resting): a
    rest gives the lease up, so when that daemon is found dead (same host, pid gone) its
    resting runs are due at once, as the runs it held are."""
    db.execute("ALTER TABLE runs ADD COLUMN rested_by TEXT")


def _migration_26(db: sqlite_utils.Database) -> None:
    """The outbox's state is checked with OR, not IN: SQLite builds a temporary b-tree
    for an IN list of three values each time it checks one, and every run's ending
    inserts an outbox row (about 3 µs each). SQLite cannot change a CHECK in place, so the
    table is made again, its rows and index kept."""
    db.execute(_notifications("notifications_checked"))
    db.execute("INSERT INTO notifications_checked SELECT * FROM notifications")
    db.execute("DROP TABLE notifications")
    db.execute("ALTER TABLE notifications_checked RENAME TO notifications")
    db.execute("CREATE INDEX notifications_due ON notifications(state, due_at)")


MIGRATIONS = [
    _migration_1,
    _migration_2,
    _migration_3,
    _migration_4,
    _migration_5,
    _migration_6,
    _migration_7,
    _migration_8,
    _migration_9,
    _migration_10,
    _migration_11,
    _migration_12,
    _migration_13,
    _migration_14,
    _migration_15,
    _migration_16,
    _migration_17,
    _migration_18,
    _migration_19,
    _migration_20,
    _migration_21,
    _migration_22,
    _migration_23,
    _migration_24,
    _migration_25,
    _migration_26,
]
SCHEMA_VERSION = len(MIGRATIONS)
