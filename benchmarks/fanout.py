"""Fan-out figures (issue 36): a 1,000-item ctx.map and 1,000 children, in process.

    .venv/bin/python benchmarks/fanout.py                # 1,000 branches each
    .venv/bin/python benchmarks/fanout.py --n 200        # smaller, for a smoke run

For each: wall time, journal rows, and memory per branch: the peak of Python allocations
(tracemalloc) while the daemon runs the fan-out, divided by the branches. Figures, not
pass/fail. A SQLite file in a temporary folder; the daemon is driven by tick().
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl import ops  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402
from flowctl.model import RunStatus  # noqa: E402
from flowctl.store import open_store  # noqa: E402

FLOWS = "benchmarks/fanout_flows.py"


def measure(db: Path, name: str, n: int, done: Callable[[Daemon], None]) -> None:
    clock = SystemClock()
    with open_store(db) as store:
        rid = ops.start(store, f"{FLOWS}:{name}", {"n": n}, clock=clock, cwd=str(ROOT)).run.run_id
        daemon = Daemon(store, clock, DaemonConfig(concurrency=8, lease=60, heartbeat=1))
        tracemalloc.start()
        start = time.perf_counter()
        while store.get_run(rid).status is not RunStatus.COMPLETED:
            done(daemon)
            if store.get_run(rid).status.is_terminal:
                break
        took = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        run = store.get_run(rid)
        rows = len(store.journal(rid))
        runs = 1 + len(store.children_of(rid))
    print(
        f"{name:<10} n={n:<6} {run.status}  {took:7.2f} s  {n / took:8,.0f} branches/s"
        f"  journal rows {rows}  runs {runs}"
        f"  peak {peak / 2**20:6.1f} MiB  {peak / n / 1024:6.1f} KiB per branch"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        measure(folder / "a.db", "map_async", args.n, lambda d: d.tick())
        measure(folder / "b.db", "map_sync", args.n, lambda d: d.tick())
        measure(folder / "c.db", "kids", args.n, lambda d: d.tick())


if __name__ == "__main__":
    main()
