"""Whether a start-up figure paid for compiling Python source: say it beside the figure.

A machine with PYTHONDONTWRITEBYTECODE=1 (this one sets it) never writes .pyc files, so
every process compiles flowctl and its dependencies again: a start-up figure taken there
is not the one a user with a normal Python sees. `envs()` gives two environments that
pin the question down whatever the machine's settings: a private, empty pycache prefix
with writing off (nothing cached, every module compiled), and a private prefix warmed by
one run (everything cached).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def describe() -> str:
    """One line: is this process's bytecode cached, and why (for figures taken in-process)."""
    sources = sorted((ROOT / "flowctl").rglob("*.py"))
    cached = 0
    for src in sources:
        pyc = importlib.util.cache_from_source(str(src))  # honours sys.pycache_prefix
        if os.path.exists(pyc) and os.path.getmtime(pyc) >= os.path.getmtime(src):
            cached += 1
    flag = os.environ.get("PYTHONDONTWRITEBYTECODE")
    where = f" under {sys.pycache_prefix}" if sys.pycache_prefix else ""
    state = "cached" if cached == len(sources) else "NOT cached" if not cached else "partly cached"
    return (
        f"bytecode {state}: {cached} of {len(sources)} flowctl modules have a current .pyc"
        f"{where} (PYTHONDONTWRITEBYTECODE={flag!r}"
        f"{', so none is ever written' if flag else ''})"
    )


def envs(tmp: Path) -> list[tuple[str, dict[str, str]]]:
    """(label, environment) for a start-up measured without and with cached bytecode.

    Each uses its own PYTHONPYCACHEPREFIX, so neither reads the .pyc files pip or another
    run left next to the sources. The caller does one warm-up run with each before timing;
    with the second, that run writes the cache.
    """
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cold = tmp / "pycache-none"
    warm = tmp / "pycache-warm"
    cold.mkdir(exist_ok=True)
    warm.mkdir(exist_ok=True)
    return [
        (
            "no bytecode cache (every module compiled)",
            {**base, "PYTHONPYCACHEPREFIX": str(cold), "PYTHONDONTWRITEBYTECODE": "1"},
        ),
        ("bytecode cached", {**base, "PYTHONPYCACHEPREFIX": str(warm)}),
    ]


def own_code_compiled(tmp: Path, warm: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(label, environment) where flowctl's own modules are compiled on every start but its
    dependencies and the standard library are cached: what an editable install sees with
    PYTHONDONTWRITEBYTECODE=1 (this machine), the case flowctl's own start-up decides.

    `warm` is an environment from `envs()` whose cache a run has already filled; its
    prefix is copied without flowctl's subtree, and nothing is written to the copy.
    """
    source = Path(warm["PYTHONPYCACHEPREFIX"])
    prefix = tmp / "pycache-deps"
    shutil.rmtree(prefix, ignore_errors=True)
    shutil.copytree(source, prefix)
    shutil.rmtree(prefix / str(ROOT / "flowctl").lstrip(os.sep), ignore_errors=True)
    env = {**warm, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1"}
    return "flowctl compiled, dependencies cached (editable install, no .pyc written)", env
