"""Test your own workflows in-process: a temporary database and a fake clock you advance.

from flowctl.testing import WorkflowEnvironment

def test_followup_after_three_days(tmp_path):
    env = WorkflowEnvironment(tmp_path)
    run_id = env.start("workflows/onboarding.py:onboarding", {"user": "42"})
    assert env.get(run_id).status == "sleeping"
    env.advance("24h")                      # a 24-hour sleep, tested in milliseconds
    assert env.get(run_id).status == "completed"

The same on PostgreSQL: WorkflowEnvironment(db="postgresql://flow@localhost/flowctl_test"),
an empty database of the tests' own (runs are written there, nothing is removed).
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.durations import Duration, parse_duration
from flowctl.model import Run
from flowctl.store import open_store


class WorkflowEnvironment:
    """A store, a FakeClock and a synchronous daemon. Nothing waits for real time.

    The database is `db` when given (a SQLite path or a `postgresql://` URL, as `--db`
    takes it), else the file flowctl-test.db in `directory` (a temporary folder when that
    is None too); giving both is refused, since one of them would be ignored."""

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        db: str | Path | None = None,
        start: datetime | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        if db is not None and directory is not None:
            raise TypeError(
                "WorkflowEnvironment takes a directory or a db, not both:"
                " give db= for a database of your own, a directory for flowctl-test.db in it"
            )
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if db is None:
            if directory is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="flowctl-test-")
                directory = self._tmp.name
            db = Path(directory) / "flowctl-test.db"
        self.db = str(db)
        """The database, as `--db` takes it: give it to another store, the CLI or a Client."""
        self.clock = FakeClock(start or datetime(2026, 1, 1, tzinfo=UTC))
        self.store = open_store(self.db)
        self.daemon = Daemon(self.store, self.clock, DaemonConfig(concurrency=1))
        self.cwd = str(cwd) if cwd is not None else None

    def start(
        self, target: str, input: dict[str, Any] | None = None, *, run: bool = True, **options: Any
    ) -> str:
        """Queue a run and (by default) run everything due right away."""
        started = ops.start(
            self.store, target, input or {}, clock=self.clock, cwd=self.cwd, **options
        )
        if run:
            self.run_due()
        return started.run.run_id

    def run_due(self) -> int:
        """Run every due run until nothing more is due at the current fake time."""
        return self.daemon.tick()

    def advance(self, duration: Duration) -> int:
        """Move the fake clock forward and run what became due."""
        self.clock.advance(parse_duration(duration))
        return self.run_due()

    def signal(self, run_id: str, name: str, data: Any = None) -> int:
        ops.send_signal(self.store, run_id, name, data, clock=self.clock)
        return self.run_due()

    def get(self, run_id: str) -> Run:
        return self.store.find_run(run_id)

    @property
    def db_path(self) -> Path:
        """The SQLite file, as a Path: the name this attribute had before `db` (kept so
        existing tests go on working); a PostgreSQL URL has no path, so use `db` there."""
        if "://" in self.db:
            raise AttributeError(
                f"this environment's database is a URL, not a file: use .db ({self.db})"
            )
        return Path(self.db)

    def close(self) -> None:
        """Close the store (and remove the temporary folder, when this made one)."""
        self.store.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> WorkflowEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
