"""Where a three-step run's daemon CPU goes, with the batch runner (issue 14).

    .venv/bin/python benchmarks/cost_breakdown.py                 # 5,000 runs, 3 rounds
    .venv/bin/python benchmarks/cost_breakdown.py --runs 2000 --rounds 2

An in-process `Daemon` at default settings (the batch runner, `flowctl daemon`'s default
concurrency from flowctl.config, one process: what each worker process does) executes
`--runs` runs of `benchmarks/flows.py:three`, enqueued beforehand with `start_many`.
Three parts, each alternating on fresh temporary databases:

- split: process CPU per run; the daemon loop's thread (claims, dispatch) apart from the
  runner's; user and system time; voluntary context switches per run.
- statements: the thread CPU of every SQL statement the store runs, by kind, per run
  (the store's connection is wrapped for the measurement: benchmark only). What is left
  of the process CPU is Python.
- schema: the same runs on a database whose count triggers (`run_counts_update`,
  `event_counts_insert`) or listing indexes (`runs_status_created`,
  `runs_status_finished`, `runs_workflow`) were dropped after enqueue, beside the full
  schema: what each costs per run. They are features (issue 14 item 5: O(1) counts,
  listings under 50 ms at 1,000,000 runs); this says their price, nothing is dropped.
"""

from __future__ import annotations

import argparse
import collections
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowctl.client import Client  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.config import DEFAULTS  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")
TRIGGERS = ("DROP TRIGGER run_counts_update", "DROP TRIGGER event_counts_insert")
INDEXES = (
    "DROP INDEX runs_status_created",
    "DROP INDEX runs_status_finished",
    "DROP INDEX runs_workflow",
)


class TimedConnection:
    """A real sqlite3 connection whose statements' thread CPU is added up by kind."""

    def __init__(self, conn: sqlite3.Connection, stats: dict[str, list[float]]) -> None:
        self._conn = conn
        self._stats = stats

    def _timed(self, kind: str, call: Any, sql: str, args: tuple[Any, ...]) -> Any:
        t = time.thread_time()
        result = call(sql, *args)
        entry = self._stats[kind + " ".join(sql.split())[:72]]
        entry[0] += 1
        entry[1] += time.thread_time() - t
        return result

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed("", self._conn.execute, sql, args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed("(many) ", self._conn.executemany, sql, args)

    def cursor(self) -> _TimedCursor:
        """The store's executemany goes through a cursor (flowctl.store.sql.Tx.many)."""
        return _TimedCursor(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _TimedCursor:
    def __init__(self, conn: TimedConnection) -> None:
        self._conn = conn
        self.rowcount = -1

    def executemany(self, sql: str, rows: Any) -> None:
        self.rowcount = self._conn.executemany(sql, rows).rowcount

    def close(self) -> None:
        pass


def daemon_run(
    n: int, drop: tuple[str, ...] = (), stats: dict[str, list[float]] | None = None
) -> dict[str, float]:
    """n three-step runs through an in-process daemon; CPU figures per run."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "b.db"
        with Client(db) as client:
            client.start_many(f"{FLOWS}:three", [{"n": i} for i in range(n)])
        if drop:
            with sqlite3.connect(db) as conn:
                for statement in drop:
                    conn.execute(statement)
        with Client(db) as client:
            store: Any = client.store
            if stats is not None:
                tx = store.db._tx  # the transaction handle every statement goes through
                tx.conn = TimedConnection(tx.conn, stats)
            daemon = Daemon(store, SystemClock(), DaemonConfig(concurrency=DEFAULTS["concurrency"]))
            before = resource.getrusage(resource.RUSAGE_SELF)
            cpu0, loop0 = time.process_time(), time.thread_time()
            daemon.run_forever(until_idle=True)
            cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
            after = resource.getrusage(resource.RUSAGE_SELF)
        if daemon.executed != n:
            raise SystemExit(f"{daemon.executed} of {n} runs executed")
    return {
        "cpu": cpu / n * 1e6,
        "loop": loop / n * 1e6,
        "user": (after.ru_utime - before.ru_utime) / n * 1e6,
        "sys": (after.ru_stime - before.ru_stime) / n * 1e6,
        "vcsw": (after.ru_nvcsw - before.ru_nvcsw) / n,
    }


def med(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} ({min(values):.1f} to {max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.runs
    daemon_run(50)  # imports and first-run work out of the figures
    print(
        f"reproduce: .venv/bin/python benchmarks/cost_breakdown.py --runs {n} --rounds {args.rounds}"
    )
    print(
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}; {n:,} three-step runs"
    )

    rounds: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    timed: list[float] = []
    for _ in range(args.rounds):
        rounds["full"].append(daemon_run(n))
        rounds["no triggers"].append(daemon_run(n, TRIGGERS))
        rounds["no indexes"].append(daemon_run(n, INDEXES))
        timed.append(daemon_run(n, stats=stats)["cpu"])

    full = rounds["full"]
    print("\nsplit (µs per run, medians with ranges):")
    print(f"  process CPU             {med([r['cpu'] for r in full])}")
    print(f"    daemon loop thread    {med([r['loop'] for r in full])}   (claims, dispatch)")
    print(
        f"    user / system         {med([r['user'] for r in full])} / {med([r['sys'] for r in full])}"
    )
    print(f"  voluntary switches/run  {statistics.median(r['vcsw'] for r in full):.2f}")

    total_runs = n * args.rounds
    in_sql = sum(v[1] for v in stats.values()) / total_runs * 1e6
    print(
        f"\nstatements (thread CPU, µs per run; process CPU with the wrapper {statistics.median(timed):.1f}):"
    )
    print(f"  in SQL statements       {in_sql:6.1f}")
    print(f"  the rest (Python)       {statistics.median(timed) - in_sql:6.1f}")
    for sql, (count, secs) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {secs / total_runs * 1e6:6.1f} µs {count / total_runs:5.2f}x  {sql}")

    print("\nschema (process CPU per run, alternating with the full schema):")
    base = statistics.median(r["cpu"] for r in full)
    for name in ("no triggers", "no indexes"):
        cpu = statistics.median(r["cpu"] for r in rounds[name])
        print(
            f"  {name:<12} {med([r['cpu'] for r in rounds[name]])}   full schema costs {base - cpu:+.1f} µs"
        )
    print(
        f"  (triggers: {', '.join(s.split()[-1] for s in TRIGGERS)};"
        f" indexes: {', '.join(s.split()[-1] for s in INDEXES)})"
    )


if __name__ == "__main__":
    main()
