"""No query the CLI, the TUI or the daemon runs regresses to a scan (issue 14, items 5, 9).

Every statement SQLite runs while the CLI lists, shows and explains runs, while the TUI
loads each view (with and without a search, for no workflow, a common one and a rare one)
and a run's detail, and while the daemon claims, executes and wakes runs, is captured with
a trace callback on every connection, then `EXPLAIN QUERY PLAN` is asked of each on a
generated database. A statement may not scan a table that grows with the runs (a `SCAN` of
the table at all, or of one of its indexes without a LIMIT that bounds it), nor sort a
growing set (`TEMP B-TREE`) outside a bounded subquery. The few statements that are allowed
to read a bounded window say why below.

The daemon's hot path (claim, refill, counts, checkpoints, completion) is held to more: the
work SQLite does for it, counted in virtual-machine instructions (a progress handler, so
the count is exact and needs no clock), must not grow with the finished runs the database
holds (issue 14, item 9).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.notifier import Notifier
from flowctl.model import CallKind, EntryState, JournalEntry
from flowctl.notify import NotifyConfig
from flowctl.store.listing import SORT_BOUNDED
from flowctl.store.sqlite import SqliteStore as Store
from tests.inproc import run_main

# Tables whose size grows with the number of runs.
GROWING = ("runs", "journal", "timeline", "signals", "versions", "published", "schedule_history")

FLOWS = """\
from flowctl import workflow

@workflow
def quick(ctx, user: str = "u"):
    return ctx.step("fetch", lambda: user)

@workflow
def nap(ctx, user: str = "u"):
    ctx.step("fetch", lambda: user)
    ctx.sleep(3600)
    return "rested"

@workflow
def approve(ctx, user: str = "u"):
    ctx.step("fetch", lambda: user)
    return ctx.wait_signal("approved", timeout="7d")

@workflow
def rare(ctx, user: str = "u"):
    ctx.sleep(7200)

@workflow(max_attempts=1)
def fail(ctx, user: str = "u"):
    def boom():
        raise RuntimeError("upstream 503")
    ctx.step("boom", boom)
"""


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, str, FakeClock]:
    """A database with a few thousand runs of every status, made through the store."""
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    db = tmp_path / "plans.db"
    clock = FakeClock()
    seed_runs(db, str(flows), clock)
    return db, str(flows), clock


def seed_runs(db: Path, flows: str, clock: FakeClock) -> None:
    """Runs of every status (and a rare workflow, and running runs with a journal)."""
    with Store(db) as store:
        for name, n in (("quick", 600), ("nap", 600), ("approve", 300), ("fail", 200)):
            ops.start_many(
                store, f"{flows}:{name}", [{"user": f"u{i}"} for i in range(n)], clock=clock
            )
        Daemon(store, clock, DaemonConfig(concurrency=1, claim_batch=64)).tick()
        ops.start_many(store, f"{flows}:quick", [{"user": "late"}] * 300, clock=clock)
        # A rare workflow: three sleepers among hundreds (ls --workflow rare, issue 14).
        ops.start_many(store, f"{flows}:rare", [{"user": "r"}] * 3, clock=clock)
        lease = clock.now() + timedelta(minutes=5)
        claims, _ = store.claim_due("plans-test", clock.now(), lease, 50)
        for claim in claims[:25]:  # some running, with a journal
            entry = JournalEntry(claim.run.run_id, 0, CallKind.STEP, "fetch", EntryState.DONE, 1)
            store.record_entry(claim.lease, entry, clock.now())


class Captured:
    def __init__(self) -> None:
        self.statements: dict[str, str] = {}  # shape -> one full statement of that shape

    def __call__(self, sql: str) -> None:
        shape = re.sub(r"'[^']*'|\b\d+\b", "?", " ".join(sql.split()))
        self.statements.setdefault(shape, sql)


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Captured]:
    """Every statement on every connection opened from here on."""
    cap = Captured()
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.set_trace_callback(cap)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    yield cap


def violations(db: Path, statements: dict[str, str]) -> list[str]:
    conn = sqlite3.connect(str(db))
    bad = []
    try:
        for shape, sql in statements.items():
            head = sql.lstrip().split(None, 1)[0].upper()
            if head not in ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH"):
                continue
            try:
                plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
            except sqlite3.Error:
                continue  # e.g. a statement about a temporary table of its connection
            bounded = " LIMIT " in sql.upper() or shape in BOUNDED_BY_NATURE
            for line in plan:
                m = re.match(r"SCAN (\w+)( USING)?", line)
                # A table scan is never bounded; an index scan only by a LIMIT (or by what
                # the index's first column selects, for BOUNDED_BY_NATURE).
                if m and m.group(1) in GROWING and (not bounded or not m.group(2)):
                    bad.append(f"{line}\n    in: {shape}")
                if shape in BOUNDED_BY_NATURE:
                    continue
                if "TEMP B-TREE" in line and not _sorts_a_bounded_set(sql, plan):
                    bad.append(f"{line}\n    in: {shape}")
    finally:
        conn.close()
    return bad


# Statements allowed to read or sort more than one run's rows without a LIMIT, and why;
# they must still seek (a SCAN of the table is refused), or their bound does not hold.
BOUNDED_BY_NATURE = {
    # Only running runs: as many as the live daemons' worker slots and rests (at most
    # REST_MOST per batch runner), not all runs.
    "SELECT DISTINCT COALESCE(lease_owner, rested_by) FROM runs INDEXED BY runs_due"
    " WHERE status = ? AND (lease_owner IS NOT NULL OR rested_by IS NOT NULL)",
    "SELECT run_id FROM runs WHERE status = ? AND run_at <= ? ORDER BY crashes, run_at LIMIT ?",
}
# A LIMITed subquery; it may join a run's definition back (`USING (def_id)`, one lookup by
# key per run it yields).
LIMITED_SUBQUERY = re.compile(r"\(SELECT (?:[^()]|\(def_id\))* LIMIT (\?|\d+)\)")


def _sorts_a_bounded_set(sql: str, plan: list[str]) -> bool:
    """A sort is fine over LIMITed subqueries (a merge of per-status pages, the search
    window), over one run's rows (run_id=?), over the runs of one workflow that run_counts
    showed are few (SORT_BOUNDED, see RunList._workflow_indexes), or over tables that do
    not grow."""
    if SORT_BOUNDED in sql or LIMITED_SUBQUERY.search(re.sub(r"'[^']*'", "?", sql)):
        return True
    touched = [line for line in plan for t in GROWING if re.search(rf"\b(SCAN|SEARCH) {t}\b", line)]
    return all("(run_id=?" in line for line in touched)


def exercise(monkeypatch: pytest.MonkeyPatch, db: Path, clock: FakeClock) -> None:
    """What an operator and a daemon do: every listing, every view, a detail, a claim, a
    refill and a wake."""
    from flowctl.tui.render import DETAIL_STEPS
    from flowctl.tui.views import VIEWS, PageQuery, load_page

    with Store(db) as store:
        some = store.list_runs(limit=5)
        for view in VIEWS:
            for workflow in (None, "nap", "rare", "fail"):
                for search in (None, "u42", some[0].run_id[:8]):
                    load_page(store, PageQuery(view.key, workflow, search, 200))
        for run in some[:2]:
            ops.show_run(store, run.run_id, clock=clock, steps=DETAIL_STEPS)  # the TUI detail
        ops.workflow_names(store)
        store.next_due(512)  # the wheel's refill
        Daemon(store, clock, DaemonConfig(concurrency=2)).tick()
        clock.advance(timedelta(hours=2))
        Daemon(store, clock, DaemonConfig(concurrency=4)).tick()
        # The outbox the endings above wrote: dropped in bulk, then looked at row by row.
        Notifier(store, clock, None, "plans-test").deliver_due()
        wants_dead = NotifyConfig(on=frozenset({"dead"}), command=("true",))
        Notifier(store, clock, wants_dead, "plans-test").deliver_due()
    args = ["--db", str(db)]
    for extra in (
        [],
        ["--status", "sleeping", "--status", "waiting"],
        ["--status", "dead"],
        ["--workflow", "quick", "--status", "completed"],
        ["--workflow", "rare"],
        ["--workflow", "nap", "--status", "sleeping", "--status", "waiting"],
        ["--search", "u42"],
        ["--search", "u42", "--status", "completed"],
        ["--search", "u42", "--workflow", "nap"],
        ["-n", "5"],
    ):
        assert run_main(monkeypatch, *args, "ls", *extra).returncode == 0
    for run in some[:3]:
        for show in ([], ["--json"], ["--steps", "2", "--skip", "1"], ["--all"]):
            assert run_main(monkeypatch, *args, "show", run.run_id, *show).returncode == 0
        assert run_main(monkeypatch, *args, "why", run.run_id).returncode == 0
    assert run_main(monkeypatch, *args, "status").returncode == 0


def test_no_query_scans_a_growing_table(
    monkeypatch: pytest.MonkeyPatch, seeded: tuple[Path, str, FakeClock], captured: Captured
) -> None:
    db, _, clock = seeded
    exercise(monkeypatch, db, clock)
    assert len(captured.statements) > 60, "the exercise ran too few distinct statements"
    assert any(SORT_BOUNDED in sql for sql in captured.statements.values())
    assert violations(db, captured.statements) == []


def test_the_check_sees_a_scan(
    seeded: tuple[Path, str, FakeClock],
) -> None:
    """The check itself: a query that must scan is reported, one that seeks is not."""
    db, _, _ = seeded
    bad = violations(
        db,
        {
            "scan": "SELECT run_id FROM runs WHERE input LIKE '%x%'",
            "sort": "SELECT run_id FROM runs WHERE status IN ('queued','dead') ORDER BY created_at",
            "seek": "SELECT run_id FROM runs WHERE run_id = 'r_1'",
        },
    )
    assert [b.split("\n")[0].split()[0] for b in bad] == ["SCAN", "USE"]
    assert {b.rsplit("in: ", 1)[1] for b in bad} == {"scan", "sort"}


def add_finished(db: Path, n: int) -> None:
    """n completed runs, copied in SQL from one real completed run with its journal and
    timeline rows (every column the schema has, so this follows migrations)."""
    if n < 1:
        return
    c = sqlite3.connect(str(db), isolation_level=None)
    try:
        (template,) = c.execute(
            "SELECT run_id FROM runs WHERE status = 'completed' LIMIT 1"
        ).fetchone()
        c.execute("BEGIN IMMEDIATE")
        for table, varied in (
            (
                "runs",
                {"run_id": "printf('f%015d', i)", "key": "NULL", "created_at": "created_at - i"},
            ),
            ("journal", {"run_id": "printf('f%015d', i)"}),
            ("timeline", {"run_id": "printf('f%015d', i)"}),
        ):
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
            select = ", ".join(varied.get(col, col) for col in cols)
            c.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) WITH RECURSIVE k(i) AS (SELECT 1"
                f" UNION ALL SELECT i + 1 FROM k WHERE i < ?) SELECT {select} FROM k,"
                f" (SELECT * FROM {table} WHERE run_id = ?)",
                [n, template],
            )
        c.execute("COMMIT")
    finally:
        c.close()


def daemon_work(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    finished: int,
    after_seed: Callable[[Path], None] | None = None,
) -> int:
    """SQLite VM instructions the daemon spends running 40 fresh runs to completion (claim,
    checkpoints, completion, refills) and reading the status counts, on a database that
    also holds `finished` completed runs (`after_seed` is then called with its path)."""
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    db = tmp_path / f"hot-{finished}.db"
    clock = FakeClock()
    with Store(db) as store:
        ops.start(store, f"{flows}:quick", {}, clock=clock)
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    add_finished(db, finished)
    if after_seed is not None:
        after_seed(db)
    with Store(db) as store:
        ops.start_many(store, f"{flows}:quick", [{"user": f"u{i}"} for i in range(40)], clock=clock)
    with vm_steps(monkeypatch) as steps, Store(db) as store:
        daemon = Daemon(store, clock, DaemonConfig(concurrency=4, claim_batch=8))
        for _ in range(20):
            daemon.tick()
            store.next_due(512)
            ops.count_runs(store)
        assert store.count_by_status()["completed"] == 41 + finished
    return steps[0] * 100


@contextmanager
def vm_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The SQLite VM instructions (in hundreds, counted by a progress handler) of every
    connection opened in the block, in the one item of the list yielded."""
    steps = [0]
    real = sqlite3.connect

    def counted(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)
        return conn

    with monkeypatch.context() as m:
        m.setattr(sqlite3, "connect", counted)
        yield steps


def test_the_daemons_hot_queries_do_not_grow_with_finished_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Item 9: the claim, the refill and the counts seek the active runs; 20,000 finished
    runs beside them add no work (a scan of them would add well over 20,000 x 20 ticks)."""
    empty = daemon_work(monkeypatch, tmp_path, 0)
    full = daemon_work(monkeypatch, tmp_path, 20_000)
    assert empty > 10_000  # the handler counted the daemon's statements
    assert full <= empty * 1.1, (empty, full)


def claim_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, queued: int) -> int:
    """SQLite VM instructions of claims taking 4 runs at a time until 40 are taken, from
    `queued` fresh runs due."""
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    db = tmp_path / f"queued-{queued}.db"
    clock = FakeClock()
    with Store(db) as store:
        ops.start_many(
            store, f"{flows}:quick", [{"user": f"u{i}"} for i in range(queued)], clock=clock
        )
    with vm_steps(monkeypatch) as steps, Store(db) as store:
        steps[0] = 0  # the claims alone, not the store's opening
        now = clock.now()
        taken = [
            store.claim_due("t/1/1/a", now, now + timedelta(minutes=1), 4)[0] for _ in range(10)
        ]
    assert sum(len(t) for t in taken) == 40
    return steps[0] * 100


def test_a_claim_does_not_grow_with_the_queued_runs_behind_the_ones_it_takes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each arm of the claim reads at most its LIMIT of rows: the arm of queued runs that
    ran before (retries, issue 40) reads them from their own partial index. Read through
    the index of every queued run instead (what SQLite's planner picked unhinted), 5,000
    fresh runs queued behind made each claim walk all 5,000."""
    few = claim_work(monkeypatch, tmp_path, 100)
    many = claim_work(monkeypatch, tmp_path, 5_000)
    assert few > 1_000  # the handler counted the claims' statements
    assert many <= few * 1.3, (few, many)
