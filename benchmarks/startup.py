"""CLI start-up: `flowctl --help` and `flowctl ls` through the venv's entry point.

    .venv/bin/python benchmarks/startup.py [--repeats 15]

Each command runs once to warm up, then `--repeats` times; the median wall time and the
median CPU time (user + system of the child, from wait4) are printed, with no bytecode
cache at all, with a warmed one (bytecode.envs), and with only flowctl's own modules
compiled (bytecode.own_code_compiled: an editable install under PYTHONDONTWRITEBYTECODE=1).
On a shared, loaded machine the wall time mostly measures waiting for a core; the CPU time
is what the process itself costs. Two floors are printed: `python -c pass`, what every
Python process pays, and `python -c "import typer"`, what any Typer CLI pays before its
first line runs; the rest of a `flowctl` line is flowctl's own. Targets (issue 17, item 4):
`--help` under 120 ms (the root's, `ls --help`, `schedule add --help`), `ls` under 200 ms,
with `ls` listing 20 runs. engine.py prints the same figures.

    .venv/bin/python benchmarks/startup.py --instructions

adds, per line, the instructions the process executed (millions, one run under valgrind's
callgrind, PYTHONHASHSEED=0): a count that another process's load does not change, so two
trees can be compared on a busy machine where CPU times move by 30% from run to run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bytecode

ROOT = Path(__file__).resolve().parent.parent
# argv -> target ms; each help is printed from stand-ins or one built command (cli/lazy.py)
TARGETS = {
    ("--help",): 120,
    ("ls", "--help"): 120,
    ("schedule", "add", "--help"): 120,
    ("ls",): 200,
}


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


def measure(argv: list[str], env: dict[str, str], repeats: int) -> str:
    """The figures of one line: median wall, median CPU and least CPU (the least is the
    steadiest estimate when other processes share the cores), in ms."""
    _once(argv, env)  # warm-up (writes the bytecode cache where one is allowed)
    runs = [_once(argv, env) for _ in range(repeats)]
    wall = statistics.median(w for w, _ in runs) * 1000
    cpu = sorted(c * 1000 for _, c in runs)
    return f"wall {wall:6.0f} ms   cpu {statistics.median(cpu):6.0f} ms (least {cpu[0]:4.0f})"


def instructions(argv: list[str], env: dict[str, str]) -> str:
    """Millions of instructions one run of `argv` executes, counted by callgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return "   (no valgrind)"
    proc = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env={**env, "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, check=False,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", proc.stderr)
    return f"   {int(found.group(1)) / 1e6:6.0f} M instr" if found else "   (callgrind failed)"


def startup(tmp: Path, repeats: int, count: bool = False) -> None:
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
    for _ in range(20):  # a list to print: `ls` pays for its table, as a user's does
        subprocess.run(
            [str(exe), "run", str(ROOT / "workflows" / "ping.yaml"), "--detach"],
            env={**os.environ, "FLOWCTL_DB": str(db)}, cwd=tmp, capture_output=True, check=True,
        )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import flowctl; print(flowctl.__file__)"],
        cwd=tmp, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    print(f"start-up through {exe.relative_to(ROOT)}, loading {where}")
    print(f"  median of {repeats} after one warm-up; os.cpu_count()={os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"  this machine: {bytecode.describe()}")
    cases = bytecode.envs(tmp)
    cases.append(("", {}))  # made from the cached case's prefix once that one has run
    for label, variant in cases:
        if not label:
            label, variant = bytecode.own_code_compiled(tmp, cases[1][1])
        env = {**variant, "FLOWCTL_DB": str(db)}
        print(f"  {label}:")
        for floor in ("pass", "import typer"):
            argv = [str(python), "-c", floor]
            figures = measure(argv, env, repeats) + (instructions(argv, env) if count else "")
            print(f"    {'python -c ' + repr(floor):<28} {figures}   (floor)")
        for args, target in TARGETS.items():
            argv = [str(exe), *args]
            figures = measure(argv, env, repeats) + (instructions(argv, env) if count else "")
            print(f"    {'flowctl ' + ' '.join(args):<28} {figures}   (target < {target} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions (valgrind)"
    )
    args = parser.parse_args()
    flag = " --instructions" if args.instructions else ""
    print(f"reproduce: .venv/bin/python benchmarks/startup.py --repeats {args.repeats}{flag}")
    with tempfile.TemporaryDirectory(prefix="flowctl-startup-") as d:
        startup(Path(d), args.repeats, args.instructions)


if __name__ == "__main__":
    main()
