"""The scaling curve (issue 14, item 9): three-step runs/s by concurrency and worker
processes, and the same on a database that already holds a million finished runs.

    .venv/bin/python benchmarks/scaling.py                         # 3,000 runs per point
    .venv/bin/python benchmarks/scaling.py --runs 5000 --rounds 3
    .venv/bin/python benchmarks/scaling.py --concurrency 8 --workers 1,2 --big 0   # no 1M part
    .venv/bin/python benchmarks/scaling.py --workflow heavy --concurrency 8 --big 0 --runs 1000
    .venv/bin/python benchmarks/scaling.py --instructions 300 --rounds 2   # load-independent 1M

Each point: `--runs` runs of `benchmarks/flows.py:three` queued in one transaction
(`Client.start_many`), then `flowctl daemon --until-idle -c C -w W` executes them; the
rate is runs / (first `claimed` to last `completed`, as the timeline recorded them), so
start-up and enqueue are not in it. CPU ms per run is the daemon's user+system CPU,
worker processes included (wait4 counts the children it reaped), minus that of the same
daemon running one run (start-up, the first run's imports, shutdown), divided by the
runs after the first (until session 14: an empty database, which charged the first run's
imports to the runs). Points are measured in rounds, each
round visiting every point once (alternating, so a change in the machine's load spreads
over all of them); medians with the range.

The million-run part seeds `--big` completed three-step runs (a real run's rows — runs,
journal, timeline — copied in SQL) and ANALYZEs the file, as an operator might while every
run is finished: the statistics that once made the daemon's liveness pass scan every run
(tests/test_analyzed_plans.py). Then it measures `-c 8` at workers 1 and 2 on it and on an
empty database, alternating. Target: the rate drops by at most 10%.

The seeded runs' ids sort before every id the daemon makes later, as run ids do (eight
characters of creation time first, ids.new_run_id): a new run's journal, timeline and
primary-key entries are appended at the right edge of their B-trees, as on a file that
really finished a million runs. `--ids-after` seeds ids that sort after every new one (the
seed before session 7): each new entry then lands in the middle of a million-entry B-tree
(SQLite splits such pages in the middle, so more pages are written per COMMIT); no real
file is laid out like that, but it shows the cost.

`--instructions N` replaces the wall-clock comparison (and the concurrency curve) with
load-independent ones, on an empty database and on the big one, in `--rounds` alternating
rounds: user-space instructions per three-step run under valgrind's callgrind (N runs
queued minus the same process idle), in all and inside SQLite (sqlite3_step and
sqlite3_prepare_v2 with their callees), for a real `flowctl daemon --until-idle -c 8`
and for the in-process daemon (`Daemon.tick()`, concurrency 1, one thread). The
in-process figure repeats to 0.3%; the real daemon's moves by about 5% between runs on a
loaded box (how runs share claims and COMMITs, and how often an idle loop polls, follow
the machine's timing). Kernel work (fsync, pwrite) is in neither, so the COMMITs, pages
read and written, cache misses and write/read syscalls per run are printed beside them
(an in-process daemon, SQLite's own counters: sqlite3_db_status, and /proc/self/io).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
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


def daemon(db: Path, concurrency: int, workers: int) -> tuple[float, float, tuple[float, float]]:
    """`flowctl daemon --until-idle` on db: (CPU seconds with its workers, wall seconds,
    (CPU seconds in the daemon process, in its worker processes) as its exit line says
    with --workers 2 or more; (0, 0) with one)."""
    args = [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--log-level", "info"]
    args += ["--until-idle", "-c", str(concurrency), "--workers", str(workers)]
    t = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(proc.pid, 0)
        log.seek(0)
        text = log.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the daemon exited {os.waitstatus_to_exitcode(status)}: {text[-500:]}")
    found = re.search(r"CPU ([\d.]+) s in this process, ([\d.]+) s in \d+ worker", text)
    split = (float(found[1]), float(found[2])) if found else (0.0, 0.0)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - t, split


WORKFLOW = ["three"]  # --workflow: `heavy` burns 2 ms of CPU in each step body


def enqueue(db: Path, n: int) -> None:
    with Client(db) as client:
        for i in range(0, n, 1000):
            inputs = [{"n": j} for j in range(i, min(n, i + 1000))]
            client.start_many(f"{FLOWS}:{WORKFLOW[0]}", inputs)


Idle = tuple[float, float, tuple[float, float]]  # daemon() on a database of one run


def point(db: Path, n: int, concurrency: int, workers: int, idle_cpu: Idle) -> dict[str, float]:
    """Queue n runs in db (which may hold others, finished), execute them, measure."""
    Client(db).close()  # creates the file's tables if it is new
    since = time.time_ns() // 1000  # the runs queued now: created at or after this (µs)
    enqueue(db, n)
    cpu, _, (own, theirs) = daemon(db, concurrency, workers)
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
    idle_own, idle_theirs = idle_cpu[2]
    return {
        "per_s": n / ((last - first) / 1e6),
        # Per run after the first: the one-run daemon's CPU (start-up, the first run's
        # imports, shutdown) is subtracted, as benchmarks/throughput.py does.
        "cpu_ms": 1000 * max(0.0, cpu - idle_cpu[0]) / (n - 1),
        # With worker processes: the daemon process's share and theirs (from its exit line).
        "own_ms": 1000 * max(0.0, own - idle_own) / (n - 1),
        "their_ms": 1000 * max(0.0, theirs - idle_theirs) / (n - 1),
    }


def idle(tmp: Path, concurrency: int, workers: int) -> Idle:
    """The same daemon running one run: what a point's CPU is measured beside."""
    db = tmp / f"idle-{concurrency}-{workers}.db"
    Client(db).close()
    enqueue(db, 1)
    return daemon(db, concurrency, workers)


def seed_finished(db: Path, n: int, ids_after: bool = False) -> None:
    """n completed three-step runs: one real run, its rows copied n times in SQL.

    Copy i is i ms older than the real run; its id is '0' and 15 digits, growing with its
    creation time and sorting before every id new_run_id makes (those begin with the time
    in base 32: 'm...' in 2026), as older runs' ids do. ids_after: 'r' and 15 digits,
    sorting after them instead (see the module docstring)."""
    enqueue(db, 1)
    daemon(db, 1, 1)
    c = sqlite3.connect(str(db), isolation_level=None)
    c.execute("PRAGMA synchronous = OFF")
    (rid,) = c.execute("SELECT run_id FROM runs").fetchone()
    run_id = "printf('r%015d', i)" if ids_after else f"printf('0%015d', {n} - i)"
    assert ids_after or f"0{0:015d}" < rid, "a seeded id would sort after a new run's"
    tables = {
        "runs": {"run_id": run_id, "created_at": "created_at - i * 1000",
                 "finished_at": "finished_at - i * 1000", "input": "json_object('n', i)"},
        "journal": {"run_id": run_id},
        "timeline": {"run_id": run_id, "at": "at - i * 1000"},
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


# Under callgrind, the in-process daemon: Daemon.tick() at concurrency 1 on the file named by
# argv[1], executing every run due there in this one thread (no polling, no group commit).
TICK = """
import sys
sys.path.insert(0, sys.argv[2])
from flowctl.client import Client
from flowctl.clock import SystemClock
from flowctl.daemon import Daemon, DaemonConfig
with Client(sys.argv[1]) as client:
    Daemon(client.store, SystemClock(), DaemonConfig(concurrency=1)).tick()
"""


def callgrind(tmp: Path, args: list[str]) -> tuple[int, int]:
    """User-space instructions of `python args` under callgrind: in all, and inside SQLite
    (sqlite3_step and sqlite3_prepare_v2, callees included)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    out = tmp / "callgrind.out"
    cmd = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *args]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed ({proc.returncode}): {proc.stderr[-300:]}")
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
    ).stdout
    out.unlink()
    inside = sum(
        int(m.group(1).replace(",", ""))
        for m in re.finditer(
            r"^\s*([\d,]+) .*:(?:sqlite3_step|sqlite3_prepare_v2) ", annotated, re.M
        )
    )
    return int(found.group(1)), inside


def instructions_per_run(tmp: Path, db: Path, n: int) -> dict[str, float]:
    """Instructions one three-step run costs on db (which may hold finished runs): a real
    `flowctl daemon --until-idle -c 8`, and the in-process daemon (TICK), each with n runs
    queued minus the same idle; in all and inside SQLite."""
    daemon_args = ["-m", "flowctl", "--db", str(db), "daemon", "--log-level", "warning"]
    daemon_args += ["--until-idle", "--concurrency", "8"]
    tick_args = ["-c", TICK, str(db), str(ROOT)]
    Client(db).close()
    out: dict[str, float] = {}
    for label, args in (("daemon -c 8", daemon_args), ("in-process -c 1", tick_args)):
        idle_all, idle_sqlite = callgrind(tmp, args)
        enqueue(db, n)
        busy_all, busy_sqlite = callgrind(tmp, args)
        with sqlite3.connect(db) as conn:
            (left,) = conn.execute(
                "SELECT COUNT(*) FROM runs WHERE status != 'completed'"
            ).fetchone()
        if left:
            raise SystemExit(f"{left} of {n} runs did not complete under callgrind ({label})")
        out[label] = (busy_all - idle_all) / n
        out[f"  of it SQLite ({label})"] = (busy_sqlite - idle_sqlite) / n
    return out


# sqlite3_db_status counters (sqlite3.h): page cache hits, misses (a page read from the
# file or the WAL), pages written (to the WAL), dirty pages spilled before a COMMIT.
DBSTATUS = {"cache hits": 7, "cache misses": 8, "pages written": 9, "spills": 12}


def db_status(conn: sqlite3.Connection, path: Path) -> dict[str, int] | None:
    """SQLite's own counters of conn (sqlite3_db_status via ctypes; benchmark only). The
    handle is read from the connection object, checked by the file name it reports; None
    where that does not hold (another Python build)."""
    import _sqlite3

    lib = ctypes.CDLL(_sqlite3.__file__)
    lib.sqlite3_db_filename.restype = ctypes.c_char_p
    lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    if not handle or lib.sqlite3_db_filename(handle, b"main") != str(path.resolve()).encode():
        return None
    out = {}
    for name, op in DBSTATUS.items():
        cur, high = ctypes.c_int(), ctypes.c_int()
        lib.sqlite3_db_status(ctypes.c_void_p(handle), op, ctypes.byref(cur), ctypes.byref(high), 0)
        out[name] = cur.value
    return out


def proc_io() -> dict[str, int]:
    """This process's syscall I/O counters (Linux /proc/self/io; empty elsewhere)."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def sqlite_figures(db: Path, n: int) -> dict[str, float]:
    """Per run, n three-step runs executed by an in-process daemon (one thread, so every
    page and syscall is this one's): COMMITs, SQLite page-cache hits, misses and pages
    written, write and read syscalls and the bytes they moved (WAL frames, checkpoint
    copies into the file, fsyncs not counted)."""
    from flowctl.clock import SystemClock
    from flowctl.daemon import Daemon, DaemonConfig

    with Client(db) as client:
        for i in range(0, n, 1000):
            client.start_many(
                f"{FLOWS}:{WORKFLOW[0]}", [{"n": j} for j in range(i, min(n, i + 1000))]
            )
        store = client.store
        conn = next(v for v in vars(store).values() if isinstance(v, sqlite3.Connection))
        commits0, status0, io0 = store.commit_stats().commits, db_status(conn, db), proc_io()
        done = Daemon(store, SystemClock(), DaemonConfig(concurrency=1)).tick()
        commits, status, io = store.commit_stats().commits, db_status(conn, db), proc_io()
    if done != n:
        raise SystemExit(f"{done} of {n} runs executed in process")
    out = {"COMMITs": (commits - commits0) / n}
    if status is not None and status0 is not None:
        out.update({k: (status[k] - status0[k]) / n for k in DBSTATUS})
    for key, name in (("syscw", "write calls"), ("wchar", "KiB written"), ("syscr", "read calls")):
        if key in io:
            out[name] = (io[key] - io0[key]) / n / (1024 if key == "wchar" else 1)
    return out


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
    parser.add_argument(
        "--instructions",
        type=int,
        default=0,
        metavar="N",
        help="compare the big database by instructions per run (callgrind, N runs) instead",
    )
    parser.add_argument(
        "--ids-after", action="store_true", help="seed ids that sort after new ones (see above)"
    )
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
        if args.instructions:
            big_instructions(tmp, args)
            return
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
        several = [w for w in args.workers if w > 1]
        if several:
            print("CPU ms per run in the daemon process / in its worker processes:")
            for c in args.concurrency:
                cells = [
                    f"workers {w}: {med([x['own_ms'] for x in got[(c, w)]])} /"
                    f" {med([x['their_ms'] for x in got[(c, w)]])}"
                    for w in several
                ]
                print(f"  {c:>11}   " + "   ".join(cells))
        if args.big:
            big(tmp, args, idles)


def seed_big(tmp: Path, args: argparse.Namespace) -> Path:
    base = tmp / "big-seed.db"
    t = time.perf_counter()
    seed_finished(base, args.big, args.ids_after)
    after = " (ids sorting after new ones)" if args.ids_after else ""
    print(f"\nseeded {args.big:,} finished runs{after} in {time.perf_counter() - t:.0f} s")
    return base


def big_instructions(tmp: Path, args: argparse.Namespace) -> None:
    """The --big comparison in instructions per run and SQLite's counters (load-free)."""
    if not args.big:
        raise SystemExit("--instructions compares against --big finished runs: give --big N")
    base = seed_big(tmp, args)
    per: dict[str, list[dict[str, float]]] = {"empty": [], "big": []}
    for r in range(args.rounds):
        for label in per:
            db = base if label == "big" else tmp / f"instr-empty-{r}.db"
            per[label].append(instructions_per_run(tmp, db, args.instructions))
            if db != base:
                db.unlink()
        print(f"  round {r + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
    print(
        f"instructions per three-step run (callgrind, millions), {args.instructions:,} runs,"
        f" {args.rounds} round(s); empty database, then {args.big:,} finished runs:"
    )
    for key in per["empty"][0]:
        empty = [x[key] / 1e6 for x in per["empty"]]
        full = [x[key] / 1e6 for x in per["big"]]
        change = 100 * (statistics.median(full) / statistics.median(empty) - 1)
        print(f"  {key:30} {med(empty):>22} {med(full):>22}   {change:+.1f}%")
    print("  (target: a run costs at most 10% more; the in-process figure is the exact one:")
    print("  the real daemon's batching and polling follow the machine's timing)")
    n = max(args.instructions, 500)
    empty_db = tmp / "figures-empty.db"
    figures = {"empty": sqlite_figures(empty_db, n), "big": sqlite_figures(base, n)}
    print(f"SQLite per run, {n:,} runs through an in-process daemon (concurrency 1):")
    print(f"  {'':16}{'empty':>10}{'big':>10}")
    for key in figures["empty"]:
        print(f"  {key:16}{figures['empty'][key]:10.2f}{figures['big'][key]:10.2f}")


def big(tmp: Path, args: argparse.Namespace, idles: dict[tuple[int, int], Idle]) -> None:
    base = seed_big(tmp, args)
    rates: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for w in args.workers:
            for label in ("empty", "big"):
                # The big file is reused: each point adds --runs finished runs to its million.
                db = base if label == "big" else tmp / f"{label}-{r}-{w}.db"
                got = point(db, args.runs, 8, w, idles.get((8, w), (0.0, 0.0, (0.0, 0.0))))
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
