"""`status` and `daemon stop` tell the truth about who serves a database: a daemon on
another host is live only while it is seen within its lease; a dead one is shown with when
it was last seen; `daemon stop` forgets dead registrations and, with no live daemon, says
so and succeeds; a live daemon drops the registrations of daemons that are gone.

On both stores, on a FakeClock (the CLI's clock swapped in, as tests/test_cli_json.py does).
Real daemons killed with SIGKILL: tests/crash/test_daemon_truth_kill9.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.watches import FORGET_MIN_S
from flowctl.ids import HOST, daemon_live, proc_start
from flowctl.model import iso
from flowctl.store import Store

B = "host-b/4242/99/0001"  # a daemon on another host: only its heartbeat says it is alive


def register(store: Store, owner: str, clock: FakeClock, lease: float) -> None:
    host, pid = owner.split("/")[:2]
    info = {"concurrency": 4, "lease": lease, "workers": 1}
    store.register_daemon(owner, host, int(pid), None, clock.now(), info)


def alive(store: Store, clock: FakeClock) -> dict[str, bool]:
    return {d.owner: ok for d, ok, _ in ops.status(store, clock=clock).daemons}


def test_a_daemon_elsewhere_is_live_until_its_lease_lapses_then_dead(
    store: Store, fake_clock: FakeClock
) -> None:
    register(store, B, fake_clock, lease=15)
    fake_clock.advance(timedelta(seconds=15))
    assert alive(store, fake_clock) == {B: True}
    assert ops.daemon_running(store, clock=fake_clock)
    fake_clock.advance(timedelta(milliseconds=1))  # its heartbeat has lapsed
    assert alive(store, fake_clock) == {B: False}
    assert not ops.daemon_running(store, clock=fake_clock)
    store.heartbeat(B, [], fake_clock.now(), fake_clock.now())  # it beats again: alive
    assert alive(store, fake_clock) == {B: True}


@pytest.fixture
def invoke(store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`flowctl --db <the store's database> ...` in process, on the fake clock."""
    monkeypatch.setattr(cli, "SystemClock", lambda: fake_clock)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli.app, ["--db", store.location, *args])

    return run


def test_status_shows_a_lapsed_daemon_dead_with_when_it_was_last_seen(
    store: Store, fake_clock: FakeClock, invoke: Any
) -> None:
    register(store, B, fake_clock, lease=5)
    seen = fake_clock.now()
    fake_clock.advance(timedelta(seconds=42))
    out = invoke("status", "--json")
    assert out.exit_code == 0, out.output
    (shown,) = json.loads(out.stdout)["daemons"]
    assert (shown["owner"], shown["alive"], shown["seen_at"]) == (B, False, iso(seen))
    text = invoke("status")
    assert text.exit_code == 0, text.output
    lines = [line for line in text.stdout.splitlines() if line.startswith("daemon")]
    assert lines[0] == "daemon    not running (start one with `flowctl daemon`)"
    assert lines[1].startswith("daemon    pid 4242 on host-b: not running, last seen ")
    assert lines[1].endswith("(42s ago)")
    assert len(lines) == 2


def test_daemon_stop_with_only_dead_daemons_says_so_forgets_them_and_exits_0(
    store: Store, fake_clock: FakeClock, invoke: Any
) -> None:
    register(store, B, fake_clock, lease=5)
    seen = fake_clock.now()
    fake_clock.advance(timedelta(minutes=16))
    out = invoke("daemon", "stop")
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == f"no daemon is running on {store.path}"
    assert lines[1].startswith("daemon pid 4242 on host-b: not running, last seen ")
    assert lines[1].endswith("; its registration is removed")
    assert store.daemons() == []
    assert store.daemon_last_seen() == seen  # remembered as last seen at its last beat
    again = invoke("daemon", "stop", "--json")
    assert (again.exit_code, json.loads(again.stdout)) == (0, [])


def test_daemon_stop_still_fails_for_a_live_daemon_it_cannot_signal(
    store: Store, fake_clock: FakeClock, invoke: Any
) -> None:
    register(store, B, fake_clock, lease=5)
    fake_clock.advance(timedelta(seconds=60))  # B lapsed
    register(store, "host-c/4343/99/0002", fake_clock, lease=5)  # C beats now
    out = invoke("daemon", "stop", "--json")
    assert out.exit_code == 1, out.output
    shown = {(d["host"], d["live"], d["stopped"]) for d in json.loads(out.stdout)}
    assert shown == {("host-b", False, True), ("host-c", True, False)}
    assert [d.owner for d in store.daemons()] == ["host-c/4343/99/0002"]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_live_daemon_forgets_daemons_that_are_gone(store: Store, fake_clock: FakeClock) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    register(store, daemon.owner, fake_clock, lease=15)
    gone_here = f"{HOST}/{dead_pid()}/1/0002"  # provably gone: forgotten at once
    register(store, gone_here, fake_clock, lease=15)
    register(store, B, fake_clock, lease=2)  # elsewhere: forgotten once silent long enough
    daemon.reap_dead_owners(force=True)
    assert {d.owner for d in store.daemons()} == {daemon.owner, B}
    fake_clock.advance(timedelta(seconds=FORGET_MIN_S))
    daemon.reap_dead_owners(force=True)
    assert {d.owner for d in store.daemons()} == {daemon.owner, B}  # dead, not yet forgotten
    assert alive(store, fake_clock)[B] is False
    fake_clock.advance(timedelta(milliseconds=1))
    daemon.reap_dead_owners(force=True)
    assert {d.owner for d in store.daemons()} == {daemon.owner}


def test_an_idle_daemon_with_a_short_lease_beats_within_it(
    store: Store, fake_clock: FakeClock
) -> None:
    config = DaemonConfig(concurrency=1, lease=2.0, heartbeat=0.5)
    daemon = Daemon(store, fake_clock, config)
    register(store, daemon.owner, fake_clock, lease=config.lease)
    elsewhere = "host-a-elsewhere/" + daemon.owner.split("/", 1)[1]  # as another host sees it
    beats = set()
    for _ in range(40):  # 20 s of the heartbeat thread's wakes, every --heartbeat
        fake_clock.advance(timedelta(seconds=config.heartbeat))
        daemon.heartbeat_once()
        (info,) = store.daemons()
        beats.add(info.seen_at)
        assert daemon_live(elsewhere, info.seen_at, fake_clock.now(), config.lease)
    assert 10 <= len(beats) < 40  # it beat often enough, and not at every wake


def test_a_pid_here_still_decides_for_a_daemon_on_this_host(
    store: Store, fake_clock: FakeClock
) -> None:
    here = f"{HOST}/{os.getpid()}/{proc_start(os.getpid())}/0003"
    register(store, here, fake_clock, lease=2)
    fake_clock.advance(timedelta(minutes=5))  # silent, but its process is there
    assert alive(store, fake_clock) == {here: True}
