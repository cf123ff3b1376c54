"""huey's side of `benchmarks/throughput.py`: one-step tasks on SqliteHuey, `-w 1`.

Run by throughput.py with a Python that has huey installed (a benchmark venv, never a
flowctl dependency):

    .venv-bench/bin/python benchmarks/huey_peer.py DB N

Enqueues N tasks, starts `huey_consumer -w 1` (one thread worker) on them, and waits
until every task has stored its result: each result is the time.time() the task ran, so
the rate is read back from what huey recorded (first task to last task), as flowctl's is
from its timeline. Prints one JSON line: {"n", "busy_s", "cpu_s"} (cpu_s: the consumer
process's user+system CPU, from wait4).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from huey import SqliteHuey

DB = os.environ.get("FLOWCTL_BENCH_HUEY_DB", "huey.db")
huey = SqliteHuey("bench", filename=DB, fsync=True)


@huey.task()
def add(a: int, b: int) -> float:
    """The one-step workload: trivial work, a durable result."""
    _ = a + b
    return time.time()


def main() -> None:
    db, n = sys.argv[1], int(sys.argv[2])
    os.environ["FLOWCTL_BENCH_HUEY_DB"] = db
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(here)}
    # Enqueue in a child process that reads the same environment variable, so the task
    # module's `huey` points at `db` both here and in the consumer.
    subprocess.run(
        [sys.executable, "-c", f"import huey_peer as p\nfor i in range({n}): p.add(i, 1)"],
        env=env,
        check=True,
        cwd=str(here),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "huey.bin.huey_consumer", "huey_peer.huey", "-w", "1", "-q"],
        env=env,
        cwd=str(here),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    conn = sqlite3.connect(db, timeout=30)
    try:
        while conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0] < n:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("huey did not finish its tasks")
            time.sleep(0.05)
        times = [pickle.loads(v) for (v,) in conn.execute("SELECT value FROM kv")]
    finally:
        conn.close()
    os.kill(proc.pid, signal.SIGINT)
    _, _, usage = os.wait4(proc.pid, 0)
    print(
        json.dumps(
            {"n": n, "busy_s": max(times) - min(times), "cpu_s": usage.ru_utime + usage.ru_stime}
        )
    )


if __name__ == "__main__":
    main()
