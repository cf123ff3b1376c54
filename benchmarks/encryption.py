"""Encryption cost (issue 42): three-step workflows with and without a key, same run.

    .venv/bin/python benchmarks/encryption.py            # 3 rounds of 3,000 runs
    .venv/bin/python benchmarks/encryption.py --quick    # 2 rounds of 1,000
    .venv/bin/python benchmarks/encryption.py --runs 5000 --rounds 5

Each round measures both, on fresh temporary databases, alternating which goes first:
the three-step workload of benchmarks/throughput.py (`benchmarks/flows.py:three` enqueued
with `Client.start_many`, then `flowctl daemon --until-idle`), once in clear and once with
FLOWCTL_KEY_FILE set (the enqueue and the daemon both seal: the input, three step results
and the run's result per workflow). Figures: workflows/s (enqueue plus the daemon's busy
time, first claim to last completion as recorded), the daemon alone, and CPU ms per
workflow (the daemon's user+system CPU less a one-run daemon's, per further run). Then
the cost of one value sealed and opened (AES-256-GCM, a random nonce, base64 and the JSON
envelope) at three sizes, in-process. Medians over the rounds, with the range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from throughput import flowctl_runs  # noqa: E402

from flowctl.crypto.cipher import load_keyring  # noqa: E402
from flowctl.crypto.keyfile import new_key_file  # noqa: E402
from flowctl.store.values import JOURNAL, Values  # noqa: E402


def one_round(tmp: Path, key: Path, n: int, keyed_first: bool) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for keyed in (keyed_first, not keyed_first):
        name = "keyed" if keyed else "clear"
        if keyed:
            os.environ["FLOWCTL_KEY_FILE"] = str(key)
        else:
            os.environ.pop("FLOWCTL_KEY_FILE", None)
        folder = tmp / name  # its own databases, the warm-up's too
        folder.mkdir()
        try:
            out[name] = flowctl_runs(folder, name, "three", n, None, None)
        finally:
            os.environ.pop("FLOWCTL_KEY_FILE", None)
    return out


def per_value(key: Path) -> list[tuple[int, float, float]]:
    """(bytes, µs to seal, µs to open) of one JSON value, in-process."""
    values = Values(load_keyring(key))
    rows = []
    for size in (100, 1_000, 10_000):
        text = '"' + "x" * (size - 2) + '"'
        reps = 20_000 if size < 10_000 else 5_000
        t = time.perf_counter()
        for _ in range(reps):
            sealed = values.seal(text, JOURNAL)
        seal_us = (time.perf_counter() - t) / reps * 1e6
        t = time.perf_counter()
        for _ in range(reps):
            values.loads(sealed, JOURNAL)
        open_us = (time.perf_counter() - t) / reps * 1e6
        rows.append((size, seal_us, open_us))
    return rows


def _median(rounds: list[dict[str, dict[str, float]]], name: str, figure: str) -> str:
    got = [r[name][figure] for r in rounds]
    places = 3 if figure == "cpu_ms" else 0
    return f"{statistics.median(got):,.{places}f} ({min(got):,.{places}f}-{max(got):,.{places}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="runs per figure per round (default 3,000)")
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1,000 runs")
    args = parser.parse_args()
    n = args.runs or (1000 if args.quick else 3000)
    rounds = args.rounds or (2 if args.quick else 3)
    print("reproduce: .venv/bin/python benchmarks/encryption.py " + " ".join(sys.argv[1:]))
    print(f"{os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}; {rounds} x {n:,} runs")
    results = []
    with tempfile.TemporaryDirectory(prefix="flowctl-enc-") as d:
        key = Path(new_key_file(Path(d) / "key").path)
        for r in range(rounds):
            tmp = Path(d) / f"round-{r}"
            tmp.mkdir()
            results.append(one_round(tmp, key, n, keyed_first=r % 2 == 1))
        sizes = per_value(key)
    print(f"{'three-step':<12} {'workflows/s':>24} {'daemon/s':>24} {'CPU ms/workflow':>22}")
    for name in ("clear", "keyed"):
        print(
            f"{name:<12} {_median(results, name, 'per_s'):>24}"
            f" {_median(results, name, 'daemon_per_s'):>24} {_median(results, name, 'cpu_ms'):>22}"
        )
    clear = statistics.median(r["clear"]["cpu_ms"] for r in results)
    keyed = statistics.median(r["keyed"]["cpu_ms"] for r in results)
    print(f"encryption's CPU per workflow: {keyed - clear:+.3f} ms ({(keyed / clear - 1):+.0%})")
    for size, seal_us, open_us in sizes:
        print(f"one value of {size:>6,} bytes: seal {seal_us:6.1f} µs, open {open_us:6.1f} µs")


if __name__ == "__main__":
    main()
