"""What a daemon watches besides its runs, each on its own period: the wall clock against
the monotonic and boot clocks (jumps, suspend/resume), the free space beside the database,
the database file itself, and owners of leases whose process is gone.

Each watch keeps its own state; the loop asks, and acts on the answer (flowctl.daemon.loop).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowctl.clock import Clock
from flowctl.daemon.lifecycle import Lifecycle
from flowctl.errors import DatabaseGoneError, DiskFullError
from flowctl.ids import daemon_live, on_this_host, owner_is_dead
from flowctl.store import Store

log = logging.getLogger(__name__)

JUMP_THRESHOLD = 2.0  # seconds of disagreement between wall and monotonic time
ROOM_CHECK_EVERY = 0.5  # seconds between looks at the free space
FULL_RETRY = 1.0  # seconds between retries while the disk (or the database) is full
WATCH_FILE_EVERY = 1.0  # seconds between checks that the database file is still at its path
REAP_EVERY = 1.0  # seconds between checks for dead owners holding leases
FORGET_EVERY = 10.0  # seconds between looks for registered daemons that are not running
# A daemon on another host whose heartbeat lapsed is shown dead at once (ids.daemon_live),
# and its row forgotten once it has been silent this many leases, at least FORGET_MIN_S:
# one that was only cut off re-registers when it reaches the database again.
FORGET_LEASES = 4
FORGET_MIN_S = 60.0


class ClockWatch:
    """Wall-clock jumps and host suspend/resume, noted on the runs whose due time they
    passed over."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._last: tuple[datetime, float, float] | None = None  # wall, monotonic, boot

    def look(self) -> bool:
        """Sample the three clocks (again if the host was suspended between the samples, so
        a suspend is never mistaken for a jump); True if a gap was noted."""
        for _ in range(3):
            boot0 = _boottime(self.clock)
            mono = self.clock.monotonic()
            now = self.clock.now()
            boot = _boottime(self.clock)
            if boot - boot0 < JUMP_THRESHOLD / 2:
                break
        last, self._last = self._last, (now, mono, boot)
        if last is None:
            return False
        prev_wall, prev_mono, prev_boot = last
        suspended = (boot - prev_boot) - (mono - prev_mono)
        jump = (now - prev_wall).total_seconds() - (boot - prev_boot)
        if suspended > JUMP_THRESHOLD:
            self._note_gap("host resumed", prev_wall, now, {"suspended_s": round(suspended, 3)})
        elif abs(jump) > JUMP_THRESHOLD:
            self._note_gap("clock jumped", prev_wall, now, {"jump_s": round(jump, 3)})
        else:
            return False
        return True

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


class RoomWatch:
    """The free space beside the database (no new run starts under the reserve) and a
    full disk (wait, retry: nothing committed is lost)."""

    def __init__(self, store: Store, clock: Clock, reserve: int) -> None:
        self.store = store
        self.clock = clock
        self.reserve = reserve
        self.short = False  # free space is under the reserve: no new run starts
        self.full = False  # the last pass failed on a full disk
        self._last_check = float("-inf")

    def short_of_room(self) -> bool:
        """True while the database's filesystem has less than `reserve` bytes free: no new
        run starts, so those in flight can finish and the WAL can still be checkpointed.
        (With no room at all SQLite cannot move the WAL into the database, which must grow,
        so the daemon would wait for the user to free space even once its runs stopped.)
        Said once on the way down; the way up is "room again", as after a full disk."""
        mono = self.clock.monotonic()
        if mono - self._last_check < ROOM_CHECK_EVERY:
            return self.short
        self._last_check = mono
        free = self.store.free_bytes()
        short = free is not None and free < self.reserve
        if short and not self.short:
            log.warning(
                "%.1f MB free beside %s, under the %.0f MB reserve: starting no new run until"
                " there is room (runs in flight go on; nothing committed is lost)",
                (free or 0) / 1e6,
                self.store.path,
                self.reserve / 1e6,
            )
        elif self.short and not short:
            log.warning("the database has room again: serving")
        self.short = short
        return short

    def wait_for_room(self, error: DiskFullError, life: Lifecycle) -> None:
        """A full disk: say so once, wait, and let the caller retry. Nothing committed is
        lost (the failed transaction rolled back whole), so waiting is all there is to do."""
        if not self.full:
            self.full = True
            log.warning("%s; nothing committed is lost; retrying every %gs", error, FULL_RETRY)
        life.wait(self.clock.monotonic() + FULL_RETRY)

    def room_again(self) -> None:
        """A pass went through: say so if the last one had failed on a full disk."""
        if self.full:
            self.full = False
            log.warning("the database has room again: serving")


class FileWatch:
    """The database file is still at its path (not deleted, nor replaced by a restore or a
    copy): else every later write would go to the void while new runs wait in the file now
    at the path. A stat, once a second."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.gone = False  # the file was deleted or replaced: write nothing more
        self._last_check = float("-inf")

    def look(self, *, now: bool = False) -> DatabaseGoneError | None:
        """The error to stop with if the file is gone (checked at most once a second, or
        `now`); from then on `gone` is set."""
        mono = self.clock.monotonic()
        if not now and mono - self._last_check < WATCH_FILE_EVERY:
            return None
        self._last_check = mono
        problem = self.store.file_replaced()
        if problem is None:
            return None
        self.gone = True
        return DatabaseGoneError(
            f"{problem} while the daemon served it; stopping without writing to it again:"
            " start the daemon again to serve the file now at that path"
        )


class Reaper:
    """Leases held by a provably dead process (same host, pid gone) lapse now, so their
    runs are reclaimed at once rather than when the leases run out."""

    def __init__(self, store: Store, clock: Clock, owner: str) -> None:
        self.store = store
        self.clock = clock
        self.owner = owner
        self._last = float("-inf")
        self._forgot = float("-inf")

    def reap(self, *, force: bool = False) -> bool:
        """Once a second (or `force`: at start); True if runs became reclaimable. Every
        FORGET_EVERY (and at start), registrations of daemons not running are dropped."""
        mono = self.clock.monotonic()
        if not force and mono - self._last < REAP_EVERY:
            return False
        self._last = mono
        now = self.clock.now()
        lapsed = False
        for owner in self.store.running_owners():
            if owner != self.owner and owner_is_dead(owner):
                n = self.store.expire_owner(owner, now)
                if n:
                    log.info("owner %s is gone: %d run(s) reclaimable now", owner, n)
                    lapsed = True
        if force or mono - self._forgot >= FORGET_EVERY:
            self._forgot = mono
            self.forget_dead(now)
        return lapsed

    def forget_dead(self, now: datetime) -> int:
        """Drop the registrations of daemons that are not running: on this host, the
        process gone; on another, silent for FORGET_LEASES leases (FORGET_MIN_S at least).
        Each is remembered as last seen at its last beat. Returns how many."""
        n = 0
        for d in self.store.daemons():
            if d.owner == self.owner:
                continue
            lease = d.info.get("lease")
            if on_this_host(d.owner):
                gone = owner_is_dead(d.owner)
            else:
                quiet = max(FORGET_MIN_S, FORGET_LEASES * float(lease or FORGET_MIN_S))
                gone = not daemon_live(d.owner, d.seen_at, now, quiet)
            if gone:
                self.store.unregister_daemon(d.owner)
                log.info("daemon %s is not running: its registration is removed", d.owner)
                n += 1
        return n


@dataclass
class Watches:
    """A daemon's watches, one object each."""

    clock: ClockWatch
    room: RoomWatch
    file: FileWatch
    reaper: Reaper

    @classmethod
    def of(cls, store: Store, clock: Clock, owner: str, reserve: int) -> Watches:
        return cls(
            ClockWatch(store, clock),
            RoomWatch(store, clock, reserve),
            FileWatch(store, clock),
            Reaper(store, clock, owner),
        )


def _boottime(clock: Clock) -> float:
    fn = getattr(clock, "boottime", None)
    return float(fn()) if callable(fn) else clock.monotonic()
