"""Real workloads beside the three-step one (issue 40): what a sleep and a failed try with
its retry cost, and how late wakes are while the daemon is saturated with fresh work.

Run by `benchmarks/throughput.py` (all figures) or alone:

    .venv/bin/python benchmarks/workloads.py                    # 9 rounds of 2,000 runs
    .venv/bin/python benchmarks/workloads.py --rounds 3 --runs 1000

Each round, alternating on fresh temporary databases, a real `flowctl daemon` (default
settings: worker processes) starts on an empty database and idles; then the runs are
enqueued in one transaction, and its CPU (user+system of the daemon and its worker
processes, from /proc) from then until every run completed, over the runs, is the CPU per
run (start-up, shutdown and the client's enqueue are not in it):

- three-step: `flows.py:three`; one-step: `flows.py:one` (the references);
- sleeping: `flows.py:nap` (a step, a durable 1 s sleep, a step): a park and a wake;
- retrying: `flows.py:retried` (one step that fails once, retried after 100 ms): a failed
  try, its durable retry and the successful try (the body does no I/O: before issue 40
  it created a marker file per run, whose kernel time was a third of the figure).

Saturated wakes: `--sleepers` runs of `nap` and `--fresh` three-step runs enqueued at once,
the sleepers first; every sleeper parks for 1 s and wakes while fresh runs are still
queued. Lateness is each wake's claim time minus its due time, as the daemon records it
(`woke` events, late_ms): p50, p99 and the largest.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.daemon import children, count, proc_cpu_s  # noqa: E402
from flowctl.client import Client  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")
IDLE_AFTER_START = 1.0  # seconds: the daemon and its workers start, then idle


def tree_cpu_s(pid: int) -> float:
    """User+system CPU seconds of `pid` and of the processes it started (its workers)."""
    return proc_cpu_s(pid) + sum(proc_cpu_s(c) for c in children(pid))


def serve(db: Path, enqueue: Callable[[Client], None], n: int) -> float:
    """A daemon serves `db` (made empty first): once it is up and idle, `enqueue` queues
    the runs; when `n` have completed it drains. Its CPU seconds (and its workers')
    between the two moments: start-up and shutdown are left out."""
    with Client(db):
        pass  # the schema, before the daemon opens the file
    args = [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--log-level", "warning"]
    proc = subprocess.Popen(
        args, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(IDLE_AFTER_START)
        while True:  # up and idle: its CPU no longer moves
            before = tree_cpu_s(proc.pid)
            time.sleep(0.2)
            if tree_cpu_s(proc.pid) - before < 0.02:
                break
        before = tree_cpu_s(proc.pid)
        with Client(db) as client:
            enqueue(client)
        give_up = time.monotonic() + 600
        while count(db, "completed") < n:
            if proc.poll() is not None or time.monotonic() > give_up:
                raise SystemExit(f"the daemon stopped (or took too long) before {n} completed")
            time.sleep(0.05)
        return tree_cpu_s(proc.pid) - before
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu_ms_per_run(tmp: Path, workflow: str, n: int) -> float:
    """Daemon CPU per run of `workflow`, enqueue excluded (it is the client's)."""
    inputs = [{"n": i} for i in range(n)]
    cpu = serve(tmp / f"{workflow}.db", lambda c: c.start_many(f"{FLOWS}:{workflow}", inputs), n)
    return 1000 * cpu / n


def wake_lateness(tmp: Path, sleepers: int, fresh: int) -> dict[str, float]:
    """Sleepers waking while fresh three-step runs are queued: lateness in ms."""
    db = tmp / f"wakes-{sleepers}-{fresh}.db"

    def enqueue(client: Client) -> None:
        client.start_many(f"{FLOWS}:nap", [{"n": i} for i in range(sleepers)])
        client.start_many(f"{FLOWS}:three", [{"n": i} for i in range(fresh)])

    serve(db, enqueue, sleepers + fresh)
    conn = sqlite3.connect(str(db))
    try:
        rows = conn.execute("SELECT data FROM timeline WHERE type = 'woke'").fetchall()
    finally:
        conn.close()
    late = sorted(float(json.loads(r[0])["late_ms"]) for r in rows)
    if len(late) != sleepers:
        raise SystemExit(f"{len(late)} wakes recorded for {sleepers} sleepers")
    return {
        "p50": late[len(late) // 2],
        "p99": late[min(len(late) - 1, int(0.99 * len(late)))],
        "max": late[-1],
    }


def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:.3f} ({min(values):.3f} to {max(values):.3f})"


def run_rounds(rounds: int, n: int, sleepers: int, fresh: int) -> None:
    """Alternate the workloads `rounds` times; print each round, then the medians."""
    names = ("three", "nap", "one", "retried")
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wakes: list[dict[str, float]] = []
    loads: list[float] = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="flowctl-work-") as d:
            for name in names:
                cpu[name].append(cpu_ms_per_run(Path(d), name, n))
            if sleepers:
                wakes.append(wake_lateness(Path(d), sleepers, fresh))
        loads.append(os.getloadavg()[0])
        print(
            f"  round {r + 1}: "
            + ", ".join(f"{k} {v[-1]:.3f}" for k, v in cpu.items())
            + " ms/run"
            + (f"; wakes p99 {wakes[-1]['p99']:.0f} ms" if wakes else "")
            + f" (load {loads[-1]:.2f})",
            flush=True,
        )
    sleep_ratio = [a / b for a, b in zip(cpu["nap"], cpu["three"], strict=True)]
    retry_ratio = [a / b for a, b in zip(cpu["retried"], cpu["one"], strict=True)]
    print(f"\nworkloads, {rounds} rounds of {n:,} runs, daemon at default settings;")
    print(f"host load average {min(loads):.2f} to {max(loads):.2f}, {os.cpu_count()} CPU(s)")
    print(f"  three-step          {spread(cpu['three'])} ms CPU per run")
    print(f"  sleeping            {spread(cpu['nap'])} ms CPU per run")
    print(f"    / three-step      {spread(sleep_ratio)}   (target <= 1.2)")
    print(f"  one-step            {spread(cpu['one'])} ms CPU per run")
    print(f"  one failed try + retry {spread(cpu['retried'])} ms CPU per run")
    print(f"    / one-step        {spread(retry_ratio)}   (target <= 1.5)")
    if not wakes:
        return
    print(f"  wakes beside fresh work ({sleepers:,} sleepers of 1 s, {fresh:,} fresh runs):")
    for key in ("p50", "p99", "max"):
        target = "   (target p99 < 100 ms)" if key == "p99" else ""
        print(f"    {key:4} {spread([w[key] for w in wakes])} ms late{target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--sleepers", type=int, default=1000)
    parser.add_argument("--fresh", type=int, default=2000)
    args = parser.parse_args()
    print("reproduce: .venv/bin/python benchmarks/workloads.py " + " ".join(sys.argv[1:]))
    run_rounds(args.rounds, args.runs, args.sleepers, args.fresh)


if __name__ == "__main__":
    main()
