"""A daemon's identity is host + process: FLOWCTL_HOST names the host; a pid is checked
only on its own host; a daemon elsewhere is live while its heartbeat is recent."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.ids import HOST, REMOTE_STALE, owner_is_dead, proc_start
from flowctl.store import Store
from tests.conftest import ROOT


def identity_in_child(host: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_HOST"}
    if host is not None:
        env["FLOWCTL_HOST"] = host
    code = "from flowctl.ids import HOST, make_owner; print(HOST); print(make_owner())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    return out.stdout.split()


def test_flowctl_host_names_the_host_in_every_lease_owner() -> None:
    host, owner = identity_in_child("box-7")
    assert host == "box-7"
    assert owner.startswith("box-7/") and owner.split("/")[1].isdigit()
    assert identity_in_child(" rack 2/box 9 ")[0] == "rack-2-box-9"  # '/' parts an owner
    assert identity_in_child(None)[0] == identity_in_child("")[0] != "box-7"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_pid_is_checked_only_on_its_own_host() -> None:
    pid = dead_pid()
    assert proc_start(pid) is None
    assert owner_is_dead(f"{HOST}/{pid}/123/abcd")  # here: provably gone
    assert not owner_is_dead(f"{HOST}-elsewhere/{pid}/123/abcd")  # there: only its lease says


def test_status_lists_each_live_daemon_with_its_host_and_a_silent_remote_one_as_not_live(
    store: Store, fake_clock: FakeClock
) -> None:
    now = fake_clock.now()
    here = f"{HOST}/{os.getpid()}/{proc_start(os.getpid())}/0001"
    gone_here = f"{HOST}/{dead_pid()}/1/0002"
    there = "host-b/4242/99/0003"
    silent = "host-c/4343/99/0004"
    for owner, seen in ((here, now), (gone_here, now), (there, now), (silent, now)):
        host, pid = owner.split("/")[:2]
        store.register_daemon(owner, host, int(pid), None, seen, {})
    fake_clock.advance(REMOTE_STALE - timedelta(seconds=1))
    store.heartbeat(there, [], fake_clock.now(), fake_clock.now())  # host-b keeps beating
    fake_clock.advance(timedelta(seconds=2))  # host-c has been silent past REMOTE_STALE
    report = ops.status(store, clock=fake_clock)
    live = {d.owner: (d.host, d.pid, alive, held) for d, alive, held in report.daemons}
    assert live == {
        here: (HOST, os.getpid(), True, 0),
        gone_here: (HOST, int(gone_here.split("/")[1]), False, 0),
        there: ("host-b", 4242, True, 0),
        silent: ("host-c", 4343, False, 0),
    }
