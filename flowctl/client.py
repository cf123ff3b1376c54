"""A Python client for scripts and applications: start and inspect runs without a shell.

The CLI is a thin layer over the same `ops` functions, so both behave the same.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from flowctl import ops
from flowctl.clock import Clock, SystemClock
from flowctl.config import load_config, resolve_db, resolve_key_file
from flowctl.daemon import DaemonConfig
from flowctl.daemon.foreground import drive_run
from flowctl.durations import Duration, parse_duration
from flowctl.errors import FlowctlError, UsageError
from flowctl.model import Run, RunStatus
from flowctl.runtime.targets import TargetCache
from flowctl.store import open_store


class WaitTimeoutError(FlowctlError):
    """Client.wait() gave up before the run ended."""


class Client:
    """`Client(db=None)` resolves the database like the CLI: FLOWCTL_DB, flowctl.toml, XDG."""

    def __init__(
        self,
        db: str | Path | None = None,
        *,
        clock: Clock | None = None,
        workflows_dir: str | Path | None = None,
    ) -> None:
        config = load_config()
        self.db_path = resolve_db(str(db) if db is not None else None, config)
        self.clock = clock or SystemClock()
        key_file, keys = resolve_key_file(config), None
        if key_file is not None:  # the cipher loads only with a key (FLOWCTL_KEY_FILE)
            from flowctl.crypto.cipher import load_keyring

            keys = load_keyring(key_file)
        self.store = open_store(self.db_path, durability=str(config.get("durability")), keys=keys)
        self.workflows_dir = Path(workflows_dir) if workflows_dir else config.workflows_dir()
        self._config = config
        self._targets = TargetCache()  # each target loaded once while its file is unchanged

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(
        self,
        target: str,
        input: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        delay: Duration | None = None,
        at: datetime | None = None,
        deadline: datetime | Duration | None = None,
        timeout: Duration | None = None,
        max_attempts: int | None = None,
        traceparent: str | None = None,
        priority: int | None = None,
    ) -> str:
        """Queue a run and return its id; a daemon runs it. A known `key` returns the first run.

        `delay` is a duration from now; `at` a time (a past one means now); `deadline` a
        time or a duration from now. A bad value is a UsageError whose `field` names it
        ("in" for `delay`), checked as the CLI and the HTTP API check it (ops.start_options).
        `traceparent` (W3C Trace Context) puts the run's spans in the caller's trace.
        `priority`: higher first among due runs (default 0), never past a concurrency limit.
        """
        options = ops.start_options(
            self.clock,
            delay=delay,
            at=at,
            deadline=deadline,
            timeout=timeout,
            max_attempts=max_attempts,
            priority=priority,
        )
        started = ops.start(
            self.store,
            target,
            input or {},
            clock=self.clock,
            options=options,
            key=key,
            workflows_dir=self.workflows_dir,
            targets=self._targets,
            traceparent=traceparent,
        )
        return started.run.run_id

    def start_many(
        self,
        target: str,
        inputs: Sequence[dict[str, Any]],
        *,
        keys: Sequence[str | None] | None = None,
        delay: Duration | None = None,
        at: datetime | None = None,
        deadline: datetime | Duration | None = None,
        timeout: Duration | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
    ) -> list[str]:
        """Queue one run per input in one transaction; return their ids, in order.

        Thousands of runs cost one fsync, not one each. One bad input queues none.
        `keys[i]` is run i's idempotency key: a known key gives the first run's id.
        The options are `start`'s.
        """
        options = ops.start_options(
            self.clock,
            delay=delay,
            at=at,
            deadline=deadline,
            timeout=timeout,
            max_attempts=max_attempts,
            priority=priority,
        )
        started = ops.start_many(
            self.store,
            target,
            inputs,
            clock=self.clock,
            options=options,
            keys=keys,
            workflows_dir=self.workflows_dir,
            targets=self._targets,
        )
        return [s.run.run_id for s in started]

    def run(self, target: str, input: dict[str, Any] | None = None, **options: Any) -> Run:
        """Start a run and drive it here, through its sleeps, until it ends (`flowctl run --wait`)."""
        run_id = self.start(target, input, **options)
        return drive_run(self.store, self.clock, run_id, DaemonConfig(concurrency=1), wait=True)  # type: ignore[no-any-return]

    def get(self, run_id: str) -> Run:
        return self.store.find_run(run_id)

    def list(
        self, status: str | RunStatus | None = None, workflow: str | None = None, limit: int = 50
    ) -> list[Run]:
        return ops.list_runs(
            self.store, statuses=[str(status)] if status else None, workflow=workflow, limit=limit
        )

    def wait(self, run_id: str, timeout: Duration | None = None) -> Run:
        """Wait until the run ends (completed, dead or cancelled), watching the database."""
        limit = None if timeout is None else parse_duration(timeout).total_seconds()
        start = self.clock.monotonic()
        tick = threading.Event()
        while True:
            run = self.store.find_run(run_id)
            if run.status.is_terminal:
                return run
            if limit is not None and self.clock.monotonic() - start >= limit:
                raise WaitTimeoutError(
                    f"run {run.run_id} is still {run.status} after {timedelta(seconds=limit)}"
                )
            self.clock.wait(tick, 0.05)

    def signal(
        self,
        run_id: str | None = None,
        name: str | None = None,
        data: Any = None,
        *,
        key: str | None = None,
    ) -> Run:
        """Signal a run by id, or with `key=` the one active run started with that key."""
        if name is not None and key is not None and run_id is None:
            return ops.send_signal_by_key(self.store, key, name, data, clock=self.clock)
        if name is not None and run_id is not None and key is None:
            return ops.send_signal(self.store, run_id, name, data, clock=self.clock)
        raise UsageError("Client.signal needs a name and either a run id or key=, not both")

    def cancel(self, run_id: str, reason: str | None = None) -> Run:
        return ops.cancel(self.store, run_id, clock=self.clock, reason=reason)

    def redrive(
        self, run_id: str, *, deadline: datetime | Duration | None = None, no_deadline: bool = False
    ) -> Run:
        """Queue a dead or cancelled run again under its own deadline; past it, give a new
        `deadline` (a datetime, timedelta, seconds or text, as `start` takes) or
        `no_deadline=True`, else a UsageError says so."""
        return ops.redrive(
            self.store, run_id, clock=self.clock, deadline=deadline, no_deadline=no_deadline
        )

    def pause(self, run_id: str) -> Run:
        """Pause a run (a running one parks at its next durable call); see `flowctl pause`."""
        return ops.pause(self.store, run_id, clock=self.clock)

    def resume(self, run_id: str) -> Run:
        """Resume a paused run: due at once if its wake passed, else at its wake."""
        return ops.resume(self.store, run_id, clock=self.clock)
