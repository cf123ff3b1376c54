"""Engine figures, in process: checkpoint rate, replay cost, CLI start-up time.

    .venv/bin/python benchmarks/engine.py            # full sizes
    .venv/bin/python benchmarks/engine.py --quick    # smaller, for a smoke run

Prints figures, not pass/fail: the targets (issue 2) are printed beside them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from flowctl import ops  # noqa: E402
from flowctl.clock import FakeClock, SystemClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402
from flowctl.store.sqlite import SqliteStore as Store  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")


class CountingStore(Store):
    """Counts COMMITs, to show what one checkpoint costs in transactions."""

    commits = 0

    def _commit_group(self) -> None:
        CountingStore.commits += 1
        super()._commit_group()


def checkpoint_rate(tmp: Path, runs: int) -> None:
    store = CountingStore(tmp / "rate.db")
    clock = SystemClock()
    for i in range(runs):
        ops.start(store, f"{FLOWS}:three", {"n": i}, clock=clock)
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
    CountingStore.commits = 0
    t = time.perf_counter()
    done = daemon.tick()
    dt = time.perf_counter() - t
    steps = 3 * done
    per_run = CountingStore.commits / done
    print(f"checkpoints: {runs} runs of a 3-step workflow, one worker, synchronous=FULL")
    print(f"  {steps / dt:,.0f} steps/s ({done / dt:,.0f} runs/s, {dt:.2f} s)")
    print(
        f"  {per_run:.2f} transactions per run: 1 claim + 3 step checkpoints + 1 completion"
        " (target: one transaction per checkpoint)"
    )
    store.close()


def replay_cost(tmp: Path, sizes: list[int]) -> None:
    print("replay: resume a run after its sleep, replaying every journaled step")
    per_step = []
    for n in sizes:
        clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
        store = Store(tmp / f"replay-{n}.db", durability="normal")  # faster set-up only
        run = ops.start(store, f"{FLOWS}:many", {"n": n, "nap": 60}, clock=clock).run
        daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
        daemon.tick()
        assert store.get_run(run.run_id).status == "sleeping"
        clock.advance(timedelta(seconds=60))
        t = time.perf_counter()
        daemon.tick()
        dt = time.perf_counter() - t
        assert store.get_run(run.run_id).status == "completed"
        per_step.append(dt / n)
        print(f"  {n:>6,} journaled steps: {dt * 1000:7.1f} ms ({dt / n * 1e6:.1f} µs/step)")
        store.close()
    if len(sizes) > 1:
        ratio = per_step[-1] / per_step[0]
        print(
            f"  cost per step at {sizes[-1]:,} vs {sizes[0]:,}: x{ratio:.2f}"
            " (1.0 = linear; target: 10,000 steps under 0.5 s)"
        )


def startup(tmp: Path, repeats: int) -> None:
    import startup as startup_bench  # benchmarks/startup.py: wall and CPU, both bytecode cases

    startup_bench.startup(tmp, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    print("reproduce: .venv/bin/python benchmarks/engine.py" + (" --quick" if args.quick else ""))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)\n")
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-") as d:
        tmp = Path(d)
        checkpoint_rate(tmp, 200 if args.quick else 1000)
        print()
        replay_cost(tmp, [100, 1000] if args.quick else [1000, 10_000])
        print()
        startup(tmp, 3 if args.quick else 7)


if __name__ == "__main__":
    main()
