"""Build dist/flowctl.pyz: one file that runs with a plain `python3 flowctl.pyz ...`.

    .venv/bin/python tools/build_pyz.py            # writes dist/flowctl.pyz
    .venv/bin/python tools/build_pyz.py -o X.pyz

Why shiv: Typer needs pydantic-core, a compiled extension, and Python cannot import one
from inside a zip, so the standard library's zipapp alone cannot make a working archive.
shiv unpacks the archive once, on first run, into ~/.shiv (or $SHIV_ROOT) and runs from
there; pex does the same with a larger runtime and a slower build. shiv is in the dev
extra. The build is offline: flowctl is copied from this source tree and its dependencies
from the environment running this script (their installed files, as their RECORD lists
them), so the archive holds exactly the versions this environment was tested with, and
shiv only zips that folder (`--site-packages`, no pip). The archive is for the Python
version and platform it was built on (compiled wheels); the TUI works from it too, since
it runs unpacked.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The distribution as pyproject names it (flowctl-runner; the package and command are flowctl).
DIST = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
SKIP_DISTS: set[str] = set()


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def closure(root: str) -> list[metadata.Distribution]:
    """The installed distributions `root` needs, transitively (extras and markers that do
    not apply here are left out)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen or name in SKIP_DISTS:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            marker = req.partition(";")[2].strip()
            if marker and not _marker_holds(marker):
                continue
            todo.append(_name(req))
    seen.pop(root, None)
    return list(seen.values())


def _marker_holds(marker: str) -> bool:
    try:
        from packaging.markers import Marker
    except ImportError:  # no packaging: keep the requirement (copying one too many is harmless)
        return True
    return bool(Marker(marker).evaluate())


def build(out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "app"
        stage.mkdir()
        shutil.copytree(
            ROOT / "flowctl",
            stage / "flowctl",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        for dist in closure(DIST):
            base = Path(str(dist.locate_file("")))
            for rel in dist.files or []:
                parts = Path(str(rel)).parts
                if ".." in parts or "__pycache__" in parts or str(rel).endswith(".pyc"):
                    continue
                src = base / rel
                if src.is_file():
                    dest = stage / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest)
        out.parent.mkdir(parents=True, exist_ok=True)
        shiv = Path(sys.executable).with_name("shiv")
        subprocess.run(
            [
                str(shiv) if shiv.exists() else "shiv",
                "--site-packages",
                str(stage),
                "--entry-point",
                "flowctl.__main__:main",
                "--python",
                "/usr/bin/env python3",
                "--compressed",
                "--reproducible",
                "--output-file",
                str(out),
            ],
            check=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the single-file flowctl.pyz.")
    parser.add_argument("-o", "--output", default=str(ROOT / "dist" / "flowctl.pyz"))
    args = parser.parse_args()
    out = build(Path(args.output))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) for Python {sys.version.split()[0]}+")


if __name__ == "__main__":
    main()
