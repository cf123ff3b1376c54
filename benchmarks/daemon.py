"""Daemon figures with a real `flowctl daemon` process: throughput, wake lateness, idle cost
with many sleepers, a burst of simultaneous deadlines, resume after a restart.

    .venv/bin/python benchmarks/daemon.py                 # full sizes (a few minutes)
    .venv/bin/python benchmarks/daemon.py --quick         # smaller sizes
    .venv/bin/python benchmarks/daemon.py --only lateness # one part: throughput, lateness,
                                                          # idle, burst, restart, many
    .venv/bin/python benchmarks/daemon.py --only many     # 100,000 sleepers over 60 s
    .venv/bin/python benchmarks/daemon.py --only idle --idle-sleepers 1000000

Figures are read back from what the daemon recorded (timeline events, journal rows), not
from a stopwatch around the process. Prints figures, not pass/fail; the targets (issue 3)
are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bytecode  # noqa: E402

from flowctl import ops  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402
from flowctl.ids import new_run_id  # noqa: E402
from flowctl.store.sqlite import SqliteStore as Store  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")
CLOCK = SystemClock()


# ---------------------------------------------------------------------------
# helpers


def spawn(db: Path, *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flowctl",
            "--db",
            str(db),
            "daemon",
            "--log-level",
            "warning",
            *args,
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=str(ROOT),
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(str(db), timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(0.05)


def count(db: Path, status: str) -> int:
    """Runs in `status`, from the counts table the store keeps in the same transactions:
    O(1), so polling it while the daemon works does not load the machine being measured
    (a COUNT(*) over 100,000 index entries every 50 ms cost the daemon's wakes)."""
    rows = read(db, "SELECT COALESCE(SUM(n), 0) FROM run_counts WHERE status = ?", (status,))
    return int(rows[0][0])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def lateness(db: Path, kind: str = "sleeping") -> list[float]:
    rows = read(db, "SELECT data FROM timeline WHERE type = 'woke'")
    return [
        float(d["late_ms"])
        for d in (json.loads(r[0]) for r in rows)
        if d.get("from") == kind and "late_ms" in d
    ]


def clone_sleepers(db: Path, n: int, wake_at_s: float, spread: float = 0.0) -> None:
    """Make one real sleeping run through the API, then copy its rows n times in one
    transaction: realistic rows, inserted fast. (Benchmark set-up only.) With `spread`,
    copy i sleeps until wake_at_s + spread * i / n: its row's run_at, its sleep's recorded
    deadline and its input all say so."""
    with Store(db) as store:
        run = ops.start(store, f"{FLOWS}:sleeper", {"at": wake_at_s}, clock=CLOCK).run
        Daemon(store, CLOCK, DaemonConfig(concurrency=1)).tick()
    conn = sqlite3.connect(str(db), timeout=30, isolation_level=None)
    try:
        run_row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run.run_id,))
        run_cols = [d[0] for d in run_row.description]
        run_vals = list(run_row.fetchone())
        j = conn.execute("SELECT * FROM journal WHERE run_id = ?", (run.run_id,))
        j_cols = [d[0] for d in j.description]
        j_rows = [list(r) for r in j.fetchall()]
        assert run_vals[run_cols.index("status")] == "sleeping", "template did not fall asleep"
        id_at = run_cols.index("run_id")
        jid_at = j_cols.index("run_id")
        run_at, input_at = run_cols.index("run_at"), run_cols.index("input")
        wake_at, kind_at = j_cols.index("wake_at"), j_cols.index("kind")
        runs, journal = [], []
        for i in range(n):
            rid = new_run_id()
            v = list(run_vals)
            v[id_at] = rid
            at = wake_at_s + spread * i / n if spread else None
            if at is not None:
                v[run_at], v[input_at] = round(at * 1e6), json.dumps({"at": at})
            runs.append(v)
            for jr in j_rows:
                jr = list(jr)
                jr[jid_at] = rid
                if at is not None and jr[kind_at] == "sleep":
                    jr[wake_at] = round(at * 1e6)
                journal.append(jr)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            f"INSERT INTO runs ({','.join(run_cols)}) VALUES ({','.join('?' * len(run_cols))})",
            runs,
        )
        conn.executemany(
            f"INSERT INTO journal ({','.join(j_cols)}) VALUES ({','.join('?' * len(j_cols))})",
            journal,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes `pid` started (its worker processes: `daemon --workers N`)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                found.append(int(entry))
    return found


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


# ---------------------------------------------------------------------------
# the figures


def throughput(tmp: Path, n: int, concurrencies: list[int]) -> None:
    print(f"throughput: {n:,} three-step workflows enqueued with the Python API, then run by")
    print("  `flowctl daemon --until-idle` (synchronous=FULL, the default durability)")
    for c in concurrencies:
        db = tmp / f"throughput-{c}.db"
        with Store(db) as store:
            t = time.perf_counter()
            for i in range(n):
                ops.start(store, f"{FLOWS}:three", {"n": i}, clock=CLOCK)
            enq = time.perf_counter() - t
        t = time.perf_counter()
        proc = spawn(db, "--concurrency", str(c), "--until-idle")
        code = proc.wait(timeout=600)
        wall = time.perf_counter() - t
        assert code == 0, f"daemon exited {code}"
        done = count(db, "completed")
        assert done == n, f"only {done} of {n} completed"
        ((first, last),) = read(
            db,
            "SELECT (SELECT MIN(at) FROM timeline WHERE type = 'claimed'),"
            " (SELECT MAX(at) FROM timeline WHERE type = 'completed')",
        )
        busy = (last - first) / 1e6
        print(
            f"  concurrency {c:>2}: {n / busy:7,.0f} runs/s  {3 * n / busy:7,.0f} steps/s"
            f"   (first claim to last completion {busy:.2f} s; with process start-up"
            f" {n / wall:,.0f} runs/s; enqueue {n / enq:,.0f} runs/s)"
        )
    print("  target: >= 1,000 workflows/s at a chosen concurrency")


def wake_lateness(tmp: Path, n: int, spread: float, concurrency: int, tries: int = 3) -> None:
    """Lateness of n sleepers, from a valid set-up only: every sleeper must be asleep (its
    sleep checkpoint committed) before the first deadline, or a slow enqueue would be
    reported as lateness. An invalid set-up is retried with twice the lead, then refused."""
    lead = 2.0 + n / 800  # time to enqueue them and let each fall asleep first
    for attempt in range(1, tries + 1):
        db = tmp / f"lateness-{attempt}.db"
        Store(db).close()
        proc = spawn(db, "--concurrency", str(concurrency))
        try:
            base = time.time() + lead
            with Store(db) as store:
                for i in range(n):
                    at = base + spread * i / n
                    ops.start(store, f"{FLOWS}:sleeper", {"at": at}, clock=CLOCK)
            wait_for(lambda db=db: count(db, "completed") == n, lead + spread + 60, "the sleepers")
        finally:
            stop(proc)
        # Read back from the journal: when each sleep checkpoint was committed.
        ((asleep, last_asleep),) = read(
            db,
            "SELECT COUNT(*), MAX(recorded_at) FROM journal WHERE kind = 'sleep' AND recorded_at < ?",
            (round(base * 1e6),),
        )
        if asleep == n:
            break
        print(
            f"wake lateness: invalid set-up (try {attempt} of {tries}): only {asleep:,} of {n:,}"
            f" sleepers were asleep before the first deadline ({lead:.1f} s lead);"
            + (" retrying with twice the lead" if attempt < tries else " not reporting a figure")
        )
        lead *= 2
    else:
        return
    late = lateness(db)
    assert len(late) == n, f"{len(late)} wakes for {n} sleepers"
    margin = base - last_asleep / 1e6
    print(
        f"wake lateness: {n:,} sleepers, deadlines spread evenly over {spread:g} s,"
        f" concurrency {concurrency} (checked: all {n:,} asleep {margin:.2f} s before the"
        " first deadline)"
    )
    print(
        f"  p50 {pct(late, 0.5):.1f} ms   p99 {pct(late, 0.99):.1f} ms   max {max(late):.1f} ms"
        "   (lateness = recorded resume time minus recorded deadline; target p99 < 20 ms)"
    )


def many_lateness(tmp: Path, n: int, spread: float) -> None:
    """Lateness of n sleepers whose deadlines are spread over `spread` seconds, the rows
    copied in one transaction while the daemon already serves (issue 14: p99 < 50 ms with
    100,000 sleepers over 60 s). Only wakes from a valid set-up count: every copy is in
    the database before the first deadline."""
    db = tmp / "many-lateness.db"
    Store(db).close()
    proc = spawn(db)
    try:
        wait_for(lambda: read(db, "SELECT COUNT(*) FROM daemons")[0][0] == 1, 30, "the daemon")
        # The copy is one transaction: time to build and commit it (100,000 rows took 8-9 s
        # on a loaded 2-core VM, so 8 s was too little: two set-ups in a row were invalid).
        lead = 3.0 + n / 10_000
        base = time.time() + lead
        clone_sleepers(db, n - 1, base, spread)
        inserted = time.time()
        wait_for(lambda: count(db, "completed") == n, lead + spread + 120, "the sleepers")
    finally:
        stop(proc)
    if inserted > base:
        print(f"many sleepers: invalid set-up: the copy ended {inserted - base:.2f} s late")
        return
    late = lateness(db)
    print(
        f"wake lateness: {n:,} sleepers, deadlines spread evenly over {spread:g} s,"
        f" default concurrency (copied {base - inserted:.2f} s before the first deadline)"
    )
    print(
        f"  p50 {pct(late, 0.5):.1f} ms   p99 {pct(late, 0.99):.1f} ms   max {max(late):.1f} ms"
        f"   ({len(late):,} wakes; target p99 < 50 ms)"
    )


def idle_cost(tmp: Path, n: int, seconds: float) -> None:
    db = tmp / "idle.db"
    t = time.perf_counter()
    clone_sleepers(db, n, time.time() + 86400)
    made = time.perf_counter() - t
    assert count(db, "sleeping") == n + 1
    proc = spawn(db)
    try:
        wait_for(lambda: read(db, "SELECT COUNT(*) FROM daemons")[0][0] >= 1, 30, "the daemon")
        time.sleep(3.0)  # settle after start-up: its worker processes start and fill wheels
        pids = [proc.pid, *children(proc.pid)]  # the daemon and its workers (default: per core)
        cpu0, t0 = sum(proc_cpu_s(p) for p in pids), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = sum(proc_cpu_s(p) for p in pids), time.monotonic()
        sts = [proc_status(p) for p in pids]
    finally:
        stop(proc)

    def mb(key: str, st: dict[str, str]) -> float:
        return int(st[key].split()[0]) / 1024

    rss_mb = sum(mb("VmRSS", st) for st in sts)
    hwm_mb = sum(mb("VmHWM", st) for st in sts)
    each = " + ".join(f"{mb('VmRSS', st):.0f}" for st in sts)
    cpu_pct = 100 * (cpu1 - cpu0) / (t1 - t0)
    print(f"idle: daemon with {n + 1:,} sleeping runs (rows inserted in {made:.1f} s)")
    print(
        f"  {len(pids)} process(es) (the daemon and its workers), together: RSS {rss_mb:.0f} MB"
        f" ({each}; peaks {hwm_mb:.0f} MB), {sum(int(st['Threads']) for st in sts)} threads,"
        f" CPU {cpu_pct:.2f}% over {t1 - t0:.0f} s   (target: RSS < 100 MB, idle CPU < 1%)"
    )


def burst(tmp: Path, n: int, concurrency: int) -> None:
    db = tmp / "burst.db"
    Store(db).close()
    proc = spawn(db, "--concurrency", str(concurrency))
    try:
        wait_for(lambda: read(db, "SELECT COUNT(*) FROM daemons")[0][0] == 1, 30, "the daemon")
        due = time.time() + 3.0 + n / 20_000
        clone_sleepers(db, n - 1, due)
        wait_for(lambda: count(db, "completed") == n, 600, "the burst")
    finally:
        stop(proc)
    ((last,),) = read(db, "SELECT MAX(finished_at) FROM runs")
    took = last / 1e6 - due
    late = lateness(db)
    print(f"burst: {n:,} sleepers whose deadlines all pass at once, concurrency {concurrency}")
    print(
        f"  all woken and finished {took:.2f} s after the deadline ({n / took:,.0f} runs/s);"
        f" wake lateness p50 {pct(late, 0.5):.0f} ms, max {max(late):.0f} ms"
    )


def restart(tmp: Path, n: int) -> None:
    db = tmp / "restart.db"
    clone_sleepers(db, n - 1, time.time() + 0.5)
    time.sleep(1.0)  # every deadline passes while no daemon runs
    spawned = time.time()
    proc = spawn(db, "--concurrency", "8")
    try:
        wait_for(lambda: count(db, "completed") == n, 120, "the overdue sleepers")
        ((started,),) = read(db, "SELECT started_at FROM daemons")
    finally:
        stop(proc)
    ((first, last),) = read(
        db, "SELECT MIN(at), MAX(at) FROM timeline WHERE type IN ('woke', 'completed')"
    )
    print(f"restart: {n:,} sleepers overdue when a daemon starts ({bytecode.describe()})")
    print(
        f"  first resumed {(first - started) / 1000:.0f} ms after the daemon started serving"
        f" ({first / 1000 - spawned * 1000:.0f} ms after the process was spawned, incl. Python"
        f" start-up); all done {(last - started) / 1e6:.2f} s after it started"
        "   (target: within 200 ms of a restart)"
    )


PARTS = ("throughput", "lateness", "idle", "burst", "restart", "many")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only these parts")
    parser.add_argument(
        "--concurrency",
        type=int,
        action="append",
        help="throughput at these concurrencies (default 1, 8, 16, 32)",
    )
    parser.add_argument(
        "--idle-sleepers",
        type=int,
        default=None,
        help="sleeping runs for the idle part (default 100,000; issue 14 asks 1,000,000)",
    )
    args = parser.parse_args()
    q = args.quick
    parts = args.only or [p for p in PARTS if p != "many"]  # "many" is long: ask for it
    shown = " ".join(sys.argv[1:])
    print(f"reproduce: .venv/bin/python benchmarks/daemon.py {shown}".rstrip())
    print(
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPU(s)\n"
    )
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-") as d:
        tmp = Path(d)
        if "throughput" in parts:
            throughput(tmp, 1000 if q else 5000, args.concurrency or [1, 8, 16, 32])
            print()
        if "lateness" in parts:
            wake_lateness(tmp, 500 if q else 2000, 5.0 if q else 10.0, 8)
            print()
        if "idle" in parts:
            idle = args.idle_sleepers or (20_000 if q else 100_000)
            idle_cost(tmp, idle, 5.0 if q else 20.0)
            print()
        if "burst" in parts:
            burst(tmp, 2000 if q else 10_000, 16)
            print()
        if "restart" in parts:
            restart(tmp, 200 if q else 1000)
            print()
        if "many" in parts:
            many_lateness(tmp, 10_000 if q else 100_000, 6.0 if q else 60.0)


if __name__ == "__main__":
    main()
