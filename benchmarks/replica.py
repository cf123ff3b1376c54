"""A standby copy's recovery point and restore time (issue 42): how much a Litestream
replica can lose when everything is killed, and how long `flowctl restore` takes.

    .venv/bin/python benchmarks/replica.py                 # 5 trials per sync interval
    .venv/bin/python benchmarks/replica.py --trials 10 --preload 50000

Each trial, on a fresh database preloaded with `--preload` queued runs (one transaction,
so the file has a realistic size): `flowctl replicate file://...` starts (its own process
group, Litestream its child), a writer in this process starts runs one at a time (each
its own durable commit) for 2-4 s, then the replicate process group is killed with
SIGKILL at once. `flowctl restore` then writes the replica to a new file. Figures: runs
committed but not in the restored file, the window they span (the kill's instant less the
newest restored run's created_at: what can be lost), and the restore's wall time (the
`flowctl restore` command: Litestream's restore and the integrity check), for
`--sync-interval` 1s (the default) and 200ms. Medians and maxima over the trials.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl.client import Client  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")


def trial(tmp: Path, sync: str, preload: int, seed: int) -> dict[str, float]:
    db, rep, out = tmp / "f.db", tmp / "replica", tmp / "restored.db"
    with Client(db) as client:
        client.start_many(f"{FLOWS}:one", [{"n": i} for i in range(preload)])
    with open(tmp / "replicate.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flowctl",
                "--db",
                str(db),
                "replicate",
                f"file://{rep}",
                "--sync-interval",
                sync,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(ROOT),
        )
    try:
        deadline = time.monotonic() + 30
        while not (rep / "ltx").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)  # past the first snapshot
        with Client(db) as client:
            stop_at = time.monotonic() + random.Random(seed).uniform(2.0, 4.0)
            while time.monotonic() < stop_at:
                client.start(f"{FLOWS}:one", {"n": -1})
            killed_at = time.time()
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", "restore", f"file://{rep}", str(out)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
    )
    restore_s = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"restore failed: {done.stderr}")
    before = _runs(db)
    after = _runs(out)
    newest = max(after.values())
    lost = [rid for rid in before if rid not in after]
    return {
        "lost_runs": len(lost),
        "window_s": max(0.0, killed_at - newest / 1e6) if lost else 0.0,
        "restore_s": restore_s,
        "mb": db.stat().st_size / 1e6,
        "written": len(before) - preload,
    }


def _runs(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(str(db))
    try:
        return dict(conn.execute("SELECT run_id, created_at FROM runs").fetchall())
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--preload", type=int, default=20_000, help="queued runs in the file")
    parser.add_argument("--verbose", action="store_true", help="each trial's figures")
    args = parser.parse_args()
    print("reproduce: .venv/bin/python benchmarks/replica.py " + " ".join(sys.argv[1:]))
    print(f"{os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}; {args.trials} trials")
    for sync in ("1s", "200ms"):
        got = []
        with tempfile.TemporaryDirectory(prefix="flowctl-replica-") as d:
            for i in range(args.trials):
                tmp = Path(d) / f"t{i}"
                tmp.mkdir()
                got.append(trial(tmp, sync, args.preload, i))
                if args.verbose:
                    print(f"  {sync} trial {i}: {got[-1]}")
        print(
            f"--sync-interval {sync}: lost runs median {statistics.median(g['lost_runs'] for g in got):.0f}"
            f" max {max(g['lost_runs'] for g in got):.0f} (of ~{statistics.median(g['written'] for g in got):.0f}"
            f" written); loss window median {statistics.median(g['window_s'] for g in got):.2f} s"
            f" max {max(g['window_s'] for g in got):.2f} s; restore median"
            f" {statistics.median(g['restore_s'] for g in got):.2f} s max"
            f" {max(g['restore_s'] for g in got):.2f} s ({got[0]['mb']:.1f} MB file)"
        )


if __name__ == "__main__":
    main()
