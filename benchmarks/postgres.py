"""PostgreSQL figures beside SQLite's, and beside DBOS on the same server, with real
`flowctl daemon` processes.

    # a throwaway server with PostgreSQL's durable defaults (fsync, synchronous_commit on)
    export FLOWCTL_BENCH_PG_URL=$(PG_DURABLE=1 .ci/pg-cluster start "$(mktemp -d)")
    .venv/bin/python benchmarks/postgres.py --dbos       # full sizes, DBOS too (minutes)
    .venv/bin/python benchmarks/postgres.py --quick      # smaller sizes, flowctl only

Each round runs, one after the other (alternating, so the machine's load meets them all
alike), on a fresh database each: flowctl on SQLite with one daemon, flowctl on PostgreSQL
with one daemon and with two, and (--dbos) DBOS on the same PostgreSQL server. Figures
are medians over the rounds:

- three-step workflows/s, enqueue included: the daemons are up first, then one client
  enqueues every run (start_many, 500 at a time; DBOS: enqueue_workflow one by one, as its
  API offers) and the clock stops when the last one has completed;
- the daemons' CPU per workflow: user + system seconds of every daemon process and its
  worker processes, from the kernel (/proc), between serving and the last completion
  (DBOS: its one process, enqueue included);
- the cores the whole machine kept busy meanwhile (/proc/stat: daemons, server, the
  enqueuing client and anything else): on a small machine whose cores the server and both
  daemons share, two daemons can go no faster once this nears the core count;
- wake lateness p50/p99 with two daemons, sleepers due at --wake-rate per second;
- claim latency: one claim_due of one due run, in process.

DBOS runs in an environment of its own (--dbos makes it once, with pip, in
~/.cache/flowctl-bench/dbos-3.4): it is never a flowctl dependency. Prints figures, never
pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl import ops  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.model import RunStatus, from_us, to_us  # noqa: E402
from flowctl.store import NewRun, Store, open_store  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")
DBOS_VENV = Path.home() / ".cache" / "flowctl-bench" / "dbos-3.4"
DBOS_SPEC = "dbos>=3.4,<3.5"
TICK = os.sysconf("SC_CLK_TCK")


class Leg(NamedTuple):
    """One leg of a round."""

    rate: float  # three-step workflows/s, enqueue included
    cpu: float  # the daemons' CPU ms per workflow
    busy: float  # cores the whole machine kept busy meanwhile


def machine_busy() -> float:
    """CPU seconds every core of the machine spent busy since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICK


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


def tree_cpu(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and their live descendants (the
    kernel's counts, every thread included)."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    wanted, total = set(pids), 0.0
    for _ in range(4):  # daemon -> worker processes -> their commands
        wanted |= {pid for pid, (parent, _) in stats.items() if parent in wanted}
    for pid in wanted:
        total += stats.get(pid, (0, 0.0))[1]
    return total


def wait_serving(store: Store, daemons: int, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while len(store.daemons()) < daemons:
        if time.monotonic() > end:
            raise SystemExit(f"{daemons} daemon(s) did not start within {timeout} s")
        time.sleep(0.05)


def wait_done(store: Store, n: int, timeout: float = 900) -> None:
    end = time.monotonic() + timeout
    while store.count_by_status()[RunStatus.COMPLETED] < n:
        if time.monotonic() > end:
            raise SystemExit(f"only {store.count_by_status()} after {timeout}s")
        time.sleep(0.02)


def throughput(kind: str, base: str | None, runs: int, daemons: int) -> Leg:
    """Three-step workflows/s with enqueue, the daemons' CPU ms per workflow, cores busy."""
    with fresh(kind, base) as db:
        store = open_store(db)
        procs = [daemon(db) for _ in range(daemons)]
        try:
            wait_serving(store, daemons)
            busy0 = machine_busy()
            cpu0, start = tree_cpu([p.pid for p in procs]), time.perf_counter()
            clock, inputs = SystemClock(), [{"n": i} for i in range(runs)]
            for i in range(0, runs, 500):
                ops.start_many(store, f"{FLOWS}:three", inputs[i : i + 500], clock=clock)
            wait_done(store, runs)
            wall, cpu = time.perf_counter() - start, tree_cpu([p.pid for p in procs]) - cpu0
            busy = (machine_busy() - busy0) / wall
        finally:
            stop(procs)
            store.close()
    return Leg(runs / wall, cpu / runs * 1000, busy)


def dbos_python() -> Path:
    """The Python of DBOS's own environment, made (once) with pip."""
    python = DBOS_VENV / "bin" / "python"
    if not python.exists():
        print(f"making {DBOS_VENV} ({DBOS_SPEC}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", DBOS_SPEC], check=True)
    return python


def dbos_throughput(base: str, runs: int) -> Leg:
    """DBOS's workflows/s with enqueue, CPU ms per workflow and the cores busy (its
    process's start included) on a fresh database."""
    with fresh("postgres", base) as db:
        busy0, start = machine_busy(), time.perf_counter()
        out = subprocess.run(
            [str(dbos_python()), "-I", str(ROOT / "benchmarks" / "dbos_peer.py"), db, str(runs)],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        ).stdout
        busy = (machine_busy() - busy0) / (time.perf_counter() - start)
    got = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return Leg(runs / got["wall_s"], got["cpu_s"] / runs * 1000, busy)


def lateness(kind: str, base: str | None, rate: int, seconds: float) -> tuple[float, float] | None:
    """p50/p99 (ms) of how late sleepers woke, two daemons serving them, `rate` wakes/s
    for `seconds`.

    Every sleeper must have fallen asleep (its sleep checkpoint committed) before the first
    deadline, or the figure would time the set-up (creating and first running the runs
    while others are due) instead of the wake-ups: if one did not, the set-up is retried
    with twice the lead, and after 3 tries there is no figure (None).
    """
    sleepers = int(rate * seconds)
    lead = 3.0 + sleepers * 0.004
    for _ in range(3):
        late = _wakes(kind, base, sleepers, seconds, lead)
        if late is not None:
            return late[len(late) // 2], late[min(len(late) - 1, int(0.99 * len(late)))]
        lead *= 2
    return None


def _wakes(kind: str, base: str | None, n: int, seconds: float, lead: float) -> list[float] | None:
    """Sorted lateness (ms) of n sleepers due over `seconds` from `lead` s on, or None when
    one was not yet asleep at the first deadline."""
    with fresh(kind, base) as db:
        store = open_store(db)
        procs = [daemon(db), daemon(db)]
        try:
            wait_serving(store, 2)
            start = time.time() + lead
            inputs = [{"at": start + i * (seconds / n)} for i in range(n)]
            for i in range(0, n, 500):
                ops.start_many(store, f"{FLOWS}:sleeper", inputs[i : i + 500], clock=SystemClock())
            wait_done(store, n)
            asleep = [
                e.recorded_at
                for run in store.list_runs(limit=10**7)
                for e in store.journal(run.run_id).values()
                if e.kind == "sleep"
            ]
            late = sorted(x * 1000 for x in store.recent_wakes(from_us(0), limit=10**7))
        finally:
            stop(procs)
            store.close()
    if len(asleep) == n and max(to_us(t) for t in asleep) < start * 1e6:
        return late
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


def rounds_of(legs: dict[str, Callable[[], Leg]], rounds: int) -> dict[str, list[Leg]]:
    """Each leg once per round, in turn; every figure kept."""
    got: dict[str, list[Leg]] = {name: [] for name in legs}
    for r in range(rounds):
        for name, leg in legs.items():
            got[name].append(leg())
            rate, cpu, busy = got[name][-1]
            print(
                f"  round {r + 1}: {name:18} {rate:7.0f}/s  {cpu:6.2f} ms CPU/workflow"
                f"  {busy:4.2f} of {os.cpu_count()} cores busy  (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    return got


def report(got: dict[str, list[Leg]]) -> None:
    med = {k: Leg(*map(statistics.median, zip(*v, strict=True))) for k, v in got.items()}
    print("\nthree-step workflows, enqueue included (medians):")
    for name, (rate, cpu, busy) in med.items():
        print(
            f"  {name:18} {rate:7.0f} workflows/s   {cpu:6.2f} ms CPU per workflow"
            f"   {busy:4.2f} cores busy"
        )
    pg1, pg2, lite = med["postgres 1 daemon"], med["postgres 2 daemons"], med["sqlite 1 daemon"]
    print(f"  PostgreSQL / SQLite (1 daemon each): {pg1.rate / lite.rate:.2f}x")
    print(f"  PostgreSQL 2 daemons / 1 daemon:     {pg2.rate / pg1.rate:.2f}x")
    # Two daemons (and the server's work for them) need twice the cores one keeps busy, so
    # on this machine they reach at most its cores over that; a fleet whose server and
    # daemons have cores of their own has no such ceiling.
    cores = os.cpu_count() or 1
    print(
        f"  at most on this machine:             {cores / pg1.busy:.2f}x"
        f" ({cores} cores / {pg1.busy:.2f} busy with one daemon)"
    )
    if "dbos" in med:
        print(f"  flowctl PostgreSQL 1 daemon / DBOS:  {pg1.rate / med['dbos'].rate:.2f}x")


def server_settings(url: str) -> str:
    """The server's version and the settings that bear on commit cost."""
    import psycopg

    names = ["fsync", "synchronous_commit", "full_page_writes", "server_version"]
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s) ORDER BY name", [names]
        ).fetchall()
    return ", ".join(f"{n}={v}" for n, v in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--dbos", action="store_true", help="DBOS 3.4 beside flowctl")
    parser.add_argument("--wake-rate", type=int, default=1000, help="wakes per second")
    parser.add_argument("--pg", default=os.environ.get("FLOWCTL_BENCH_PG_URL"))
    parser.add_argument(
        "--wakes-only",
        action="store_true",
        help="only the PostgreSQL wake lateness, --rounds times",
    )
    args = parser.parse_args()
    if not args.pg:
        raise SystemExit("give --pg URL or FLOWCTL_BENCH_PG_URL (see the docstring)")
    runs, wake_s, claims = (600, 1.0, 500) if args.quick else (3000, 5.0, 2000)
    print(f"$ {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"server: {server_settings(args.pg)}")
    if args.wakes_only:
        for i in range(args.rounds):
            woke = lateness("postgres", args.pg, args.wake_rate, wake_s)
            shown = "n/a" if woke is None else f"p50 {woke[0]:6.1f} ms  p99 {woke[1]:6.1f} ms"
            print(f"round {i + 1}: postgres wake lateness (2 daemons, {args.wake_rate}/s) {shown}")
        return
    print(
        f"runs {runs}, {args.rounds} rounds; {os.cpu_count()} CPU(s), load"
        f" {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    legs: dict[str, Callable[[], Leg]] = {
        "sqlite 1 daemon": lambda: throughput("sqlite", None, runs, 1),
        "postgres 1 daemon": lambda: throughput("postgres", args.pg, runs, 1),
        "postgres 2 daemons": lambda: throughput("postgres", args.pg, runs, 2),
    }
    if args.dbos:
        legs["dbos"] = lambda: dbos_throughput(args.pg, runs)
    report(rounds_of(legs, args.rounds))
    for kind in ("sqlite", "postgres"):
        woke = lateness(kind, args.pg, args.wake_rate, wake_s)
        wake = (
            "n/a (set-up overlapped the wakes)"
            if woke is None
            else (f"p50 {woke[0]:6.1f} ms  p99 {woke[1]:6.1f} ms")
        )
        c50, c99 = claim_latency(kind, args.pg, claims)
        print(
            f"{kind:8}  wake lateness (2 daemons, {args.wake_rate}/s) {wake}"
            f"  | claim p50 {c50:5.2f} ms p99 {c99:5.2f} ms"
        )
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
