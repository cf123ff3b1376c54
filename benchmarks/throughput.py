"""Throughput beside its limit and a peer, in one run, alternating (issue 14).

    .venv/bin/python benchmarks/throughput.py                    # 3 rounds of 5,000 runs
    .venv/bin/python benchmarks/throughput.py --quick            # 2 rounds of 1,000
    .venv/bin/python benchmarks/throughput.py --rounds 5 --runs 10000 --concurrency 32
    .venv/bin/python benchmarks/throughput.py --huey-python PATH # a Python with huey
    .venv/bin/python benchmarks/throughput.py --workers 2        # daemon --workers 2
    .venv/bin/python benchmarks/throughput.py --workloads only --rounds 9 --runs 2000

Each round measures, one after the other on fresh temporary databases:

- flowctl three-step: `--runs` runs of `benchmarks/flows.py:three` enqueued with
  `Client.start_many` (one transaction, as the reference loop enqueues), then `flowctl
  daemon --until-idle` at default settings (concurrency from flowctl's defaults unless
  `--concurrency`). workflows/s counts the enqueue time plus the daemon's busy time (its
  first `claimed` event to its last `completed` event, as recorded); the daemon alone is
  printed too, and the same with the runs enqueued one by one with `Client.start` (timed
  on a database of its own that no daemon runs). CPU ms per workflow is the daemon process's
  user+system CPU (wait4; with --workers, its worker processes' too) minus that of the same daemon running one run of the same
  workflow (start-up, the imports a first run makes, shutdown), divided by the runs
  after the first: what each further workflow costs. (Until session 14 an empty
  database was subtracted, which charged the first run's imports, about 0.1 s, to the
  runs: 0.1 ms per run at --quick's 1,000.)
- the reference loop: the limit on this machine. One thread, one sqlite3 connection, WAL,
  synchronous=FULL, doing the same durable work in batches of 32 runs: the runs are
  inserted (one transaction for all), then per batch: claim (one UPDATE per run, one
  transaction), each step's JSON result committed before the next step runs (one
  transaction per step), completion (one transaction). 5 transactions per 32 runs.
- flowctl one-step: `benchmarks/flows.py:one` the same way as the three-step figure
  (daemon alone: first claim to last completion).
- huey one-step: huey's SqliteHuey (synchronous=FULL), `huey_consumer -w 1`, the tasks
  enqueued first; first task to last task, as huey recorded them (benchmarks/huey_peer.py).
  huey is not a flowctl dependency: it is run with `--huey-python`, by default
  `.venv-bench/bin/python` when that exists (python3 -m venv .venv-bench &&
  .venv-bench/bin/pip install huey), else skipped with a note.

Medians over the rounds, with the range. Figures, not pass/fail: the targets (issue 14)
are printed beside them.
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.workloads import run_rounds  # noqa: E402
from flowctl.client import Client  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")
BATCH = 32


# ---------------------------------------------------------------------------
# flowctl


def run_daemon(
    db: Path, concurrency: int | None, workers: int | None, env: dict[str, str] | None = None
) -> tuple[float, int]:
    """Run `flowctl daemon --until-idle` on db (in `env`, else this environment); return
    (CPU seconds, its worker processes' included, and the exit code)."""
    args = [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--log-level", "warning"]
    args += ["--until-idle"]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]
    if workers is not None:
        args += ["--workers", str(workers)]
    proc = subprocess.Popen(
        args, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, proc.returncode


def warm_daemon_cpu(
    tmp: Path, workflow: str, concurrency: int | None, workers: int | None
) -> float:
    """CPU of a daemon that starts, runs one run of `workflow` and exits: start-up, the
    imports a first run makes (the engine, the workflow file) and shutdown, subtracted
    per round so that what is left is the CPU each further workflow costs."""
    db = tmp / f"warm-{workflow}.db"
    with Client(db) as client:
        client.start(f"{FLOWS}:{workflow}", {"n": 0})
    cpu, code = run_daemon(db, concurrency, workers)
    if code != 0:
        raise SystemExit(f"the daemon exited {code} on a one-run database")
    return cpu


def flowctl_runs(
    tmp: Path, name: str, workflow: str, n: int, concurrency: int | None, workers: int | None
) -> dict[str, float]:
    db = tmp / f"{name}.db"
    target = f"{FLOWS}:{workflow}"
    with Client(tmp / f"{name}-one-by-one.db") as client:  # enqueued only, never run
        t, cpu0 = time.perf_counter(), time.process_time()
        for i in range(n):
            client.start(target, {"n": i})
        start_s = time.perf_counter() - t
        start_cpu = time.process_time() - cpu0
    with Client(db) as client:  # in one transaction, as the reference loop enqueues
        t = time.perf_counter()
        client.start_many(target, [{"n": i} for i in range(n)])
        many_s = time.perf_counter() - t
    warm = warm_daemon_cpu(tmp, workflow, concurrency, workers)
    cpu, code = run_daemon(db, concurrency, workers)
    if code != 0:
        raise SystemExit(f"the daemon exited {code}")
    conn = sqlite3.connect(str(db))
    try:
        done = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'completed'").fetchone()[0]
        first, last = conn.execute(
            "SELECT (SELECT MIN(at) FROM timeline WHERE type = 'claimed'),"
            " (SELECT MAX(at) FROM timeline WHERE type = 'completed')"
        ).fetchone()
    finally:
        conn.close()
    if done != n:
        raise SystemExit(f"only {done} of {n} runs completed")
    busy_s = (last - first) / 1e6
    return {
        "per_s": n / (many_s + busy_s),
        "one_by_one_per_s": n / (start_s + busy_s),
        "daemon_per_s": n / busy_s,
        "many_per_s": n / many_s,
        "enqueue_per_s": n / start_s,
        "cpu_ms": 1000 * max(0.0, cpu - warm) / (n - 1),
        "enqueue_cpu_ms": 1000 * start_cpu / n,
    }


# ---------------------------------------------------------------------------
# the reference loop


REFERENCE_SCHEMA = """
CREATE TABLE runs (run_id INTEGER PRIMARY KEY, status TEXT NOT NULL, input TEXT NOT NULL,
                   result TEXT, lease_until INTEGER, fence INTEGER NOT NULL DEFAULT 0);
CREATE INDEX runs_status ON runs(status, run_id);
CREATE TABLE journal (run_id INTEGER NOT NULL, call_index INTEGER NOT NULL, value TEXT,
                      PRIMARY KEY (run_id, call_index)) WITHOUT ROWID;
"""


def reference_loop(tmp: Path, n: int) -> dict[str, float]:
    """The limit: the same durable work as a three-step run, without a framework."""
    db = tmp / "reference.db"
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(REFERENCE_SCHEMA)
    t, cpu0 = time.perf_counter(), time.process_time()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO runs (status, input) VALUES ('queued', ?)",
        [(json.dumps({"n": i}),) for i in range(n)],
    )
    conn.execute("COMMIT")
    lease = 15_000_000
    while True:
        now = time.time_ns() // 1000
        conn.execute("BEGIN IMMEDIATE")
        batch = conn.execute(
            "SELECT run_id, input, fence FROM runs WHERE status = 'queued' ORDER BY run_id LIMIT ?",
            [BATCH],
        ).fetchall()
        if not batch:
            conn.execute("COMMIT")
            break
        conn.executemany(
            "UPDATE runs SET status = 'running', lease_until = ?, fence = ? WHERE run_id = ?",
            [(now + lease, fence + 1, rid) for rid, _, fence in batch],
        )
        conn.execute("COMMIT")
        values = {rid: json.loads(inp)["n"] for rid, inp, _ in batch}
        for index in range(3):  # each step's result is durable before the next step runs
            for rid in values:
                values[rid] += 1
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO journal (run_id, call_index, value) SELECT ?, ?, ? FROM runs"
                " WHERE run_id = ? AND fence = ? AND status = 'running'",
                [(rid, index, json.dumps(v), rid, fence + 1) for (rid, _, fence), v in
                 zip(batch, values.values(), strict=True)],
            )  # fmt: skip
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "UPDATE runs SET status = 'completed', result = ?, lease_until = NULL"
            " WHERE run_id = ? AND fence = ?",
            [(json.dumps(values[rid]), rid, fence + 1) for rid, _, fence in batch],
        )
        conn.execute("COMMIT")
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu0
    done = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'completed'").fetchone()[0]
    steps = conn.execute("SELECT COUNT(*) FROM journal").fetchone()[0]
    conn.close()
    if done != n or steps != 3 * n:
        raise SystemExit(f"reference loop: {done} runs, {steps} steps for {n} runs")
    return {"per_s": n / wall, "cpu_ms": 1000 * cpu / n}


# ---------------------------------------------------------------------------
# huey


def huey_python(arg: str | None) -> str | None:
    candidates = [arg] if arg else [str(ROOT / ".venv-bench" / "bin" / "python"), sys.executable]
    for py in candidates:
        if py and Path(py).exists():
            ok = subprocess.run([py, "-c", "import huey"], capture_output=True).returncode == 0
            if ok:
                return py
    return None


def huey_tasks(tmp: Path, python: str, n: int) -> dict[str, float]:
    db = tmp / "huey.db"
    out = subprocess.run(
        [python, str(ROOT / "benchmarks" / "huey_peer.py"), str(db), str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"per_s": n / got["busy_s"], "cpu_ms": 1000 * got["cpu_s"] / n}


# ---------------------------------------------------------------------------


def med(rounds: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in rounds]
    m = statistics.median(values)
    fmt = "{:,.3f}" if m < 10 else "{:,.0f}"
    spread = f" ({fmt.format(min(values))} to {fmt.format(max(values))})" if len(values) > 1 else ""
    return fmt.format(m) + spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="runs per figure per round (default 5,000)")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 3)")
    parser.add_argument("--concurrency", type=int, help="daemon --concurrency (default: flowctl's)")
    parser.add_argument("--workers", type=int, help="daemon --workers (default: flowctl's, 1)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1,000 runs")
    parser.add_argument("--huey-python", help="a Python with huey installed")
    parser.add_argument(
        "--workloads",
        choices=("also", "only", "no"),
        default="also",
        help="the sleeping, retrying and saturated-wake workloads (benchmarks/workloads.py)",
    )
    args = parser.parse_args()
    n = args.runs or (1000 if args.quick else 5000)
    rounds = args.rounds or (2 if args.quick else 3)
    print("reproduce: .venv/bin/python benchmarks/throughput.py " + " ".join(sys.argv[1:]))
    print(
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()}"
        f" CPU(s), load {os.getloadavg()[0]:.1f}; {rounds} round(s) of {n:,} runs per figure;"
        f" PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}"
    )
    if args.workloads == "only":
        run_rounds(rounds, n, sleepers=1000, fresh=2000)
        return
    hpy = huey_python(args.huey_python)
    if hpy is None:
        print(
            "note: huey is not installed for any Python tried, so its figure is skipped"
            " (python3 -m venv .venv-bench && .venv-bench/bin/pip install huey)"
        )
    three: list[dict[str, float]] = []
    ref: list[dict[str, float]] = []
    one: list[dict[str, float]] = []
    hu: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="flowctl-tput-") as d:
        for r in range(rounds):
            tmp = Path(d) / f"round-{r}"
            tmp.mkdir()
            three.append(flowctl_runs(tmp, "three", "three", n, args.concurrency, args.workers))
            ref.append(reference_loop(tmp, n))
            three[-1]["ratio"] = three[-1]["per_s"] / ref[-1]["per_s"]
            three[-1]["daemon_ratio"] = three[-1]["daemon_per_s"] / ref[-1]["per_s"]
            three[-1]["one_by_one_ratio"] = three[-1]["one_by_one_per_s"] / ref[-1]["per_s"]
            one.append(flowctl_runs(tmp, "one", "one", n, args.concurrency, args.workers))
            if hpy is not None:
                hu.append(huey_tasks(tmp, hpy, n))
                one[-1]["vs_huey"] = one[-1]["daemon_per_s"] / hu[-1]["per_s"]
            print(
                f"  round {r + 1}: three-step {three[-1]['per_s']:,.0f}/s,"
                f" reference {ref[-1]['per_s']:,.0f}/s, one-step {one[-1]['daemon_per_s']:,.0f}/s"
                + (f", huey {hu[-1]['per_s']:,.0f}/s" if hu else ""),
                flush=True,
            )
    options = (("concurrency", args.concurrency), ("workers", args.workers))
    c = ", ".join(f"--{k} {v}" for k, v in options if v) or "default settings"
    print()
    print(f"flowctl three-step workflows/s, then the daemon ({c}):")
    print(f"  start_many included     {med(three, 'per_s')} /s   (one enqueue transaction)")
    print(f"  Client.start included   {med(three, 'one_by_one_per_s')} /s   (one by one)")
    print(f"  daemon alone            {med(three, 'daemon_per_s')} /s")
    print(f"  start_many alone        {med(three, 'many_per_s')} /s")
    print(f"  Client.start alone      {med(three, 'enqueue_per_s')} /s")
    print(f"  daemon CPU per workflow {med(three, 'cpu_ms')} ms   (target <= 0.25 ms)")
    print(f"  Client.start CPU/run    {med(three, 'enqueue_cpu_ms')} ms")
    print(f"reference loop (one thread, batches of {BATCH}, WAL, synchronous=FULL):")
    print(f"  workflows/s             {med(ref, 'per_s')} /s   (its enqueue: one transaction)")
    print(f"  CPU per workflow        {med(ref, 'cpu_ms')} ms")
    print(f"  flowctl / reference     {med(three, 'ratio')}   (target >= 0.25; start_many)")
    print(f"    daemon alone          {med(three, 'daemon_ratio')}")
    print(f"    Client.start one by one {med(three, 'one_by_one_ratio')}")
    print(f"one-step tasks/s ({c}):")
    print(f"  flowctl daemon          {med(one, 'daemon_per_s')} /s")
    print(f"  flowctl daemon CPU/task {med(one, 'cpu_ms')} ms")
    if hu:
        print(f"  huey -w 1 (SQLite)      {med(hu, 'per_s')} /s")
        print(f"  huey consumer CPU/task  {med(hu, 'cpu_ms')} ms (start-up included)")
        print(f"  flowctl / huey          {med(one, 'vs_huey')}   (target >= 1.5)")
    else:
        print("  huey -w 1               skipped: huey not installed (see the note above)")
    if args.workloads == "also":
        print()
        run_rounds(rounds, n, sleepers=1000, fresh=2000)


if __name__ == "__main__":
    main()
