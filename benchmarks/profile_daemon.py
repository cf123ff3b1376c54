"""Where a three-step workflow's time goes: SQL statements per run, a cProfile of the
daemon's own Python work, and (if py-spy is installed) a py-spy profile of every thread
of a real `flowctl daemon` process.

    .venv/bin/python benchmarks/profile_daemon.py                  # 5,000 runs
    .venv/bin/python benchmarks/profile_daemon.py --runs 1000 --top 25
    .venv/bin/python benchmarks/profile_daemon.py --no-py-spy
    .venv/bin/python benchmarks/profile_daemon.py --no-py-spy --cpu-clock   # CPU, not wall
    .venv/bin/python benchmarks/profile_daemon.py --instructions --runs 300  # callgrind only

Three parts, each on its own temporary database:

- statements: 200 runs enqueued with `Client.start`, then executed by an in-process
  `Daemon.tick()` (concurrency 1); every statement SQLite runs is counted with
  `sqlite3.Connection.set_trace_callback` (here, never in product code) and grouped by
  its first words, per run.
- cProfile: the same in-process daemon executing `--runs` workflows in the profiled
  thread (concurrency 1, so cProfile sees all the work); the top functions by own time
  and by cumulative time, as µs per workflow.
- instructions (`--instructions`, alone): a real `flowctl daemon --until-idle` under
  valgrind's callgrind, once on an empty database and once with `--runs` runs queued;
  the difference per run is the user-space instructions one three-step workflow costs.
  Unlike CPU time it does not move with the machine's load or stolen time, so two
  versions of the hot path can be compared on a shared box. Kernel work (fsync, futex,
  context switches) is not counted: COMMITs and switches per run are printed beside it.
- py-spy: `py-spy record --idle --threads` on `flowctl daemon --until-idle -c 8`
  executing `--runs` workflows: the share of samples per thread and per leaf frame, so
  lock and COMMIT waits show up beside CPU work.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl.client import Client  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")


def connection_of(store: Any) -> sqlite3.Connection:
    """The store's sqlite3 connection, wherever the backend keeps it (benchmark only)."""
    for obj in (store, *vars(store).values()):
        for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
            if isinstance(value, sqlite3.Connection):
                return value
    raise SystemExit("could not find the store's sqlite3 connection")


def enqueue(db: Path, n: int) -> float:
    """n three-step runs through Client.start; returns the seconds it took."""
    with Client(db) as client:
        t = time.perf_counter()
        for i in range(n):
            client.start(f"{FLOWS}:three", {"n": i})
        return time.perf_counter() - t


def _shape(sql: str) -> str:
    """A statement's kind: its first words, with the table it touches."""
    sql = " ".join(sql.split())
    m = re.match(
        r"(SELECT .*? FROM \w+|INSERT( OR \w+)? INTO \w+|UPDATE \w+ SET \w+|DELETE FROM \w+|"
        r"PRAGMA \w+|BEGIN \w*|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)",
        sql,
    )
    shape = m.group(0) if m else sql[:40]
    if shape.startswith("SELECT") and len(shape) > 60:
        shape = "SELECT ... FROM " + shape.rsplit(" ", 1)[-1]
    return shape


def statements(tmp: Path, n: int) -> None:
    db = tmp / "statements.db"
    seen: collections.Counter[str] = collections.Counter()
    last = [""]

    def trace(sql: str) -> None:
        # SQLite reports each statement of a trigger's program with the text of the
        # statement that fired it: a repeat of the same text is trigger work, not a new
        # statement, and is counted apart.
        seen.update(["(trigger steps)" if sql == last[0] else _shape(sql)])
        last[0] = sql

    with Client(db) as client:
        conn = connection_of(client.store)
        conn.set_trace_callback(trace)
        for i in range(n):
            client.start(f"{FLOWS}:three", {"n": i})
        enq = dict(seen)
        seen.clear()
        daemon = Daemon(client.store, SystemClock(), DaemonConfig(concurrency=1, claim_batch=1))
        done = daemon.tick()
        conn.set_trace_callback(None)
    assert done == n, f"{done} of {n} runs executed"
    total = _real(seen)
    print(f"statements: {n} three-step runs, one claim per run (claim_batch=1), concurrency 1")
    print(
        f"  enqueue (Client.start): {_real(enq) / n:.1f} statements per run: "
        + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(enq.items(), key=lambda kv: -kv[1]))
    )
    print(f"  execution: {total / n:.1f} statements per run")
    for shape, count in seen.most_common():
        print(f"    {count / n:6.2f}  {shape}")


def _real(counts: dict[str, int]) -> int:
    return sum(v for k, v in counts.items() if k != "(trigger steps)")


def cprofile(tmp: Path, n: int, top: int, cpu_clock: bool = False) -> None:
    db = tmp / "cprofile.db"
    enqueue(db, n)
    with Client(db) as client:
        daemon = Daemon(client.store, SystemClock(), DaemonConfig(concurrency=1))
        # --cpu-clock: time is the profiled thread's CPU (time.thread_time), so waits for
        # fsync and for a loaded machine's other processes drop out of every figure.
        prof = cProfile.Profile(time.thread_time) if cpu_clock else cProfile.Profile()
        cpu0, t0 = time.process_time(), time.perf_counter()
        prof.enable()
        done = daemon.tick()
        prof.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    assert done == n, f"{done} of {n} runs executed"
    print(
        f"cProfile: {n:,} three-step runs executed in process by Daemon.tick() (concurrency 1):"
        f" {wall / n * 1e3:.3f} ms wall, {cpu / n * 1e3:.3f} ms CPU per workflow (profiler on)"
        + ("; times below are thread CPU (--cpu-clock)" if cpu_clock else "")
    )
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(file).name}:{line}({fn})" if line else fn
        rows.append((where, nc, tt, ct, str(ROOT / "flowctl") in file))
    print(f"  top {top} by own time (µs per workflow, calls per workflow):")
    for where, nc, tt, ct, _ in sorted(rows, key=lambda r: -r[2])[:top]:
        print(
            f"    {tt / n * 1e6:8.1f} µs own {ct / n * 1e6:8.1f} µs cum {nc / n:7.1f} calls  {where}"
        )
    print(f"  top {top} flowctl functions by cumulative time:")
    ours = [r for r in rows if r[4]]
    for where, nc, _tt, ct, _ in sorted(ours, key=lambda r: -r[3])[:top]:
        print(f"    {ct / n * 1e6:8.1f} µs cum {nc / n:7.1f} calls  {where}")


def pyspy(tmp: Path, n: int, concurrency: int, top: int) -> None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy: not installed (pip install py-spy into the venv); skipped")
        return
    db = tmp / "pyspy.db"
    enqueue(db, n)
    out = tmp / "pyspy.txt"
    cmd = [
        exe, "record", "--idle", "--threads", "--nonblocking", "-r", "200", "-f", "raw",
        "-o", str(out), "--",
        sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--log-level", "warning",
        "--until-idle", "--concurrency", str(concurrency),
    ]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not out.exists():
        print(f"py-spy: failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        return
    per_thread: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    waits: collections.Counter[str] = collections.Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        count = int(count_s)
        frames = stack.split(";")
        thread = frames[0].partition(": ")[2] or frames[0]
        thread = re.sub(r"-\d+$", "-N", thread)
        frames = frames[1:] or ["(no frame)"]
        per_thread[thread] += count
        leaf[f"{thread}: {_frame(frames[-1])}"] += count
        waits[f"{thread}: {_waiting_on(frames)}"] += count
        total += count
    print(
        f"py-spy: `flowctl daemon --until-idle -c {concurrency}` on {n:,} three-step runs"
        f" ({wall:.1f} s with start-up; {total:,} samples at 200 Hz, idle included)"
    )
    print("  share of samples per thread kind:")
    for thread, c in per_thread.most_common():
        print(f"    {100 * c / total:5.1f}%  {thread}")
    print(f"  top {top} (thread: what it is doing, by the nearest flowctl frame):")
    for what, c in waits.most_common(top):
        print(f"    {100 * c / total:5.1f}%  {what}")
    print(f"  top {top} leaf frames:")
    for what, c in leaf.most_common(top):
        print(f"    {100 * c / total:5.1f}%  {what}")


def instructions(tmp: Path, n: int, concurrency: int) -> None:
    """User-space instructions per three-step workflow in a real daemon (callgrind)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("instructions: valgrind not installed; skipped")
        return
    counts = []
    # A first daemon run compiles and caches flowctl's bytecode, which the counted runs
    # must not pay (the count would differ by ~250 M instructions).
    warm = tmp / "instr-warm.db"
    enqueue(warm, 0)
    subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(warm), "daemon", "--until-idle"],
        capture_output=True, cwd=ROOT, check=False,
    )  # fmt: skip
    # One run, then n more: the difference is what each further workflow costs, not the
    # imports a first run makes (the engine, the workflow file: ~100 M instructions).
    for runs in (1, n + 1):
        db = tmp / f"instr{runs}.db"
        enqueue(db, runs)
        cmd = [
            valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--log-level",
            "warning", "--until-idle", "--concurrency", str(concurrency),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode != 0 or found is None:
            print(f"instructions: callgrind failed ({proc.returncode}): {proc.stderr[-300:]}")
            return
        counts.append(int(found.group(1)))
        if runs:
            with sqlite3.connect(db) as conn:
                left = conn.execute(
                    "SELECT COUNT(*) FROM runs WHERE status != 'completed'"
                ).fetchone()[0]
            if left:
                print(f"instructions: {left} of {runs} runs did not complete; no figure")
                return
    per = (counts[1] - counts[0]) / n
    print(
        f"instructions: `flowctl daemon --until-idle -c {concurrency}` under callgrind,"
        f" {n:,} three-step runs: {per / 1e6:.3f} M instructions per workflow"
        f" (one run {counts[0] / 1e6:.0f} M, with {n:,} more {counts[1] / 1e6:.0f} M)"
    )


def _frame(frame: str) -> str:
    m = re.match(r"\s*(.*?) \((.*?)(?::(\d+))?\)", frame)
    if not m:
        return frame.strip()
    return f"{m.group(1)} ({Path(m.group(2)).name}:{m.group(3) or ''})"


def _waiting_on(frames: list[str]) -> str:
    """The innermost flowctl frame, plus the leaf when the leaf is outside flowctl."""
    mine = [f for f in frames if "flowctl/" in f]
    inner = _frame(mine[-1]) if mine else "-"
    last = _frame(frames[-1])
    return inner if mine and mine[-1] == frames[-1] else f"{inner} -> {last}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument(
        "--concurrency", type=int, default=32, help="for the py-spy and instruction parts"
    )
    parser.add_argument("--no-py-spy", action="store_true")
    parser.add_argument(
        "--cpu-clock", action="store_true", help="cProfile on thread CPU time, not wall time"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="only count instructions per workflow under callgrind (load-independent)",
    )
    args = parser.parse_args()
    print("reproduce: .venv/bin/python benchmarks/profile_daemon.py " + " ".join(sys.argv[1:]))
    print(
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version},"
        f" {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}\n"
    )
    with tempfile.TemporaryDirectory(prefix="flowctl-prof-") as d:
        tmp = Path(d)
        if args.instructions:
            instructions(tmp, args.runs, args.concurrency)
            return
        statements(tmp, 200)
        print()
        cprofile(tmp, args.runs, args.top, args.cpu_clock)
        print()
        if not args.no_py_spy:
            pyspy(tmp, args.runs, args.concurrency, args.top)


if __name__ == "__main__":
    main()
