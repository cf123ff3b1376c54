"""User-space instructions per three-step workflow in an in-process daemon, for comparing
two trees on a noisy host (`profile_daemon.py --instructions` counts only the daemon
process, not its worker processes).

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/inprocess_instructions.py ROOT N

runs N three-step runs of ROOT's `benchmarks/flows.py:three` (enqueued with start_many)
through `Daemon.tick()` at default settings, with ROOT's flowctl. Run it for N = 1 and
N = 401 (with PYTHONHASHSEED=0) and take (I(401) - I(1)) / 400 from callgrind's
"Collected" line: the instructions one workflow costs, enqueue included.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

root, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, root)

from flowctl.client import Client  # noqa: E402
from flowctl.clock import SystemClock  # noqa: E402
from flowctl.daemon import Daemon, DaemonConfig  # noqa: E402

with tempfile.TemporaryDirectory() as tmp, Client(Path(tmp) / "i.db") as client:
    client.start_many(f"{root}/benchmarks/flows.py:three", [{"n": i} for i in range(n)])
    daemon = Daemon(client.store, SystemClock(), DaemonConfig())
    done = 0
    while done < n:
        done += daemon.tick()
print("done", done)
