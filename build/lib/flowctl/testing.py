"""Test your own workflows in-process: a temporary database and a fake clock you advance.

from flowctl.testing import WorkflowEnvironment

def test_followup_after_three_days(tmp_path):
    env = WorkflowEnvironment(tmp_path)
    run_id = env.start("workflows/onboarding.py:onboarding", {"user": "42"})
    assert env.get(run_id).status == "sleeping"
    env.advance("24h")                      # a 24-hour sleep, tested in milliseconds
    assert env.get(run_id).status == "completed"
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
from flowctl.store import Store


class WorkflowEnvironment:
    """A store, a FakeClock and a synchronous daemon. Nothing waits for real time."""

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        start: datetime | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="flowctl-test-")
            directory = self._tmp.name
        self.db_path = Path(directory) / "flowctl-test.db"
        self.clock = FakeClock(start or datetime(2026, 1, 1, tzinfo=UTC))
        self.store = Store(self.db_path)
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

    def close(self) -> None:
        self.store.close()
