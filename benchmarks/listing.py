"""Listing, counting and searching at a million runs (issue 14, item 5).

    .venv/bin/python benchmarks/listing.py                    # 1,000,000 runs (about a minute)
    .venv/bin/python benchmarks/listing.py --runs 100000

A few real runs of every status are made through the API; their rows are then copied in
SQL (recursive CTE) to --runs runs with spread creation times, workflow names and inputs,
in the status mix of benchmarks/tui_startup.py. Then each query the CLI and the TUI make
is timed (median of 5, after one warm-up) through the store: `ls` with several statuses,
a workflow, a search; the TUI's status counts; and each TUI view's page with and without
a search. Targets: every listing under 50 ms, counts O(1), a view with a search under
100 ms.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl import ops  # noqa: E402
from flowctl.clock import FakeClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402
from flowctl.model import RunStatus  # noqa: E402
from flowctl.store.sqlite import SqliteStore  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")
MIX = (("sleeping", 40), ("completed", 30), ("waiting", 10), ("dead", 10), ("queued", 10))
WORKFLOWS = ("billing", "followup", "report", "sync", "onboarding")


def seed(db: Path, n: int) -> None:
    clock = FakeClock()
    with SqliteStore(db, durability="normal") as store:
        ops.start(store, f"{FLOWS}:sleeper", {"at": time.time() + 86400}, clock=clock)
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    c = sqlite3.connect(str(db), isolation_level=None)
    cols = [r[1] for r in c.execute("PRAGMA table_info(runs)")]
    varied = {
        "run_id": "printf('r%015d', i)",
        # One run in 100,000 is of a rare workflow: `ls --workflow rare` must not walk the rest.
        "workflow": f"CASE WHEN i % 100000 = 7 THEN 'rare' ELSE CASE i % 5"
        f" {' '.join(f'WHEN {k} THEN {w!r}' for k, w in enumerate(WORKFLOWS))} END END",
        "status": "CASE WHEN i % 100 < 40 THEN 'sleeping' WHEN i % 100 < 70 THEN 'completed'"
        " WHEN i % 100 < 80 THEN 'waiting' WHEN i % 100 < 90 THEN 'dead' ELSE 'queued' END",
        "input": "json_object('user', 'u' || i, 'plan', 'pro')",
        "created_at": "created_at + i * 1000",
        "finished_at": "CASE WHEN i % 100 BETWEEN 40 AND 69 OR i % 100 BETWEEN 80 AND 89"
        " THEN created_at + i * 1000 + 5000 END",
        "run_at": "run_at + (i % 86400) * 1000000",
        "key": "NULL",
    }
    select = ", ".join(varied.get(col, col) for col in cols)
    c.execute("BEGIN IMMEDIATE")
    c.execute(
        f"INSERT INTO runs ({', '.join(cols)}) WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL"
        f" SELECT i + 1 FROM k WHERE i < {n}) SELECT {select} FROM k, (SELECT * FROM runs LIMIT 1)"
    )
    c.execute("COMMIT")  # no ANALYZE: flowctl never runs it, so the plans are production's
    c.close()


def timed(fn: Callable[[], Any], repeats: int = 5) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `fn` (after one warm-up). On a shared machine
    the CPU time is the figure to trust: it leaves out the time other processes ran."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument(
        "--db", type=Path, help="keep the seeded database here, and reuse it when it exists"
    )
    args = parser.parse_args()
    print("reproduce: .venv/bin/python benchmarks/listing.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="flowctl-list-") as d:
        db = args.db or Path(d) / "list.db"
        if not db.exists():
            t = time.perf_counter()
            seed(db, args.runs)
            print(f"seeded {args.runs:,} runs in {time.perf_counter() - t:.0f} s\n")
        from flowctl.tui.views import VIEWS, PageQuery, load_page

        with SqliteStore(db) as store:
            print(f"{sum(ops.count_runs(store).values()):,} runs in {db}\n")
            s, w = [RunStatus.SLEEPING], [RunStatus.SLEEPING, RunStatus.WAITING]
            figures = [
                ("ls", lambda: store.list_runs(limit=50)),
                ("ls --status sleeping --status waiting", lambda: store.list_runs(statuses=w)),
                ("ls --workflow sync", lambda: store.list_runs(workflow="sync")),
                ("ls --workflow sync --status sleeping", lambda: store.list_runs(statuses=s, workflow="sync")),
                ("ls --workflow rare", lambda: store.list_runs(workflow="rare")),
                ("ls --workflow rare --status sleeping", lambda: store.list_runs(statuses=s, workflow="rare")),
                ("ls --workflow rare --status sleeping --status waiting", lambda: store.list_runs(statuses=w, workflow="rare")),
                ("ls --search u4242 --workflow rare", lambda: store.list_runs(search="u4242", workflow="rare")),
                ("ls --status dead (newest finished)", lambda: store.list_runs(statuses=[RunStatus.DEAD], order="finished_desc")),
                ("ls --status sleeping by run_at", lambda: store.list_runs(statuses=s, order="run_at")),
                ("ls --search u4242", lambda: store.list_runs(search="u4242")),
                ("status counts (TUI header)", lambda: ops.count_runs(store)),
                ("status counts with a search", lambda: ops.count_runs(store, search="u4242")),
                ("wheel refill (next_due 512)", lambda: store.next_due(512)),
            ]  # fmt: skip
            for view in VIEWS:
                for workflow, search in ((None, None), (None, "u4242"), ("rare", None)):
                    q = PageQuery(view.key, workflow, search, 200)
                    label = f"TUI {view.title} page" + (" with a search" if search else "")
                    label += f" of workflow {workflow}" if workflow else ""
                    figures.append((label, lambda q=q: load_page(store, q)))
            print(f"  {'query':<52} {'wall ms':>8} {'cpu ms':>8}")
            for label, fn in figures:
                wall, cpu = timed(fn)
                print(f"  {label:<52} {wall:8.1f} {cpu:8.1f}")
    print("\ntargets: listings < 50 ms, counts O(1), a TUI view with a search < 100 ms")


if __name__ == "__main__":
    main()
