"""What the daemon watches besides its runs: the wall clock against the monotonic and boot
clocks (jumps, suspend/resume, noted on the runs whose due time they passed over) and the
free space beside the database (no new run starts under the reserve).

A mixin of Daemon's: the attributes below are Daemon's own, set in its __init__.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flowctl.clock import Clock
from flowctl.store import Store

if TYPE_CHECKING:
    from flowctl.daemon import DaemonConfig

log = logging.getLogger("flowctl.daemon")

JUMP_THRESHOLD = 2.0  # seconds of disagreement between wall and monotonic time
ROOM_CHECK_EVERY = 0.5  # seconds between looks at the free space


class Watches:
    """The clock and free-space watches of the daemon's loop."""

    store: Store
    clock: Clock
    config: DaemonConfig
    _dirty: bool
    _short: bool
    _last_room_check: float
    _last_wall: datetime | None
    _last_mono: float
    _last_boot: float

    def _short_of_room(self) -> bool:
        """True while the database's filesystem has less than `reserve` bytes free: no new
        run starts, so those in flight can finish and the WAL can still be checkpointed.
        (With no room at all SQLite cannot move the WAL into the database, which must grow,
        so the daemon would wait for the user to free space even once its runs stopped.)
        Said once on the way down; the way up is "room again", as after a full disk."""
        mono = self.clock.monotonic()
        if mono - self._last_room_check < ROOM_CHECK_EVERY:
            return self._short
        self._last_room_check = mono
        free = self.store.free_bytes()
        short = free is not None and free < self.config.reserve
        if short and not self._short:
            log.warning(
                "%.1f MB free beside %s, under the %.0f MB reserve: starting no new run until"
                " there is room (runs in flight go on; nothing committed is lost)",
                (free or 0) / 1e6,
                self.store.path,
                self.config.reserve / 1e6,
            )
        elif self._short and not short:
            log.warning("the database has room again: serving")
        self._short = short
        return short

    def _watch_clock(self, now: datetime) -> None:
        """Detect wall-clock jumps and host suspend/resume; note them on affected runs.

        `now` is only a hint: the three clocks are sampled here together, again if the
        host was suspended between the samples, so a suspend is never mistaken for a jump.
        """
        for _ in range(3):
            boot0 = _boottime(self.clock)
            mono = self.clock.monotonic()
            now = self.clock.now()
            boot = _boottime(self.clock)
            if boot - boot0 < JUMP_THRESHOLD / 2:
                break
        if self._last_wall is None:
            self._last_wall, self._last_mono, self._last_boot = now, mono, boot
            return
        wall_delta = (now - self._last_wall).total_seconds()
        mono_delta = mono - self._last_mono
        boot_delta = boot - self._last_boot
        prev_wall = self._last_wall
        self._last_wall, self._last_mono, self._last_boot = now, mono, boot
        suspended = boot_delta - mono_delta
        jump = wall_delta - boot_delta
        if suspended > JUMP_THRESHOLD:
            self._note_gap("host resumed", prev_wall, now, {"suspended_s": round(suspended, 3)})
        elif abs(jump) > JUMP_THRESHOLD:
            self._note_gap("clock jumped", prev_wall, now, {"jump_s": round(jump, 3)})

    def _note_gap(
        self, type_: str, before: datetime, after: datetime, data: dict[str, Any]
    ) -> None:
        """Write the gap to the timeline of every run whose due time it passed over."""
        lo, hi = (before, after) if before <= after else (after, before)
        affected = self.store.runs_due_between(lo, hi, limit=10_000)
        data = {
            **data,
            "from": before.isoformat(timespec="microseconds"),
            "to": after.isoformat(timespec="microseconds"),
        }
        log.warning("%s: %s (%d run(s) affected)", type_, data, len(affected))
        if affected:
            self.store.add_events(affected, type_, data, after)
        self._dirty = True


def _boottime(clock: Clock) -> float:
    fn = getattr(clock, "boottime", None)
    return float(fn()) if callable(fn) else clock.monotonic()
