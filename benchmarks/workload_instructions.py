"""User-space instructions per run of a workload through an in-process daemon with its
batch runner on the system clock (so short sleeps and retries rest in memory, as in a
real daemon), for comparing two trees on a noisy host (issue 40).

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/workload_instructions.py ROOT WORKFLOW N

runs N runs of `benchmarks/flows.py:WORKFLOW` (of this checkout: both trees run the same
workflows) with ROOT's flowctl, enqueued with start_many. Run it for N = 1 and N = 201
(with PYTHONHASHSEED=0) and take (I(201) - I(1)) / 200 from callgrind's "Collected" line:
the instructions one run costs, enqueue included. Waiting (a sleep, a backoff) costs none.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

FLOWS = Path(__file__).resolve().parent / "flows.py"
root, workflow, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root)

from flowctl.client import Client  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    db = Path(tmp) / "w.db"
    with Client(db) as client:
        client.start_many(f"{FLOWS}:{workflow}", [{"n": i} for i in range(n)])
    with Client(db) as client:
        daemon = Daemon(client.store, SystemClock(), DaemonConfig(concurrency=64, workers=1))
        serving = threading.Thread(target=daemon.run_forever)
        serving.start()
        look = sqlite3.connect(db)
        while (
            look.execute("SELECT COUNT(*) FROM runs WHERE status = 'completed'").fetchone()[0] < n
        ):
            time.sleep(0.2)
        look.close()
        daemon.stop(drain=True)
        serving.join()
print("done", n)
