"""What flow control costs (issue 37, item 8), with real `flowctl daemon` processes on
fresh SQLite files, figures read back from what the daemon recorded:

- claim throughput: 10,000 one-step runs over 100 users (random), unlimited, then with
  `concurrency: {limit: 1, key: "${{ input.user }}"}`, alternating in the same
  invocation, medians; the keyed figure against the target of 80 % of the unlimited one:
  the claim alone in process (a claimer keeping 8 running, each claim completing the
  oldest), then real daemons (first `claimed` event to last `completed` one) with 8 at
  once, then at default settings (64 at once: more than 100 keys let run at once, so half
  of the runs are held behind a busy key on the way and claimed again); beside each
  daemon figure, the same ratio over the middle 80 % of completions, which leaves out
  the start (the first claims hold every run queued behind a busy key) and the end (the
  keys with the most runs finish last, one run at a time);
- bytes the daemon's processes wrote per run (the WAL's pages, from /proc/PID/io: a count
  the host's noise does not move), and the CPU time they spent per run (user and system,
  from /proc/PID/stat: what a busy neighbour moves far less than the wall clock), beside
  each daemon figure, with keyed CPU against unlimited as a ratio of runs per CPU second;
- rate accuracy: runs whose one step takes the named limit `api` (100/1s), the largest
  number of step starts in any 1-second window (each step body's own clock reading when
  it began), and the starts achieved per 1 s window, back to back from the first.

The databases go on /dev/shm where there is one (`--dir` to choose): on a disk that other
work shares, the fsync of each commit swamps what is measured and varies threefold.

    .venv/bin/python benchmarks/flow_control.py             # 10,000 runs, 500 paced
    .venv/bin/python benchmarks/flow_control.py --runs 2000 --paced 300   # quicker
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon import children, count, proc_cpu_s, read, spawn, stop, wait_for  # noqa: E402

from flowctl import ops  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.store.sqlite import SqliteStore as Store  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flow_flows.py")
CLOCK = SystemClock()
USERS = 100


def inputs(n: int, seed: int = 37) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(USERS)}", "n": i} for i in range(n)]


def queue(db: Path, workflow: str, runs: list[dict[str, object]]) -> None:
    with Store(db) as store:
        for i in range(0, len(runs), 1000):
            ops.start_many(store, f"{FLOWS}:{workflow}", runs[i : i + 1000], clock=CLOCK)


def busy_span(db: Path) -> float:
    """Seconds from the first claim to the last completion the daemon recorded."""
    first = read(db, "SELECT MIN(at) FROM timeline WHERE type = 'claimed'")[0][0]
    last = read(db, "SELECT MAX(at) FROM timeline WHERE type = 'completed'")[0][0]
    return (int(last) - int(first)) / 1e6


def middle_rate(db: Path) -> float:
    """Runs/s between the 10th and the 90th percentile of completion times: the rate once
    the daemon is under way and before the last keys run out, the same window for both
    workflows (the first claims of a keyed backlog hold every run behind a busy key, and
    the keys with the most runs are the last to finish)."""
    ats = [int(at) for (at,) in read(db, "SELECT at FROM timeline WHERE type = 'completed'")]
    ats.sort()
    lo, hi = len(ats) // 10, len(ats) * 9 // 10
    return (hi - lo) / ((ats[hi] - ats[lo]) / 1e6)


def written(pid: int) -> int:
    """Bytes `pid` and its worker processes have written (write calls, /proc/PID/io)."""
    total = 0
    for p in (pid, *children(pid)):
        with open(f"/proc/{p}/io") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
    return total


def cpu_s(pid: int) -> float:
    """CPU seconds `pid` and its worker processes have spent (user and system)."""
    return sum(proc_cpu_s(p) for p in (pid, *children(pid)))


def daemon_rate(
    folder: Path, workflow: str, runs: list[dict[str, object]], tag: str, *args: str
) -> float:
    """Runs/s of a real daemon (with `args`) over `runs` of `workflow`; the KiB its
    processes wrote per run, their CPU µs per run and the middle rate (middle_rate) are
    noted in WRITTEN, CPU and MIDDLE."""
    db = folder / f"{workflow}-{tag}.db"
    queue(db, workflow, runs)
    proc = spawn(db, *args)
    try:
        wait_for(lambda: count(db, "completed") == len(runs), 600, f"{workflow} runs")
        WRITTEN.setdefault(workflow, []).append(written(proc.pid) / 1024 / len(runs))
        CPU.setdefault(workflow, []).append(cpu_s(proc.pid) * 1e6 / len(runs))
    finally:
        stop(proc)
    MIDDLE.setdefault(workflow, []).append(middle_rate(db))
    return len(runs) / busy_span(db)


WRITTEN: dict[str, list[float]] = {}  # workflow -> KiB written per run, per daemon_rate
CPU: dict[str, list[float]] = {}  # workflow -> CPU µs per run, per daemon_rate
MIDDLE: dict[str, list[float]] = {}  # workflow -> runs/s of the middle 80 %, per daemon_rate


def claim_rate(folder: Path, workflow: str, runs: list[dict[str, object]], tag: str) -> float:
    """Runs claimed/s in process, keeping 8 running: claim what is free, complete the oldest."""
    db = folder / f"claim-{workflow}-{tag}.db"
    queue(db, workflow, runs)
    owner, lease, running, claimed = "bench/1/1/a", timedelta(seconds=60), [], 0
    with Store(db) as store:
        started = time.perf_counter()
        while claimed < len(runs):
            now = CLOCK.now()
            got, _ = store.claim_due(owner, now, now + lease, max(1, 8 - len(running)))
            running += [c.lease for c in got]
            claimed += len(got)
            if running:
                store.complete_run(running.pop(0), 1, CLOCK.now(), 0.0)
        return claimed / (time.perf_counter() - started)


Measure = Callable[[str, str], float]


def compare(title: str, rounds: int, measure: Measure) -> None:
    """Unlimited and keyed, alternating for `rounds`, medians and the ratio printed."""
    rates: dict[str, list[float]] = {"plain": [], "keyed": []}
    WRITTEN.clear()
    CPU.clear()
    MIDDLE.clear()
    for i in range(rounds):  # alternating, so a busy neighbour hurts both alike
        for workflow in rates:
            rates[workflow].append(measure(workflow, f"{abs(hash(title)) % 10**6}-{i}"))
    plain, keyed = (statistics.median(rates[w]) for w in ("plain", "keyed"))
    shown = {w: ", ".join(f"{r:.0f}" for r in rates[w]) for w in rates}
    print(f"{title} (median of {rounds}, alternating):")
    print(f"  unlimited                 {plain:8.0f} runs/s  ({shown['plain']})")
    print(
        f"  concurrency 1 per user    {keyed:8.0f} runs/s  ({shown['keyed']})"
        f"  {keyed / plain:.0%} of unlimited (target: at least 80%)"
    )
    if WRITTEN:
        kib = {w: statistics.median(WRITTEN[w]) for w in rates}
        print(
            f"  KiB written per run (median): unlimited {kib['plain']:.1f}, keyed {kib['keyed']:.1f}"
        )
    if MIDDLE:
        middle = [k / p for p, k in zip(MIDDLE["plain"], MIDDLE["keyed"], strict=True)]
        print(
            "  the middle 80% of completions (under way, before the last keys run out):"
            f" unlimited {statistics.median(MIDDLE['plain']):.0f},"
            f" keyed {statistics.median(MIDDLE['keyed']):.0f} runs/s;"
            f" keyed against unlimited {statistics.median(middle):.0%}"
            f" (median of rounds; {min(middle):.0%} to {max(middle):.0%})"
        )
    if CPU:
        # Per round, so a busy neighbour in one round moves both of its figures alike.
        ratios = [p / k for p, k in zip(CPU["plain"], CPU["keyed"], strict=True)]
        cpu = {w: statistics.median(CPU[w]) for w in rates}
        print(
            f"  CPU µs per run (median): unlimited {cpu['plain']:.0f}, keyed {cpu['keyed']:.0f};"
            f" runs per CPU second, keyed against unlimited: {statistics.median(ratios):.0%}"
            f" (median of rounds; {min(ratios):.0%} to {max(ratios):.0%})"
        )


def rate_accuracy(folder: Path, n: int, rate: int) -> tuple[int, int, float]:
    """(most token times in any 1 s window, most body starts in any 1 s window, starts per window)
    of `n` runs paced by api = rate/1s. Token times are the starts the limit recorded (kept
    by a trigger of this benchmark's own as the limit prunes them); body starts are each
    step body's own clock reading as it began."""
    db = folder / "paced.db"
    with Store(db) as store:
        store.set_limit("api", None, (rate, 1_000_000), CLOCK.now())
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("CREATE TABLE bench_tokens (at INTEGER NOT NULL)")
    conn.execute(
        "CREATE TRIGGER bench_tokens AFTER INSERT ON limit_starts"
        " BEGIN INSERT INTO bench_tokens (at) VALUES (NEW.at); END"
    )
    conn.close()
    queue(db, "paced", [{"n": i} for i in range(n)])  # each step returns when it began (µs)
    proc = spawn(db, "--concurrency", "8")
    try:
        wait_for(lambda: count(db, "completed") == n, 600, "paced runs")
    finally:
        stop(proc)
    tokens = sorted(int(at) for (at,) in read(db, "SELECT at FROM bench_tokens"))
    rows = read(db, "SELECT value FROM journal WHERE kind = 'step'")
    starts = sorted(int(json.loads(v)) for (v,) in rows)
    return most_in_window(tokens), most_in_window(starts), sustained(starts)


def sustained(starts: list[int], window_us: int = 1_000_000) -> float:
    """Starts per window, over the back-to-back windows from the first start (sorted µs):
    the limit lets a whole window's worth start at once, so runs over the span from the
    first start to the last would overstate it (300 starts in three bursts of 100 span
    2 s). The last window counts whole, which understates a run that ends early in it."""
    windows = (starts[-1] - starts[0]) // window_us + 1
    return len(starts) / windows


def most_in_window(times: list[int], window_us: int = 1_000_000) -> int:
    """The most of `times` (sorted, µs) in any window [t, t + window)."""
    return max(bisect.bisect_left(times, s + window_us) - i for i, s in enumerate(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--paced", type=int, default=500)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", help="where the databases go (default /dev/shm if there)")
    args = parser.parse_args()
    runs = inputs(args.runs)
    shm = Path("/dev/shm")
    place = args.dir or (str(shm) if shm.is_dir() else None)
    print(
        f"databases in {place or tempfile.gettempdir()} (tmpfs: the claim's own cost, not fsync's)"
    )
    print(f"{args.runs:,} one-step runs over {USERS} users (random)")
    with tempfile.TemporaryDirectory(dir=place) as tmp:
        folder = Path(tmp)
        compare(
            "claims in process, 8 running",
            args.rounds,
            lambda wf, tag: claim_rate(folder, wf, runs, tag),
        )
        compare(
            "daemon --concurrency 8 --workers 1",
            args.rounds,
            lambda wf, tag: daemon_rate(
                folder, wf, runs, tag, "--concurrency", "8", "--workers", "1"
            ),
        )
        compare(
            "daemon, default settings (64 at once per worker: more than the 100 keys allow)",
            args.rounds,
            lambda wf, tag: daemon_rate(folder, wf, runs, tag),
        )
        tokens, bodies, achieved = rate_accuracy(folder, args.paced, args.rate)
        print(f"rate limit {args.rate}/1s, {args.paced} paced runs, daemon --concurrency 8:")
        print(f"  most starts taken in any 1 s window:  {tokens} (limit {args.rate})")
        print(
            f"  most step bodies begun in any 1 s window, by their own clocks: {bodies}"
            " (a body begins once its start's transaction has committed)"
        )
        print(f"  starts per 1 s window achieved: {achieved:.1f}")


if __name__ == "__main__":
    main()
