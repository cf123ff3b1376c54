"""Prometheus metrics read from the database: the figures match the recorded facts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ids import HOST, make_owner, proc_start
from flowctl.model import RunStatus
from flowctl.ops.metrics import render
from flowctl.store import Store
from tests.helpers import db_of, query
from tests.inproc import run_main

FLOWS = """\
from flowctl import NonRetryableError, workflow

@workflow
def fine(ctx):
    ctx.step("one", lambda: 1)
    ctx.step("two", lambda: 2)
    return "ok"

@workflow
def napper(ctx):
    ctx.sleep("1h")
    return "rested"

@workflow
def doomed(ctx):
    raise NonRetryableError("no")
"""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_match_what_the_database_recorded(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    for fn in ("fine", "fine", "napper", "doomed"):
        ops.start(store, f"{flows}:{fn}", {}, clock=fake_clock)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    daemon.tick()
    fake_clock.advance(3600.3)  # the sleeper wakes 0.3 s late
    daemon.tick()
    owner = make_owner()
    store.register_daemon(owner, HOST, os.getpid(), proc_start(os.getpid()), fake_clock.now(), {})

    got = samples(render(store).decode())
    assert got[("flowctl_runs", (("status", "completed"), ("workflow", "fine")))] == 2
    assert got[("flowctl_runs", (("status", "completed"), ("workflow", "napper")))] == 1
    assert got[("flowctl_runs", (("status", "dead"), ("workflow", "doomed")))] == 1
    assert got[("flowctl_runs_by_status", (("status", "completed"),))] == 3
    assert got[("flowctl_runs_by_status", (("status", "sleeping"),))] == 0
    (claims,) = query(db_of(store), "SELECT COUNT(*) FROM timeline WHERE type = 'claimed'")[0]
    assert got[("flowctl_claims_total", ())] == claims == 5  # 4 starts and 1 wake
    assert got[("flowctl_reclaims_total", ())] == 0
    assert got[("flowctl_wake_lateness_seconds_count", ())] == 1
    assert got[("flowctl_wake_lateness_seconds_bucket", (("le", "0.25"),))] == 0
    assert got[("flowctl_wake_lateness_seconds_bucket", (("le", "0.5"),))] == 1
    assert got[("flowctl_wake_lateness_seconds_sum", ())] == pytest.approx(0.3, abs=1e-6)
    assert got[("flowctl_step_duration_seconds_count", (("workflow", "fine"),))] == 4
    labels = (("host", HOST), ("owner", owner), ("pid", str(os.getpid())))
    assert got[("flowctl_daemon_up", labels)] == 1
    assert got[("flowctl_daemon_leases_held", labels)] == 0
    assert got[("flowctl_daemons_up", ())] == 1
    assert got[("flowctl_notifications", (("state", "pending"),))] == 4  # no daemon [notify]
    assert all(r.status.is_terminal for r in store.list_runs(limit=10))
    assert RunStatus.SLEEPING not in {r.status for r in store.list_runs(limit=10)}


def test_status_prometheus_prints_the_same_exposition(
    monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    out = run_main(monkeypatch, "--db", db_of(store), "status", "--prometheus")
    assert out.returncode == 0, out.stderr
    assert samples(out.stdout) == samples(render(store).decode())


def test_status_takes_json_or_prometheus_not_both(
    monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    out = run_main(monkeypatch, "--db", db_of(store), "status", "--json", "--prometheus")
    assert out.returncode == 2
    assert out.stderr.strip() == "flowctl: give --json or --prometheus, not both"
