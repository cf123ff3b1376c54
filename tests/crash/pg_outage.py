"""A PostgreSQL cluster of a test module's own, which its tests may restart or break (the
shared test server must never be: other tests use it). Started with `.ci/pg-cluster`;
restarted with pg_ctl as the server's owner, as an operator would.

Without PostgreSQL's binaries these tests skip, saying why; under CI (CI=true) they fail
instead, so CI never passes by skipping them.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.pg import create_database, drop_database, with_database

ROOT = Path(__file__).resolve().parents[2]
_NOT_DURABLE = {"fsync=off", "synchronous_commit=off", "full_page_writes=off"}


def _bindir() -> Path | None:
    """Where pg_ctl is: the newest /usr/lib/postgresql/*/bin, else pg_ctl on PATH (as
    .ci/pg-cluster finds it)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[4]))
    if found:
        return Path(found[-1])
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _as_owner(argv: list[str]) -> list[str]:
    """Run as root, the server belongs to `postgres` (.ci/pg-cluster); else to us."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _cannot(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {why}", pytrace=False)
    pytest.skip(why)


class Cluster:
    """A throwaway cluster: its URL, a fresh database on it, and pg_ctl on its data dir."""

    def __init__(self) -> None:
        # Under /tmp itself: the server's owner must reach the folder (pytest's own tmp
        # folders are private to the user running the tests).
        self.dir = Path(tempfile.mkdtemp(prefix="flowctl-outage-"))
        self.dir.rmdir()  # .ci/pg-cluster makes it, and gives it to the server's owner
        started = subprocess.run(
            [str(ROOT / ".ci" / "pg-cluster"), "start", str(self.dir)],
            capture_output=True,
            text=True,
            check=False,
        )
        bindir = _bindir()
        if started.returncode != 0 or bindir is None:
            _cannot(f"no PostgreSQL cluster of our own: {started.stderr.strip()[-300:]}")
        self.url = started.stdout.strip().splitlines()[-1]
        self.pg_ctl = str(bindir / "pg_ctl")
        self.options = ""  # the server's options, while it is stopped (stop_fast)
        # Durable, as shipped and as operators run it: .ci/pg-cluster turns fsync and
        # synchronous_commit off for speed, and then a backend killed (a crash reset)
        # loses transactions whose COMMIT had returned. Restarted without those.
        self.stop_fast(durable=True)
        self.start()

    def database(self) -> str:
        """The URL of a new empty database on this cluster."""
        return with_database(self.url, create_database(self.url))

    def drop(self, url: str) -> None:
        drop_database(self.url, url.rsplit("/", 1)[1])

    def ctl(self, *args: str) -> None:
        """pg_ctl on this cluster, waiting for it (restart keeps the options it started
        with: port, socket folder, settings)."""
        argv = [self.pg_ctl, "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log")]
        subprocess.run(
            _as_owner([*argv, "-w", "-t", "60", *args]),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop_fast(self, *, durable: bool = False) -> None:
        """`pg_ctl stop -m fast`, remembering how the server was started (start() uses it);
        `durable`: less the settings that trade durability for speed."""
        opts = shlex.split((self.dir / "data" / "postmaster.opts").read_text())
        # The server's own command line, less the binary and its -D (pg_ctl gives that).
        args = [a for i, a in enumerate(opts[1:]) if a != "-D" and opts[i] != "-D"]
        if durable:
            fast = [i for i, a in enumerate(args) if a in _NOT_DURABLE and args[i - 1] == "-c"]
            args = [a for i, a in enumerate(args) if i not in fast and i + 1 not in fast]
        self.options = shlex.join(args)
        self.ctl("stop", "-m", "fast")

    def start(self) -> None:
        """Start it again as it was started (after stop_fast)."""
        self.ctl("start", "-o", self.options)

    def restart_fast(self) -> None:
        """`pg_ctl restart -m fast`: every session is ended (AdminShutdown), the server is
        down for a moment, then accepts connections again."""
        self.ctl("restart", "-m", "fast")

    def stop(self) -> None:
        subprocess.run(
            [str(ROOT / ".ci" / "pg-cluster"), "stop", str(self.dir)],
            check=False,
            capture_output=True,
        )


def backends(url: str, host: str) -> list[int]:
    """The server pids of the sessions of the daemon on FLOWCTL_HOST `host` (their
    application_name is 'flowctl <host> <pid>')."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found: list[Any] = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
            [f"flowctl {host} %"],
        ).fetchall()
    return [int(r[0]) for r in found]
