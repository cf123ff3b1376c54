"""`flowctl show` of a 100,000-step run (issue 14, item 5): lines, bytes and seconds.

    PYTHONPATH=. .venv/bin/python benchmarks/show.py                 # 100,000 checkpoints
    PYTHONPATH=. .venv/bin/python benchmarks/show.py --steps 20000

One real sleeping run of a few steps is made through the API; its step checkpoint and its
timeline events are then copied in SQL until it holds --steps checkpoints and as many
events. `flowctl show RUN` and `flowctl show RUN --json` are run as processes (the
console entry point, `python -m flowctl`), each after one warm-up; printed: lines and
bytes of output and the wall seconds (median of 3). Run it with PYTHONPATH pointing at a
checkout to measure that checkout's flowctl.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
from flowctl import workflow

@workflow
def long(ctx):
    for i in range(3):
        ctx.step(f"s{i}", lambda i=i: {"i": i, "note": "a step result"})
    ctx.sleep("30d")
"""


def seed(db: Path, flows: Path, steps: int) -> str:
    with SqliteStore(db) as store:
        run = ops.start(store, f"{flows}:long", {}, clock=FakeClock()).run
        Daemon(store, FakeClock(), DaemonConfig(concurrency=1)).tick()
    c = sqlite3.connect(str(db), isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    cols = [r[1] for r in c.execute("PRAGMA table_info(journal)")]
    # Step checkpoints #3 .. #steps-1 copied from #0, then the pending sleep moved last.
    c.execute(
        "UPDATE journal SET call_index = ? WHERE run_id = ? AND kind = 'sleep'",
        [steps - 1, run.run_id],
    )
    select = ", ".join("k.i" if col == "call_index" else col for col in cols)
    c.execute(
        f"INSERT INTO journal ({', '.join(cols)}) WITH RECURSIVE k(i) AS (SELECT 3 UNION ALL"
        f" SELECT i + 1 FROM k WHERE i < ?) SELECT {select} FROM k, journal"
        " WHERE run_id = ? AND call_index = 0",
        [steps - 2, run.run_id],
    )
    tcols = [r[1] for r in c.execute("PRAGMA table_info(timeline)")]
    # Copies of the run's first event, numbered after its newest (seq is per run).
    tselect = ", ".join("k.i + last.n" if col == "seq" else col for col in tcols)
    c.execute(
        f"INSERT INTO timeline ({', '.join(tcols)}) WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL"
        f" SELECT i + 1 FROM k WHERE i < ?) SELECT {tselect} FROM k,"
        " (SELECT * FROM timeline WHERE run_id = ? ORDER BY seq LIMIT 1),"
        " (SELECT MAX(seq) AS n FROM timeline WHERE run_id = ?) AS last",
        [steps, run.run_id, run.run_id],
    )
    c.execute("COMMIT")
    c.close()
    return run.run_id


def measure(db: Path, *args: str) -> tuple[int, int, float, float]:
    """Lines, bytes, median wall seconds and median CPU seconds of the process (the CPU
    figure leaves out the time other processes of a shared machine ran)."""
    cmd = [sys.executable, "-m", "flowctl", "--db", str(db), "show", *args]
    subprocess.run(cmd, capture_output=True, check=True)  # warm-up (and any migration)
    walls, cpus, out = [], [], b""
    for _ in range(3):
        t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, check=True).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(time.perf_counter() - t)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return out.count(b"\n"), len(out), statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    print("reproduce: PYTHONPATH=. .venv/bin/python benchmarks/show.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="flowctl-show-") as d:
        flows = Path(d) / "flows.py"
        flows.write_text(FLOWS)
        db = Path(d) / "show.db"
        run_id = seed(db, flows, args.steps)
        for extra in ([], ["--json"]):
            lines, size, wall, cpu = measure(db, run_id, *extra)
            label = " ".join(["flowctl show RUN", *extra])
            print(
                f"  {label:<24} {lines:>9,} lines {size:>13,} bytes {wall:7.2f} s wall"
                f" {cpu:7.2f} s CPU"
            )


if __name__ == "__main__":
    main()
