"""Find and count real processes by a marker in their command line (Linux /proc): how
tests show that no process of a command step's tree outlived what ran it."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def marked(marker: str) -> dict[int, list[str]]:
    """The live processes whose command line holds `marker`: pid -> argv."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().rstrip(b"\0").decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(marker in arg for arg in argv) and alive(int(entry)):
            found[int(entry)] = argv
    return found


def tree_command(marker: str) -> str:
    """A shell step with two children, each a `sleep` whose length is the marker."""
    return f"sleep {marker} & sleep {marker}; wait"


def whole_tree(marker: str) -> dict[int, list[str]] | None:
    """The tree_command's processes once all of it runs: the shell and its two `sleep`s
    (exec'd: a child forked but not yet exec'd still shows the shell's command line)."""
    tree = marked(marker)
    names = sorted(argv[0] for argv in tree.values())
    return tree if names == ["/bin/sh", "sleep", "sleep"] else None
