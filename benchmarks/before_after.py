"""This checkout against another one (an earlier commit), alternating in one run.

    git worktree add ../before 22e834a
    (cd ../before && python3 -m venv .venv && .venv/bin/pip install -q -e .)
    .venv/bin/python benchmarks/before_after.py --other ../before --rounds 9

Each round runs `benchmarks/throughput.py --rounds 1 --runs N` of each
checkout with that checkout's own interpreter (its own flowctl), the order swapped every
round so neither always goes first on a machine that drifts. From each it takes the
three-step figures: the ratio to the reference loop (measured in the same process, so a
noisy round moves both), the daemon alone, and the daemon's CPU per workflow (read from
the kernel, wait4). Prints every round and the medians; no pass/fail.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = {
    "ratio": r"flowctl / reference\s+([\d.]+)",
    "daemon_per_s": r"daemon alone\s+([\d,]+) /s",
    "cpu_ms": r"daemon CPU per workflow\s+([\d.]+) ms",
    "reference_per_s": r"workflows/s\s+([\d,]+) /s",
}


def one_round(tree: Path, runs: int) -> dict[str, float]:
    python = tree / ".venv" / "bin" / "python"
    out = subprocess.run(
        [str(python), str(tree / "benchmarks" / "throughput.py"), "--rounds", "1", "--runs",
         str(runs), "--huey-python", "/nonexistent"],
        capture_output=True, text=True, check=True, cwd=tree, timeout=1800,
    ).stdout  # fmt: skip
    got = {}
    for key, pattern in FIGURES.items():
        m = re.search(pattern, out)
        if m is None:
            raise SystemExit(f"{tree}: no {key} in its output:\n{out}")
        got[key] = float(m.group(1).replace(",", ""))
    return got


def med(values: list[float]) -> str:
    return f"{statistics.median(values):,.3f} ({min(values):,.3f} to {max(values):,.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="the other checkout, with its .venv")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=5000)
    args = parser.parse_args()
    trees = {"this": ROOT, "other": Path(args.other).resolve()}
    print(f"reproduce: .venv/bin/python benchmarks/before_after.py {' '.join(sys.argv[1:])}")
    print(
        f"this {ROOT}, other {trees['other']}; {os.cpu_count()} CPU(s),"
        f" load {os.getloadavg()[0]:.1f}; {args.rounds} rounds of {args.runs:,} runs"
    )
    got: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        order = ["this", "other"] if r % 2 == 0 else ["other", "this"]
        for name in order:
            got[name].append(one_round(trees[name], args.runs))
        this, other = got["this"][-1], got["other"][-1]
        print(
            f"  round {r + 1} ({order[0]} first): ratio {this['ratio']:.3f} vs"
            f" {other['ratio']:.3f}; CPU/workflow {this['cpu_ms']:.3f} vs"
            f" {other['cpu_ms']:.3f} ms; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print()
    for name in ("other", "this"):
        rounds = got[name]
        print(f"{name} ({trees[name]}):")
        print(f"  flowctl / reference     {med([x['ratio'] for x in rounds])}")
        print(f"  daemon alone            {med([x['daemon_per_s'] for x in rounds])} /s")
        print(f"  daemon CPU per workflow {med([x['cpu_ms'] for x in rounds])} ms")
        print(f"  reference loop          {med([x['reference_per_s'] for x in rounds])} /s")
    pairs = [t["cpu_ms"] / o["cpu_ms"] for t, o in zip(got["this"], got["other"], strict=True)]
    print(f"CPU per workflow, this / other, round by round: {med(pairs)}")
    ratios = [t["ratio"] / o["ratio"] for t, o in zip(got["this"], got["other"], strict=True)]
    print(f"ratio to the reference, this / other, round by round: {med(ratios)}")


if __name__ == "__main__":
    main()
