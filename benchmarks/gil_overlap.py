"""Can SQLite statements on one thread overlap Python on another? (issue 14, item 3)

    .venv/bin/python benchmarks/gil_overlap.py
    .venv/bin/python benchmarks/gil_overlap.py --statements 50000

One thread inserts rows (two indexes, WAL, synchronous=FULL, a COMMIT per 32 rows, as a
daemon's rounds do) while another runs a pure-Python loop, at several GIL switch
intervals; then each alone. sqlite3 releases the GIL inside each statement, but the
writer must win it back after every one, and a busy Python thread gives it up only when
the switch interval forces it: the writer's rate beside the loop, against its rate
alone, says whether a writer thread could run the SQL while the handlers run Python.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path


def writer(conn: sqlite3.Connection, n: int) -> float:
    """Insert n rows, committing every 32; returns the seconds it took."""
    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    for i in range(n):
        conn.execute("INSERT INTO t (a, b, n) VALUES (?, ?, ?)", (f"a{i % 97}", f"b{i % 89}", i))
        if i % 32 == 31:
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
    conn.execute("COMMIT")
    return time.perf_counter() - start


def python_loop(stop: threading.Event, count: list[int]) -> None:
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i * i
        count[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--statements", type=int, default=20_000)
    args = parser.parse_args()
    n = args.statements
    print(f"reproduce: .venv/bin/python benchmarks/gil_overlap.py --statements {n}")
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "g.db", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b TEXT, n INTEGER)")
        conn.execute("CREATE INDEX t_a ON t (a, n)")
        conn.execute("CREATE INDEX t_b ON t (b, n)")
        alone = n / writer(conn, n)
        print(f"  writer alone                 {alone:9,.0f} statements/s")
        default = sys.getswitchinterval()
        try:
            for interval in (0.005, 0.001, 0.0002):
                sys.setswitchinterval(interval)
                stop, count = threading.Event(), [0]
                loop = threading.Thread(target=python_loop, args=(stop, count))
                loop.start()
                started = time.perf_counter()
                rate = n / writer(conn, n)
                elapsed = time.perf_counter() - started
                stop.set()
                loop.join()
                print(
                    f"  beside Python, switch {interval * 1000:.1f} ms {rate:9,.0f} statements/s"
                    f" ({rate / alone:.0%} of alone); the loop {count[0] / elapsed:,.0f}/s"
                )
        finally:
            sys.setswitchinterval(default)
        conn.close()
    stop, count = threading.Event(), [0]
    loop = threading.Thread(target=python_loop, args=(stop, count))
    started = time.perf_counter()
    loop.start()
    time.sleep(1.0)
    stop.set()
    loop.join()
    print(f"  the Python loop alone        {count[0] / (time.perf_counter() - started):9,.0f}/s")


if __name__ == "__main__":
    main()
