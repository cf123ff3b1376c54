"""Parallel branches as operators see them (issue 36): `why` counts and names the children
still running, `show` (text and --json) lists them by call index and branch, the TUI's
detail shows them, and a map's branches are checkpoints named NAME[i]."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import parallel_flows as flows
import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.store import Store, open_store
from flowctl.tui.render import render_detail
from tests.durable_flows import TESTS_DIR
from tests.test_cli import Flowctl, flowctl  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def parked_parent(store: Store, clock: FakeClock) -> str:
    """A parent waiting on three children asleep for a day."""
    started = ops.start(
        store,
        "parallel_flows:fan_children",
        {"ns": [1, 2, 3], "nap": "1d"},
        clock=clock,
        cwd=TESTS_DIR,
    )
    Daemon(store, clock, DaemonConfig(concurrency=4, lease=15, heartbeat=1)).tick()
    return started.run.run_id


def test_why_names_the_children_still_running(store: Store, fake_clock: FakeClock) -> None:
    rid = parked_parent(store, fake_clock)
    why = ops.why_run(store, rid, clock=fake_clock)
    kids = [k.run_id for k in store.children_of(rid)]
    assert why.reason == "waiting_children"
    assert why.message.startswith("waiting for 3 of 3 child runs still running:")
    assert all(k in why.message for k in kids)
    facts = why.to_json()
    assert facts["children_running"] == 3
    assert [c["run_id"] for c in facts["children"]] == kids


def test_show_lists_children_by_call_index_and_branch(store: Store, fake_clock: FakeClock) -> None:
    rid = parked_parent(store, fake_clock)
    detail = ops.show_run(store, rid, clock=fake_clock)
    js = detail.to_json()
    assert [(c["call_index"], c["branch"], c["status"]) for c in js["children"]] == [
        (i + 1, f"workflow parallel_flows:child[{i}]", "sleeping") for i in range(3)
    ]
    assert js["checkpoints"][0]["kind"] == "fanout"
    text = render_detail(detail, fake_clock.now(), width=120).plain
    assert "Children (3, 3 running)" in text
    assert "workflow parallel_flows:child[2]" in text
    assert "3 branches" in text  # the fan-out's header
    kid = store.children_of(rid)[0].run_id
    assert f"child run {kid}" in text  # a pending branch names its child run


def test_show_text_lists_children_and_names_map_branches(
    tmp_path: Path,
    flowctl: Flowctl,  # noqa: F811
) -> None:
    db = tmp_path / "f.db"
    clock = FakeClock()
    with open_store(db) as store:
        parent = parked_parent(store, clock)
        mapped = ops.start(
            store, "parallel_flows:mapped", {"items": [5, 6]}, clock=clock, cwd=TESTS_DIR
        ).run.run_id
        Daemon(store, clock, DaemonConfig(concurrency=4, lease=15, heartbeat=1)).tick()
    out = flowctl(db, "show", parent)
    assert out.returncode == 0, out.stderr
    assert "children  (3, 3 still running)" in out.stdout
    assert "#3   workflow parallel_flows:child[2]" in out.stdout
    out = flowctl(db, "show", mapped)
    assert "fanout  double" in out.stdout and "2 branches double[0..1]" in out.stdout
    assert "step    double[1]" in out.stdout
    why = flowctl(db, "why", parent)
    assert "waiting for 3 of 3 child runs still running" in why.stdout
