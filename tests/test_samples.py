"""The examples ship in the package: flowctl/samples/ mirrors examples/ and workflows/.

The top-level folders are the one source of truth; flowctl/samples/<folder>/<file> are
symlinks to them, which a wheel stores as the files' contents. These tests catch a sample
that was copied instead and then drifted, a file added on one side only, and a package-data
glob that would leave a sample out of the wheel.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLES = ROOT / "flowctl" / "samples"
FOLDERS = ("examples", "workflows")


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_file() and p.name != "__pycache__"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_samples_are_the_top_level_files(folder: str) -> None:
    top, shipped = ROOT / folder, SAMPLES / folder
    assert _files(shipped) == _files(top), f"flowctl/samples/{folder} and {folder}/ differ"
    for name in _files(top):
        link = shipped / name
        assert link.is_symlink(), f"{link} should be a symlink to {folder}/{name}, not a copy"
        assert link.resolve() == (top / name).resolve()


def test_package_data_ships_every_sample() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["flowctl"]
    package = ROOT / "flowctl"
    shipped = {p for g in globs for p in package.glob(g)}
    for folder in FOLDERS:
        for name in _files(ROOT / folder):
            assert SAMPLES / folder / name in shipped, f"{folder}/{name} is not in the wheel"


def test_the_readme_installs_the_distribution_pyproject_names() -> None:
    """`flowctl` on PyPI is another project: the distribution has its own name, the
    command keeps `flowctl`, and the README installs what pyproject builds."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    name = config["project"]["name"]
    assert name != "flowctl"
    assert list(config["project"]["scripts"]) == ["flowctl"]
    assert f"pipx install {name} " in (ROOT / "README.md").read_text()
