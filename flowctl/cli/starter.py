"""The sample workflows `flowctl init --example` writes into a project.

They ship in the package as flowctl/samples/workflows/, symlinks in a checkout to the
repository's workflows/ files (one source of truth) and plain files in a wheel, so a pipx
user gets the same files the README shows. Stdlib only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from flowctl.errors import UsageError

SAMPLES = Path(__file__).parent.parent / "samples"  # flowctl/samples
# What to run first in a project the samples were written into, and what it shows.
FIRST_RUN = "flowctl run onboarding -i user=42"


def sample_workflows() -> list[Path]:
    """The shipped sample workflow files, by name."""
    folder = SAMPLES / "workflows"
    found = sorted(p for p in folder.glob("*") if p.is_file()) if folder.is_dir() else []
    if not found:
        raise UsageError(
            f"no sample workflows in {folder}: this flowctl was installed without them"
        )
    return found


def planned(folder: Path) -> list[Path]:
    """The files `write_samples(folder)` would write."""
    return [folder / p.name for p in sample_workflows()]


def check_free(folder: Path, *, force: bool = False) -> None:
    """Refuse, before anything is written, a `folder` that is a file, and (without `force`)
    any sample file that already exists there."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; the sample workflows go in a folder")
    taken = [t for t in planned(folder) if t.exists() or t.is_symlink()]
    if taken and not force:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise UsageError(f"{taken[0]} already exists{more}; use --force to overwrite")


def write_samples(folder: Path, *, force: bool = False) -> list[Path]:
    """Copy the sample workflows into `folder`, made if missing; returns the files written.

    All or nothing: without `force`, an existing file is refused before any is written.
    The copy has the files' contents, never a link into the installed package.
    """
    check_free(folder, force=force)
    pairs = list(zip(sample_workflows(), planned(folder), strict=True))
    folder.mkdir(parents=True, exist_ok=True)
    for source, target in pairs:
        if target.is_symlink():
            target.unlink()  # --force: replace a link itself, never write through it
        shutil.copyfile(source, target)
    return [t for _, t in pairs]
