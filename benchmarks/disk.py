"""Disk per sleeping run: what a million sleepers cost in rows (issue 14, item 6).

    .venv/bin/python benchmarks/disk.py                 # 100,000 sleepers
    .venv/bin/python benchmarks/disk.py --runs 1000000  # the issue's size (a few minutes)

One real sleeping run is made through the API (its pinned source, its journal row, its
timeline rows), then its rows are copied --runs times in one transaction (as daemon.py's
idle figure does), the WAL is checkpointed, and the database's used pages (page_count
minus freelist_count) are divided by the runs: every table and index included. (Its
first event, the plain `created` one, is implied by the run's row since migration 18:
`flowctl show` lists three events, two are stored.)
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from daemon import clone_sleepers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args()
    n = args.runs
    print("reproduce: .venv/bin/python benchmarks/disk.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="flowctl-disk-") as d:
        db = Path(d) / "disk.db"
        clone_sleepers(db, n, time.time() + 86400)
        conn = sqlite3.connect(str(db), isolation_level=None)
        try:
            # clone_sleepers copies the runs and journal rows; copy the timeline rows too.
            (template,) = conn.execute("SELECT run_id FROM timeline LIMIT 1").fetchone()
            events = conn.execute(
                "SELECT seq, at, type, data FROM timeline WHERE run_id = ?", [template]
            ).fetchall()
            ids = [
                r[0] for r in conn.execute("SELECT run_id FROM runs WHERE run_id != ?", [template])
            ]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO timeline (run_id, seq, at, type, data) VALUES (?,?,?,?,?)",
                [(rid, *event) for rid in ids for event in events],
            )
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size, pages, free = (
                conn.execute(f"PRAGMA {p}").fetchone()[0]
                for p in ("page_size", "page_count", "freelist_count")
            )
            (indexes,) = conn.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'"
            ).fetchone()
            # Bytes per table and index (dbstat: every page a b-tree owns), largest first.
            parts = conn.execute(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            ).fetchall()
        finally:
            conn.close()
    print(f"{'table or index':<28} {'bytes':>14} {'B per run':>10}")
    for name, nbytes in parts:
        if nbytes >= size * 4:
            print(f"  {name:<26} {nbytes:>14,} {nbytes / (n + 1):>10,.1f}")
    print(
        f"{n + 1:,} sleeping runs, each with its journal row and {len(events)} stored timeline rows:"
        f" {(pages - free) * size / (n + 1):,.0f} B on disk per run, all tables and the"
        f" {indexes} indexes on runs included   (target <= 600 B at 1,000,000 runs)"
    )


if __name__ == "__main__":
    main()
