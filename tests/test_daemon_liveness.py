"""An idle daemon keeps saying it is alive: on another host its heartbeat (seen_at) is all
that shows it live (ids.daemon_live), so it must not depend on holding runs."""

from __future__ import annotations

import os
from datetime import timedelta

from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.heartbeat import IDLE_BEAT
from flowctl.ids import REMOTE_STALE, daemon_live
from flowctl.store import Store


def test_an_idle_daemon_refreshes_its_seen_at_so_it_stays_live_on_other_hosts(
    store: Store, fake_clock: FakeClock
) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    registered = fake_clock.now()
    store.register_daemon(daemon.owner, "host-a", os.getpid(), None, registered, {})
    daemon.heartbeat_once()
    assert store.daemons()[0].seen_at == registered  # nothing held, and just registered
    for _ in range(round(REMOTE_STALE / timedelta(seconds=IDLE_BEAT)) * 2):
        fake_clock.advance(timedelta(seconds=IDLE_BEAT))
        daemon.heartbeat_once()  # what the heartbeat thread calls every --heartbeat
    (info,) = store.daemons()
    assert info.seen_at == fake_clock.now()
    assert fake_clock.now() - registered > REMOTE_STALE
    elsewhere = "host-a-elsewhere/" + daemon.owner.split("/", 1)[1]  # as another host sees it
    assert daemon_live(elsewhere, info.seen_at, fake_clock.now())


def test_an_idle_daemon_writes_its_liveness_at_most_every_idle_beat(
    store: Store, fake_clock: FakeClock
) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    store.register_daemon(daemon.owner, "host-a", os.getpid(), None, fake_clock.now(), {})
    fake_clock.advance(timedelta(seconds=IDLE_BEAT))
    daemon.heartbeat_once()
    beat = store.daemons()[0].seen_at
    fake_clock.advance(timedelta(seconds=IDLE_BEAT / 2))
    daemon.heartbeat_once()
    assert store.daemons()[0].seen_at == beat
