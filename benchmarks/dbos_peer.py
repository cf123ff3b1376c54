"""DBOS's side of benchmarks/postgres.py: three-step workflows through a DBOS queue on a
PostgreSQL system database, timed from the first enqueue to the last result.

Run by the Python of the benchmark's own environment that has DBOS (never a flowctl
dependency; benchmarks/postgres.py --dbos makes it):

    PYTHON -I benchmarks/dbos_peer.py URL RUNS

Prints one JSON line: {"runs", "wall_s", "cpu_s"} (cpu_s: this process's user + system,
DBOS's enqueue, executor and system-database client all included).
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main(url: str, runs: int) -> None:
    from dbos import DBOS, DBOSConfig

    DBOS(config=DBOSConfig(name="flowctl-bench", system_database_url=url))

    @DBOS.step()
    def add(a: int, b: int) -> int:
        return a + b

    @DBOS.workflow()
    def three(n: int) -> int:
        a = add(n, 1)
        b = add(a, 1)
        return add(b, 1)

    DBOS.launch()
    DBOS.register_queue("bench")  # DBOS's defaults (its poll interval included)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    handles = [DBOS.enqueue_workflow("bench", three, i) for i in range(runs)]
    results = [h.get_result() for h in handles]
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert results == [i + 3 for i in range(runs)], "DBOS returned wrong results"
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"runs": runs, "wall_s": wall, "cpu_s": cpu}), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
