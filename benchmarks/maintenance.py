"""Figures for a long-lived install (issue 15): `flowctl check` per thousand runs, prune
speed, and a backup of a 1 GB database.

    .venv/bin/python benchmarks/maintenance.py             # 5,000 runs, a 1 GB backup
    .venv/bin/python benchmarks/maintenance.py --quick     # 1,000 runs, a 100 MB backup

Each run of the check and prune figures has five steps and sleeps at call #5, as a
follow-up workflow waiting for days would. Prints figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import subprocess
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
from flowctl.daemon.retention import prune  # noqa: E402
from flowctl.model import RunStatus  # noqa: E402
from flowctl.ops import maintenance  # noqa: E402
from flowctl.store import open_store  # noqa: E402

FLOW = """
from flowctl import workflow


@workflow
def followup(ctx, n=0):
    for i in range(5):
        ctx.step(f"step{i}", lambda: {"n": n, "i": i})
    ctx.sleep("7d")
    return n
"""


def make_runs(tmp: Path, runs: int) -> tuple[Path, FakeClock]:
    db = tmp / "runs.db"
    (tmp / "flow.py").write_text(FLOW)
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    store = open_store(db)
    for i in range(runs):
        ops.start(store, f"{tmp / 'flow.py'}:followup", {"n": i}, clock=clock)
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1, claim_batch=256))
    while daemon.tick():
        pass
    store.close()
    return db, clock


def check_figure(db: Path, runs: int) -> None:
    store = open_store(db)
    t0 = time.perf_counter()
    report = maintenance.check(store, None, clock=SystemClock())
    took = time.perf_counter() - t0
    assert report.checked == runs and not report.findings
    print(
        f"check, in process: {runs} sleeping runs (5 steps + a sleep each) in {took:.2f} s"
        f" = {took / runs * 1000:.3f} s per thousand runs (target: well under 1 s)"
    )
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    took = time.perf_counter() - t0
    print(
        f"check, `flowctl check` process (start-up included): {took:.2f} s for {runs} runs"
        f" ({done.stdout.strip().splitlines()[-1]})"
    )
    store.close()


def prune_figure(db: Path, clock: FakeClock, runs: int) -> None:
    store = open_store(db)
    clock.advance(timedelta(days=8))
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1, claim_batch=256))
    while daemon.tick():
        pass
    clock.advance(timedelta(days=31))
    t0 = time.perf_counter()
    gone = prune(store, [RunStatus.COMPLETED], clock.now() - timedelta(days=30))
    took = time.perf_counter() - t0
    assert len(gone) == runs
    print(
        f"prune: {runs} completed runs (5 steps, a sleep, timeline) in {took:.2f} s"
        f" = {runs / took:,.0f} runs/s, batches of 500 (one transaction each,"
        f" {took / max(1, runs // 500) * 1000:.0f} ms per batch)"
    )
    store.close()


def backup_figure(tmp: Path, megabytes: int) -> None:
    db = tmp / "big.db"
    store = open_store(db, durability="normal")
    clock = SystemClock()
    run = ops.start(store, f"{tmp / 'flow.py'}:followup", {}, clock=clock).run
    chunk = "x" * (1 << 20)
    for i in range(megabytes):
        store.append_output(run.run_id, 0, "fill", clock.now(), [("stdout", chunk + str(i))])
    store.close()
    size = db.stat().st_size
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "backup", str(tmp / "copy.db")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    took = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    print(
        f"backup: `flowctl backup` of a {size / 1e9:.2f} GB file in {took:.1f} s"
        f" ({size / 1e6 / took:,.0f} MB/s, VACUUM INTO + integrity_check + fsync)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int)
    args = parser.parse_args()
    runs = args.runs or (1000 if args.quick else 5000)
    with tempfile.TemporaryDirectory() as tmp:
        db, clock = make_runs(Path(tmp), runs)
        check_figure(db, runs)
        prune_figure(db, clock, runs)
        backup_figure(Path(tmp), 100 if args.quick else 1024)


if __name__ == "__main__":
    main()
