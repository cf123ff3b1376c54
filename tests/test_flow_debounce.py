"""Debounce (issue 37, item 4): starts with one key within the period collapse into one run
that starts once the key has been quiet for the period, with the newest input; each start
returns that run's id and `show` counts them. On both stores, on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)

FLOWS = """\
from flowctl import workflow

@workflow(debounce={"period": "2s", "key": "${{ input.user }}"})
def digest(ctx, user: str, n: int = 0):
    return ctx.step("build", lambda: f"{user}:{n}")
"""


@pytest.fixture
def target(tmp_path: Path) -> str:
    path = tmp_path / "debounce_flows.py"
    path.write_text(FLOWS)
    return f"{path}:digest"


def test_starts_within_the_period_collapse_into_one_run_with_the_newest_input(
    store: Store, target: str
) -> None:
    clock = FakeClock(T0)
    first = ops.start(store, target, {"user": "ann", "n": 1}, clock=clock)
    assert first.created and first.run.run_at == T0 + timedelta(seconds=2)
    clock.advance(1.5)
    again = ops.start(store, target, {"user": "ann", "n": 2}, clock=clock)
    other = ops.start(store, target, {"user": "bob", "n": 9}, clock=clock)
    clock.advance(1.5)
    last = ops.start(store, target, {"user": "ann", "n": 3}, clock=clock)
    assert not again.created and not last.created and other.created
    assert again.run.run_id == last.run.run_id == first.run.run_id
    run = store.get_run(first.run.run_id)
    assert run.input == {"user": "ann", "n": 3}
    assert run.run_at == clock.now() + timedelta(
        seconds=2
    )  # quiet for the period from the last start
    daemon = Daemon(store, clock, DaemonConfig(concurrency=2))
    clock.advance(1.9)
    daemon.tick()
    assert store.get_run(first.run.run_id).status is RunStatus.QUEUED  # not quiet long enough
    assert store.get_run(other.run.run_id).status is RunStatus.COMPLETED
    clock.advance(0.2)
    daemon.tick()
    done = store.get_run(first.run.run_id)
    assert done.status is RunStatus.COMPLETED and done.result == "ann:3"
    shown = ops.show_run(store, first.run.run_id, clock=clock)
    assert "debounce: 2 more start(s) collapsed into this run" in shown.notes
    # once it started, a new start begins a new run
    fresh = ops.start(store, target, {"user": "ann", "n": 4}, clock=clock)
    assert fresh.created and fresh.run.run_id != first.run.run_id
