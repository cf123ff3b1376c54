"""What differs between the SQL of the two backends, as data.

Every statement of the store is written once (flowctl/store/*.py), with `?` placeholders
and a few `{name}` tokens where SQLite and PostgreSQL really differ: row locks (SQLite's
one writer needs none), index hints (SQLite's planner needs them on a file of finished
runs), the timeline's append (per-run numbers on SQLite, an identity on PostgreSQL), the
run counts (one row per (workflow, status) on SQLite; appended deltas on PostgreSQL, so
daemons on many hosts never queue on a hot row), and the JSON functions of a search.

`Dialect.sql(template)` turns a template into the statement a backend runs, once per
template (a dict probe afterwards): tokens filled in, and for PostgreSQL `?` made `%s`
(psycopg's placeholder) and a literal `%` doubled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

# The class of PostgreSQL's per-key advisory locks of flow control (the two-key form: this
# class, the key's hashtext): "FLOW" in 31 bits. The schema's trigger takes the same.
FLOW_LOCK = 0x464C4F57

_TOKEN = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Dialect:
    """One backend's spelling of what differs; every other piece of SQL is shared."""

    name: str
    # Placeholders: "?" (sqlite3) or "%s" (psycopg); templates always say "?".
    pyformat: bool
    # A failed statement is undone alone, its transaction kept (SQLite); else a failed
    # statement aborts the transaction, so a write that may fail runs in a savepoint.
    statement_atomic: bool
    # Row locks taken by a statement that reads a row to decide a write ("" on SQLite,
    # whose transaction holds the file's one write lock from its BEGIN IMMEDIATE).
    for_update: str
    for_share: str
    # for_update of a run's row read joined to its definition (only the run is locked).
    lock_run: str
    # A claim's candidates: rows another claimer holds are skipped, never waited for.
    skip_locked: str
    # Takes the flow-control lock of key ? for this transaction if free, else says so
    # (returns one row, true or false); "" on SQLite, whose one writer needs none.
    flow_lock: str
    # The runs table picked out by status or by key, with the index named (SQLite), or
    # by rowid alone (no status range walked for the search window's rows).
    runs_by_status: str
    runs_by_key: str
    runs_by_rowid: str
    # The queued runs that have run before, from their partial index (SQLite's planner,
    # without statistics, would walk every queued run of runs_due for the few of them).
    runs_resumed: str
    # A run row's insertion order, the listings' tie-break.
    rowid: str
    # Listings name the index each status is read from (SQLite's planner needs telling).
    index_hints: bool
    # Case-insensitive LIKE (SQLite's LIKE is, for ASCII).
    like: str
    # Appends one event: (run_id, at, type, data).
    timeline_insert: str
    # Adds `n` (negative: takes) to a workflow's runs in a status: (workflow, status, n).
    count_add: str
    # Moves `n` runs of a workflow from one status to another in one statement, returning
    # the status of each count it moved (a missing one is then added by count_add):
    # (to, n, n, workflow, from, to).
    count_move: str
    # Whether count_move always writes both counts (appended deltas, PostgreSQL): then it
    # is sent, its answer never read.
    counts_appended: bool
    # Runs per (workflow, status) as a table `run_counts` (workflow, status, n).
    counts: str
    # (type, n) for the claimed and reclaimed events.
    event_counts: str
    # A woke event's lateness in seconds, from its JSON `data`.
    late_s: str
    # The input with every secret value replaced by "***", as text, for `--search`;
    # `searched` is the row searched.
    masked_input: str
    # JSON text of a string as the input's text form spells it (ASCII on SQLite).
    ascii_json: bool
    # A JSON column reads back the text as written (SQLite); else (jsonb) with its keys in
    # the server's own order, so a run just created is read back rather than built.
    json_as_written: bool
    # The newest {window} runs' keys in creation order, as a subquery yielding `rid` (the
    # runs' `rowid`): the search window, read from an index without a sort.
    newest: str
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def sql(self, template: str) -> str:
        """The statement this backend runs for `template` (cached)."""
        done = self._cache.get(template)
        if done is None:
            done = self._cache[template] = self._translate(template)
        return done

    def _translate(self, template: str) -> str:
        tokens = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_cache"}

        def fill(m: re.Match[str]) -> str:
            name = m.group(1)
            value = tokens.get(name)
            return m.group(0) if not isinstance(value, str) else value

        sql = template
        for _ in range(3):  # a token's value may hold another (counts in a statement)
            filled = _TOKEN.sub(fill, sql)
            if filled == sql:
                break
            sql = filled
        if self.pyformat:
            sql = sql.replace("%", "%%").replace("?", "%s")
        return sql


_STATUSES = ("queued", "running", "sleeping", "waiting", "paused", "completed", "dead", "cancelled")

SQLITE = Dialect(
    name="sqlite",
    pyformat=False,
    statement_atomic=True,
    for_update="",
    for_share="",
    lock_run="",
    skip_locked="",
    flow_lock="",
    runs_by_status="runs INDEXED BY runs_due",
    runs_by_key="runs INDEXED BY runs_key",
    runs_by_rowid="runs NOT INDEXED",
    runs_resumed="runs INDEXED BY runs_resumed",
    rowid="runs.rowid",
    index_hints=True,
    like="LIKE",
    # seq numbers a run's events 1, 2 ... (migration 19): the next after its newest.
    timeline_insert=(
        "INSERT INTO timeline (run_id, seq, at, type, data) VALUES (?1, (SELECT"
        " COALESCE(MAX(seq), 0) + 1 FROM timeline WHERE run_id = ?1), ?2, ?3, ?4)"
    ),
    count_add=(
        "INSERT INTO run_counts (workflow, status, n) VALUES (?, ?, ?)"
        " ON CONFLICT (workflow, status) DO UPDATE SET n = n + excluded.n"
    ),
    count_move=(
        "UPDATE run_counts SET n = n + CASE WHEN status = ? THEN ? ELSE 0 - ? END"
        " WHERE workflow = ? AND status IN (?, ?) RETURNING status"
    ),
    counts_appended=False,
    counts="run_counts",
    event_counts="SELECT type, n FROM event_counts",
    late_s="(json_extract(data, '$.late_ms') / 1000.0)",
    masked_input=(
        "(CASE WHEN searched.secret_keys IS NULL THEN searched.input ELSE"
        " json_patch(searched.input, (SELECT json_group_object(value, '***')"
        " FROM json_each(searched.secret_keys))) END)"
    ),
    ascii_json=True,
    json_as_written=True,
    # Each status's own range of runs_status_created (status, created_at, rowid), read
    # backwards and merged (no index holds created_at alone since migration 19): only the
    # index is read, and the merge stops at the window.
    newest=(
        "SELECT rid FROM ("
        + " UNION ALL ".join(
            f"SELECT * FROM (SELECT rowid AS rid, created_at FROM runs WHERE status = '{s}'"
            " ORDER BY created_at DESC, rowid DESC LIMIT {window})"
            for s in _STATUSES
        )
        + " ORDER BY created_at DESC, rid DESC LIMIT {window})"
    ),
)

POSTGRES = Dialect(
    name="postgresql",
    pyformat=True,
    statement_atomic=False,
    for_update=" FOR UPDATE",
    for_share=" FOR SHARE",
    lock_run=" FOR UPDATE OF runs",
    # OF runs: a claim's rows are read joined to their definitions, which stay unlocked.
    skip_locked=" FOR UPDATE OF runs SKIP LOCKED",
    flow_lock=f"SELECT pg_try_advisory_xact_lock({FLOW_LOCK}, hashtext(?))",
    runs_by_status="runs",
    runs_by_key="runs",
    runs_by_rowid="runs",
    runs_resumed="runs",
    rowid="runs.run_id",
    index_hints=False,
    like="ILIKE",
    timeline_insert="INSERT INTO timeline (run_id, at, type, data) VALUES (?, ?, ?, ?)",
    # Appended, never updated in place: a transition waits on no other host's (schema v4).
    count_add="INSERT INTO run_count_deltas (workflow, status, d) VALUES (?, ?, ?)",
    count_move=(
        "INSERT INTO run_count_deltas (workflow, status, d) SELECT p.wf, v.s, v.d FROM"
        " (SELECT CAST(? AS TEXT) AS t, CAST(? AS INTEGER) AS n_in, CAST(? AS INTEGER) AS"
        " n_out, CAST(? AS TEXT) AS wf, CAST(? AS TEXT) AS f, CAST(? AS TEXT) AS t2) AS p"
        " CROSS JOIN LATERAL (VALUES (p.t, p.n_in), (p.f, 0 - p.n_out)) AS v(s, d)"
        " RETURNING status"
    ),
    counts_appended=True,
    counts=(
        "(SELECT workflow, status, SUM(n) AS n FROM (SELECT workflow, status, n FROM run_counts"
        " UNION ALL SELECT workflow, status, d FROM run_count_deltas) AS c"
        " GROUP BY workflow, status) AS run_counts"
    ),
    event_counts=(
        "SELECT type, COUNT(*) FROM timeline WHERE type IN ('claimed', 'reclaimed') GROUP BY type"
    ),
    late_s="((data->>'late_ms')::float8 / 1000.0)",
    masked_input=(
        "(CASE WHEN searched.secret_keys IS NULL THEN searched.input ELSE searched.input ||"
        " (SELECT jsonb_object_agg(k, to_jsonb('***'::text))"
        " FROM jsonb_array_elements_text(searched.secret_keys) AS k) END)::text"
    ),
    ascii_json=False,
    json_as_written=False,
    newest="SELECT run_id AS rid FROM runs ORDER BY created_at DESC, run_id DESC LIMIT {window}",
)
