"""A daemon's settings, and the combinations its loop cannot keep."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from flowctl.clock import Clock, SystemClock
from flowctl.errors import UsageError
from flowctl.limits import ROOM_RESERVE
from flowctl.model import RunStatus


@dataclass
class DaemonConfig:
    concurrency: int = 4
    lease: float = 15.0
    heartbeat: float = 1.0
    grace: float = 30.0
    claim_batch: int = 64
    reserve: int = ROOM_RESERVE  # free bytes kept for what is in flight (watches.RoomWatch)
    workers: int = 1  # processes executing runs, each a whole daemon (daemon/processes.py)
    batch: bool = True  # on SQLite: greenlets on one thread (flowctl.daemon.batch)
    retention: dict[RunStatus, timedelta] = field(default_factory=dict)  # see RetentionPass
    key_file: str | None = None  # values sealed with it (issue 42); children open it too
    # Endings no channel of the daemon's [notify] wants (notify.unwanted_endings): its
    # completions put no outbox row for them, save runs with an override (Store.leave_untold).
    untold: tuple[str, ...] = ()

    def check(self, clock: Clock, *, one_run: bool) -> None:
        """Refuse, with the setting to change, what would break the loop's promises: a
        lease must outlive the beats that extend it, and worker processes keep their own
        (system) time, so they cannot serve a daemon driven by an injected clock."""
        for name in ("lease", "heartbeat"):
            if getattr(self, name) <= 0:
                raise UsageError(
                    f"{name} must be a positive duration, got {getattr(self, name):g}s"
                    f" (--{name} or {name} in flowctl.toml)"
                )
        if self.heartbeat >= self.lease:
            raise UsageError(
                f"heartbeat ({self.heartbeat:g}s) must be shorter than the lease"
                f" ({self.lease:g}s), or leases lapse while handlers run"
            )
        if self.concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.workers < 1:
            raise UsageError(f"workers must be at least 1, got {self.workers}")
        if self.workers > 1 and not one_run and not isinstance(clock, SystemClock):
            raise UsageError(
                f"workers {self.workers} needs the system clock (worker processes keep"
                " their own time); give workers 1 to run with an injected clock"
            )
