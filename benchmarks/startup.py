"""CLI start-up: `flowctl --help` and `flowctl ls` through the venv's entry point.

    .venv/bin/python benchmarks/startup.py [--repeats 15]

Each command runs once to warm up, then `--repeats` times; the median wall time and the
median CPU time (user + system of the child, from wait4) are printed, with no bytecode
cache and with a warmed one (bytecode.envs). On a shared, loaded machine the wall time
mostly measures waiting for a core; the CPU time is what the process itself costs, and
`python -c pass` is printed as the floor every Python process pays. Targets (issue 17,
item 4): `--help` under 120 ms, `ls` under 200 ms. engine.py prints the same figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bytecode

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"--help": 120, "ls": 200}


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, child CPU s) of one process."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode()[-300:]}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, float]:
    _once(argv, env)  # warm-up (writes the bytecode cache where one is allowed)
    runs = [_once(argv, env) for _ in range(repeats)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def startup(tmp: Path, repeats: int) -> None:
    exe = ROOT / ".venv" / "bin" / "flowctl"
    if not exe.exists():
        print(f"startup: {exe} not found (make the venv: python -m venv .venv && pip install -e .)")
        return
    python = exe.parent / "python"
    db = tmp / "startup.db"
    subprocess.run(
        [str(exe), "init"], env={**os.environ, "FLOWCTL_DB": str(db)}, cwd=tmp,
        capture_output=True, check=True,
    )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import flowctl; print(flowctl.__file__)"],
        cwd=tmp, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    print(f"start-up through {exe.relative_to(ROOT)}, loading {where}")
    print(f"  median of {repeats} after one warm-up; os.cpu_count()={os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"  this machine: {bytecode.describe()}")
    for label, variant in bytecode.envs(tmp):
        env = {**variant, "FLOWCTL_DB": str(db)}
        print(f"  {label}:")
        wall, cpu = measure([str(python), "-c", "pass"], env, repeats)
        print(f"    {'python -c pass':<16} wall {wall * 1000:6.0f} ms   cpu {cpu * 1000:6.0f} ms")
        for args in (["--help"], ["ls"]):
            wall, cpu = measure([str(exe), *args], env, repeats)
            target = TARGETS[args[0]]
            print(
                f"    flowctl {' '.join(args):<8} wall {wall * 1000:6.0f} ms   cpu {cpu * 1000:6.0f} ms"
                f"   (target < {target} ms)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"reproduce: .venv/bin/python benchmarks/startup.py --repeats {args.repeats}")
    with tempfile.TemporaryDirectory(prefix="flowctl-startup-") as d:
        startup(Path(d), args.repeats)


if __name__ == "__main__":
    main()
