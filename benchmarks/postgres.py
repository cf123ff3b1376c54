"""PostgreSQL figures beside SQLite's, with real `flowctl daemon` processes.

    export FLOWCTL_BENCH_PG_URL=$(.ci/pg-cluster start "$(mktemp -d)")   # a throwaway server
    .venv/bin/python benchmarks/postgres.py            # full sizes (a few minutes)
    .venv/bin/python benchmarks/postgres.py --quick    # smaller sizes

For each store: three-step workflows/s with one and with two daemon processes; wake
lateness p50/p99 of sleepers with two daemons; claim latency (one claim_due of one run,
in process). Figures are read back from what the daemons recorded (the timeline), not
from a stopwatch around the processes. Each figure gets a fresh database (a new file, or
a new PostgreSQL database on the server). Prints figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl import ops  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.model import RunStatus, from_us, to_us  # noqa: E402
from flowctl.store import NewRun, Store, open_store  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")


@contextmanager
def fresh(kind: str, base_url: str | None) -> Iterator[str]:
    """A new empty database: a file in a temporary folder, or a database on the server."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="flowctl-bench-") as d:
            yield str(Path(d) / "flowctl.db")
        return
    import psycopg

    assert base_url is not None
    name = f"flowctl_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    scheme, netloc, _, query, fragment = urlsplit(base_url)
    try:
        yield urlunsplit((scheme, netloc, "/" + name, query, fragment))
    finally:
        with psycopg.connect(base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def daemon(db: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "flowctl", "--db", db, "daemon", "--log-level", "warning", *args],
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=60)


def enqueue(store: Store, target: str, inputs: list[dict[str, object]]) -> None:
    clock = SystemClock()
    for i in inputs:
        ops.start(store, target, i, clock=clock, cwd=str(ROOT))


def wait_done(store: Store, n: int, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while store.count_by_status()[RunStatus.COMPLETED] < n:
        if time.monotonic() > end:
            raise SystemExit(f"only {store.count_by_status()} after {timeout}s")
        time.sleep(0.05)


def events_at(store: Store, types: tuple[str, ...]) -> list[int]:
    """Times (us) of every timeline event of these types, over all runs."""
    out = []
    for run in store.list_runs(limit=10**7):
        out += [to_us(e.at) for e in store.timeline(run.run_id) if e.type in types]
    return sorted(out)


def throughput(kind: str, base: str | None, runs: int, daemons: int) -> float:
    """Three-step workflows per second, from the first claim to the last completion."""
    with fresh(kind, base) as db:
        store = open_store(db)
        try:
            enqueue(store, f"{FLOWS}:three", [{"n": i} for i in range(runs)])
            procs = [daemon(db) for _ in range(daemons)]
            wait_done(store, runs)
            stop(procs)
            claimed = events_at(store, ("claimed",))
            done = events_at(store, ("completed",))
        finally:
            store.close()
    return runs / ((done[-1] - claimed[0]) / 1e6)


def lateness(kind: str, base: str | None, sleepers: int) -> tuple[float, float] | None:
    """p50/p99 (ms) of how late sleepers woke, two daemons serving them.

    Every sleeper must have fallen asleep (its sleep checkpoint committed) before the first
    deadline, or the figure would time the set-up (creating and first running the runs
    while others are due) instead of the wake-ups: if one did not, the set-up is retried
    with twice the lead, and after 3 tries there is no figure (None).
    """
    lead = 3.0 + sleepers * 0.005
    for _ in range(3):
        with fresh(kind, base) as db:
            store = open_store(db)
            try:
                procs = [daemon(db), daemon(db)]
                start = time.time() + lead
                enqueue(
                    store,
                    f"{FLOWS}:sleeper",
                    [{"at": start + i * (5.0 / sleepers)} for i in range(sleepers)],
                )
                wait_done(store, sleepers)
                stop(procs)
                asleep = [
                    e.recorded_at
                    for run in store.list_runs(limit=10**7)
                    for e in store.journal(run.run_id).values()
                    if e.kind == "sleep"
                ]
                late = sorted(store.recent_wakes(from_us(0), limit=10**7))
            finally:
                store.close()
        if len(asleep) == sleepers and max(to_us(t) for t in asleep) < start * 1e6:
            late_ms = [x * 1000 for x in late]
            p99 = late_ms[min(len(late_ms) - 1, int(0.99 * len(late_ms)))]
            return late_ms[len(late_ms) // 2], p99
        lead *= 2
    return None


def claim_latency(kind: str, base: str | None, runs: int) -> tuple[float, float]:
    """p50/p99 (ms) of one claim_due of one due run, in process, over `runs` claims."""
    with fresh(kind, base) as db:
        store = open_store(db)
        try:
            clock = SystemClock()
            now = clock.now()
            for i in range(runs):
                store.create_run(NewRun(f"r{i:06d}", "wf", "wf.py:wf", "python", {}), now)
            took = []
            for _ in range(runs):
                t = time.perf_counter()
                store.claim_due("bench/1/1/0001", now, now + timedelta(seconds=15), 1)
                took.append((time.perf_counter() - t) * 1000)
        finally:
            store.close()
    took.sort()
    return took[len(took) // 2], took[int(0.99 * len(took))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--pg", default=os.environ.get("FLOWCTL_BENCH_PG_URL"))
    args = parser.parse_args()
    if not args.pg:
        raise SystemExit("give --pg URL or FLOWCTL_BENCH_PG_URL (see the docstring)")
    runs, sleepers, claims = (500, 200, 500) if args.quick else (3000, 1000, 2000)
    print(f"runs {runs}, sleepers {sleepers}, claims {claims}; cpus {os.cpu_count()}")
    for kind in ("sqlite", "postgres"):
        one = throughput(kind, args.pg, runs, 1)
        two = throughput(kind, args.pg, runs, 2)
        woke = lateness(kind, args.pg, sleepers)
        wake = (
            "n/a (set-up overlapped the wakes)"
            if woke is None
            else (f"p50 {woke[0]:6.1f} ms p99 {woke[1]:6.1f} ms")
        )
        c50, c99 = claim_latency(kind, args.pg, claims)
        print(
            f"{kind:8}  three-step/s: 1 daemon {one:7.0f}, 2 daemons {two:7.0f}"
            f"  | wake lateness (2 daemons) {wake}"
            f"  | claim p50 {c50:5.2f} ms p99 {c99:5.2f} ms"
        )


if __name__ == "__main__":
    main()
