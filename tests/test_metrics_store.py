"""The metrics read on both stores: every figure matches what the store recorded, and the
CLI's `status --prometheus` prints the same exposition on a PostgreSQL URL as on a file."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ids import HOST, make_owner, proc_start
from flowctl.ops.metrics import render
from flowctl.store import Store

ROOT = Path(__file__).resolve().parent.parent

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


def flowctl(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command on the store's database (a file path or a postgresql:// URL)."""
    db = store.location
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.fixture
def ran(store: Store, tmp_path: Path, fake_clock: FakeClock) -> str:
    """Two fine runs, a sleeper woken 0.3 s late, a dead run, one live daemon registered."""
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    for fn in ("fine", "fine", "napper", "doomed"):
        ops.start(store, f"{flows}:{fn}", {}, clock=fake_clock)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    daemon.tick()
    fake_clock.advance(3600.3)
    daemon.tick()
    owner = make_owner()
    store.register_daemon(owner, HOST, os.getpid(), proc_start(os.getpid()), fake_clock.now(), {})
    return owner


def test_the_snapshot_matches_the_recorded_facts(
    store: Store, ran: str, fake_clock: FakeClock
) -> None:
    snap = store.metrics_snapshot((0.25, 0.5, 1.0), (0.001, 10.0))
    everything = store.list_runs(limit=100)
    by = {}
    for r in everything:
        key = (str(r.status), r.workflow)
        by[key] = by.get(key, 0) + 1
    assert dict(((s, w), n) for s, w, n in snap.runs) == by
    assert by == {("completed", "fine"): 2, ("completed", "napper"): 1, ("dead", "doomed"): 1}
    events = [e for r in everything for e in store.timeline(r.run_id)]
    assert snap.claims == sum(e.type == "claimed" for e in events) == 5  # 4 starts, 1 wake
    assert snap.reclaims == 0
    late = [e.data["late_ms"] / 1000 for e in events if e.type == "woke"]
    assert late == [pytest.approx(0.3, abs=1e-6)]
    assert snap.wake_lateness.cumulative == (0, 1, 1)
    assert (snap.wake_lateness.count, snap.wake_lateness.total) == (1, pytest.approx(0.3))
    steps = dict(snap.step_durations)
    assert set(steps) == {"fine"}
    durations = [
        e.duration
        for r in everything
        if r.workflow == "fine"
        for e in store.journal(r.run_id).values()
        if e.duration is not None
    ]
    assert steps["fine"].count == len(durations) == 4
    assert steps["fine"].cumulative == (sum(d <= 0.001 for d in durations), 4)
    assert steps["fine"].total == pytest.approx(sum(durations))
    ((info, held),) = snap.daemons
    assert (info.owner, info.host, info.pid, held) == (ran, HOST, os.getpid(), 0)
    assert dict(snap.notifications) == {"pending": 4}  # every ending, nobody delivered yet
    assert store.metrics_snapshot((), ()).wake_lateness.count == 1  # no bounds: totals only


def test_a_run_held_by_a_daemon_counts_as_its_lease(
    store: Store, ran: str, tmp_path: Path, fake_clock: FakeClock
) -> None:
    ops.start(store, f"{tmp_path / 'flows.py'}:fine", {}, clock=fake_clock)
    now = fake_clock.now()
    claims, _ = store.claim_due(ran, now, now + timedelta(seconds=15), 1)
    assert len(claims) == 1
    ((_, held),) = store.metrics_snapshot((1.0,), (1.0,)).daemons
    assert held == 1
    got = samples(render(store).decode())
    assert got[("flowctl_runs", (("status", "running"), ("workflow", "fine")))] == 1
    assert got[("flowctl_runs_by_status", (("status", "running"),))] == 1


def test_status_prometheus_on_the_cli_prints_the_same_exposition(store: Store, ran: str) -> None:
    out = flowctl(store, "status", "--prometheus")
    assert out.returncode == 0, out.stderr
    assert samples(out.stdout) == samples(render(store).decode())
    assert samples(out.stdout)[("flowctl_claims_total", ())] == 5


def test_the_http_metrics_endpoint_serves_the_same_figures(
    store: Store, ran: str, tmp_path: Path
) -> None:
    from tests.serve_helpers import Api, port_of, start_serve

    db = store.location
    proc, log = start_serve(tmp_path, db)  # type: ignore[arg-type]
    try:
        reply = Api(port_of(proc, log)).call("GET", "/metrics")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert reply.status == 200
    served, here = samples(reply.body.decode()), samples(render(store).decode())
    runs = {k: v for k, v in served.items() if k[0] in ("flowctl_runs", "flowctl_claims_total")}
    assert runs == {k: v for k, v in here.items() if k in runs}
    assert served[("flowctl_runs", (("status", "dead"), ("workflow", "doomed")))] == 1
    assert "Traceback" not in log.read_text()
