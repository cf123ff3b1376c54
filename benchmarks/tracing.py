"""What traces cost (issue 41): daemon CPU per three-step workflow with tracing off, with
the console exporter and with the OTLP exporter, alternating in one run.

    .venv/bin/python benchmarks/tracing.py                 # 9 rounds of 2,000 runs
    .venv/bin/python benchmarks/tracing.py --rounds 3 --runs 500

Each round, for each mode in turn, on a fresh temporary database: `--runs` runs of
`benchmarks/flows.py:three` enqueued in one transaction, then `flowctl daemon --until-idle`
at default settings with the mode's environment:

- off: no OTEL_* variable (what every user without the `[otel]` extra gets);
- console: OTEL_TRACES_EXPORTER=console, its output to /dev/null;
- otlp: OTEL_TRACES_EXPORTER=otlp over http/protobuf to a collector stand-in in this
  process (an HTTP server that reads each request and answers 200), so the exporter
  does all its work (batching, encoding, the POST) and nothing is dropped.

CPU per workflow is the daemon's user+system CPU from the kernel (wait4), minus that of
the same daemon with the same environment running one run (start-up, imports, exit),
over the runs after the first. Medians over the rounds, with the range and the host's
load average beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import run_daemon  # noqa: E402
from flowctl.client import Client  # noqa: E402

FLOWS = str(ROOT / "benchmarks" / "flows.py")


class _Collector(BaseHTTPRequestHandler):
    """Reads an OTLP/HTTP export and accepts it (an empty ExportTraceServiceResponse)."""

    spans_bytes = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        _Collector.spans_bytes += len(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def environments(port: int) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {
        "off": base,
        "console": {**base, "OTEL_TRACES_EXPORTER": "console"},
        "otlp": {
            **base,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        },
    }


def daemon_cpu(db: Path, env: dict[str, str]) -> float:
    cpu, code = run_daemon(db, None, None, env)
    if code != 0:
        raise SystemExit(f"the daemon exited {code}")
    return cpu


def cpu_ms_per_run(tmp: Path, name: str, n: int, env: dict[str, str]) -> float:
    """Daemon CPU per further three-step workflow under `env`."""
    warm, db = tmp / f"{name}-warm.db", tmp / f"{name}.db"
    with Client(warm) as client:
        client.start(f"{FLOWS}:three", {"n": 0})
    with Client(db) as client:
        client.start_many(f"{FLOWS}:three", [{"n": i} for i in range(n)])
    base = daemon_cpu(warm, env)
    return 1000 * max(0.0, daemon_cpu(db, env) - base) / (n - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    envs = environments(server.server_address[1])
    figures: dict[str, list[float]] = {mode: [] for mode in envs}
    loads = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            for mode, env in envs.items():
                figures[mode].append(cpu_ms_per_run(Path(tmp), f"{mode}-{r}", args.runs, env))
        loads.append(os.getloadavg()[0])
        print(
            f"round {r + 1}: "
            + ", ".join(f"{mode} {values[-1]:.3f}" for mode, values in figures.items())
            + f" ms/wf (load {loads[-1]:.2f})",
            flush=True,
        )
    server.shutdown()
    off = statistics.median(figures["off"])
    print(f"\n$ {' '.join([os.path.relpath(sys.executable), *sys.argv])}")
    print(f"{args.rounds} rounds x {args.runs} three-step runs, {os.cpu_count()} cores,")
    print(f"load average {min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f})")
    for mode, values in figures.items():
        med = statistics.median(values)
        print(
            f"  {mode:8} {med:.3f} ms CPU per workflow (range {min(values):.3f}-"
            f"{max(values):.3f}); {med - off:+.3f} ms against off"
        )
    print(f"  the collector stand-in received {_Collector.spans_bytes:,} bytes of OTLP")


if __name__ == "__main__":
    main()
