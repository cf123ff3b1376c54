"""The scaling curve (issue 14, item 9): three-step runs/s by concurrency and worker
processes, and the same on a database that already holds a million finished runs.

    .venv/bin/python benchmarks/scaling.py                         # 3,000 runs per point
    .venv/bin/python benchmarks/scaling.py --runs 5000 --rounds 3
    .venv/bin/python benchmarks/scaling.py --concurrency 8 --workers 1,2 --big 0   # no 1M part
    .venv/bin/python benchmarks/scaling.py --workflow heavy --concurrency 8 --big 0 --runs 1000

Each point: `--runs` runs of `benchmarks/flows.py:three` queued in one transaction
(`Client.start_many`), then `flowctl daemon --until-idle -c C -w W` executes them; the
rate is runs / (first `claimed` to last `completed`, as the timeline recorded them), so
start-up and enqueue are not in it. CPU ms per run is the daemon's user+system CPU,
worker processes included (wait4 counts the children it reaped), minus that of the same
daemon on an empty database, divided by the runs. Points are measured in rounds, each
round visiting every point once (alternating, so a change in the machine's load spreads
over all of them); medians with the range.

The million-run part seeds `--big` completed three-step runs (a real run's rows — runs,
journal, timeline — copied in SQL) and ANALYZEs the file, as an operator might while every
run is finished: the statistics that once made the daemon's liveness pass scan every run
(tests/test_analyzed_plans.py). Then it measures `-c 8` at workers 1 and 2 on it and on an
empty database, alternating. Target: the rate drops by at most 10%.
"""

from __future__ import annotations

import argparse
import os
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


def daemon(db: Path, concurrency: int, workers: int) -> tuple[float, float]:
    """`flowctl daemon --until-idle` on db: (CPU seconds with its workers, wall seconds)."""
    args = [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--log-level", "warning"]
    args += ["--until-idle", "-c", str(concurrency), "--workers", str(workers)]
    t = time.perf_counter()
    proc = subprocess.Popen(args, cwd=str(ROOT), stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the daemon exited {os.waitstatus_to_exitcode(status)}: {args}")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - t


WORKFLOW = ["three"]  # --workflow: `heavy` burns 2 ms of CPU in each step body


def enqueue(db: Path, n: int) -> None:
    with Client(db) as client:
        for i in range(0, n, 1000):
            inputs = [{"n": j} for j in range(i, min(n, i + 1000))]
            client.start_many(f"{FLOWS}:{WORKFLOW[0]}", inputs)


def point(db: Path, n: int, concurrency: int, workers: int, idle_cpu: float) -> dict[str, float]:
    """Queue n runs in db (which may hold others, finished), execute them, measure."""
    Client(db).close()  # creates the file's tables if it is new
    since = time.time_ns() // 1000  # the runs queued now: created at or after this (µs)
    enqueue(db, n)
    cpu, _ = daemon(db, concurrency, workers)
    conn = sqlite3.connect(str(db))
    try:
        first, last, done = conn.execute(
            "SELECT MIN(CASE WHEN type = 'claimed' THEN at END),"
            " MAX(CASE WHEN type = 'completed' THEN at END),"
            " SUM(type = 'completed') FROM timeline WHERE run_id IN (SELECT run_id FROM runs"
            " WHERE status = 'completed' AND created_at >= ?)",  # a seq numbers one run's events
            [since],
        ).fetchone()
    finally:
        conn.close()
    if done != n:
        raise SystemExit(f"only {done} of {n} runs completed (c={concurrency}, w={workers})")
    return {"per_s": n / ((last - first) / 1e6), "cpu_ms": 1000 * max(0.0, cpu - idle_cpu) / n}


def idle(tmp: Path, concurrency: int, workers: int) -> float:
    db = tmp / f"idle-{concurrency}-{workers}.db"
    Client(db).close()
    return daemon(db, concurrency, workers)[0]


def seed_finished(db: Path, n: int) -> None:
    """n completed three-step runs: one real run, its rows copied n times in SQL."""
    enqueue(db, 1)
    daemon(db, 1, 1)
    c = sqlite3.connect(str(db), isolation_level=None)
    c.execute("PRAGMA synchronous = OFF")
    (rid,) = c.execute("SELECT run_id FROM runs").fetchone()
    tables = {
        "runs": {"run_id": "printf('r%015d', i)", "created_at": "created_at - i * 1000",
                 "finished_at": "finished_at - i * 1000", "input": "json_object('n', i)"},
        "journal": {"run_id": "printf('r%015d', i)"},
        "timeline": {"run_id": "printf('r%015d', i)", "at": "at - i * 1000"},
    }  # fmt: skip
    c.execute("BEGIN IMMEDIATE")
    for table, varied in tables.items():
        cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
        select = ", ".join(varied.get(col, col) for col in cols)
        c.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL"
            f" SELECT i + 1 FROM k WHERE i < ?) SELECT {select} FROM k,"
            f" (SELECT * FROM {table} WHERE run_id = ?)",
            [n, rid],
        )
    c.execute("COMMIT")
    c.execute("ANALYZE")
    c.close()


def med(values: list[float]) -> str:
    m = statistics.median(values)
    fmt = "{:,.3f}" if m < 10 else "{:,.0f}"
    spread = f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(values) > 1 else ""
    return fmt.format(m) + spread


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000, help="runs per point (default 3,000)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    parser.add_argument("--concurrency", type=ints, default=[1, 2, 8, 32])
    parser.add_argument("--workers", type=ints, default=[1, 2])
    parser.add_argument("--big", type=int, default=1_000_000, help="finished runs; 0: skip")
    parser.add_argument("--workflow", default="three", help="in benchmarks/flows.py: three, heavy")
    args = parser.parse_args()
    WORKFLOW[0] = args.workflow
    print("reproduce: .venv/bin/python benchmarks/scaling.py " + " ".join(sys.argv[1:]))
    print(
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()}"
        f" CPU(s), load {os.getloadavg()[0]:.1f}; {args.rounds} round(s) of {args.runs:,} runs"
    )
    points = [(c, w) for w in args.workers for c in args.concurrency]
    got: dict[tuple[int, int], list[dict[str, float]]] = {p: [] for p in points}
    with tempfile.TemporaryDirectory(prefix="flowctl-scale-") as d:
        tmp = Path(d)
        idles = {p: idle(tmp, *p) for p in points}
        for r in range(args.rounds):
            for c, w in points:
                db = tmp / f"r{r}-c{c}-w{w}.db"
                got[(c, w)].append(point(db, args.runs, c, w, idles[(c, w)]))
                db.unlink()
            print(f"  round {r + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"\n{args.workflow} runs/s (daemon busy time), CPU ms per run with its workers:")
        print("  concurrency " + "".join(f"{'workers ' + str(w):>34}" for w in args.workers))
        for c in args.concurrency:
            cells = [
                f"{med([x['per_s'] for x in got[(c, w)]]):>20} /s"
                f" {med([x['cpu_ms'] for x in got[(c, w)]]):>8} ms"
                for w in args.workers
            ]
            print(f"  {c:>11} " + "".join(f"{cell:>34}" for cell in cells))
        if args.big:
            big(tmp, args, idles)


def big(tmp: Path, args: argparse.Namespace, idles: dict[tuple[int, int], float]) -> None:
    base = tmp / "big-seed.db"
    t = time.perf_counter()
    seed_finished(base, args.big)
    print(f"\nseeded {args.big:,} finished runs in {time.perf_counter() - t:.0f} s")
    rates: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for w in args.workers:
            for label in ("empty", "big"):
                # The big file is reused: each point adds --runs finished runs to its million.
                db = base if label == "big" else tmp / f"{label}-{r}-{w}.db"
                got = point(db, args.runs, 8, w, idles.get((8, w), 0.0))
                rates.setdefault((label, w), []).append(got["per_s"])
                if db != base:
                    db.unlink()
    print(f"three-step runs/s at -c 8 on an empty database and on one with {args.big:,} finished:")
    for w in args.workers:
        empty, full = rates[("empty", w)], rates[("big", w)]
        drop = 1 - statistics.median(full) / statistics.median(empty)
        print(
            f"  workers {w}: empty {med(empty)} /s, {args.big:,} finished {med(full)} /s,"
            f" change {-100 * drop:+.1f}%   (target: a drop of at most 10%)"
        )


if __name__ == "__main__":
    main()
