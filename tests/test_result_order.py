"""A run's result and a published value read back with their keys in the order the
workflow made them, on both stores (PostgreSQL keeps them as json, not jsonb, which
sorts keys: a YAML run's `steps` came back alphabetised there and in step order on
SQLite)."""

from __future__ import annotations

from pathlib import Path

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.model import RunStatus
from flowctl.store import Store

FLOWS = """
from flowctl import workflow


@workflow
def ordered(ctx):
    value = {"zeta": 1, "a": {"y": 2, "b": 3}, "mid": [3, 2, 1]}
    ctx.publish("shape", value)
    return value
"""

YAML = """
name: steps_in_order
steps:
  - id: zeta
    run: [echo, z]
  - id: a
    run: [echo, a]
  - id: mid
    run: [echo, m]
"""


def test_a_result_and_a_published_value_keep_their_key_order(
    store: Store, daemon: Daemon, fake_clock: FakeClock, tmp_path: Path
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    run_id = ops.start(store, f"{tmp_path / 'flows.py'}:ordered", {}, clock=fake_clock).run.run_id
    daemon.tick()
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED
    assert list(run.result) == ["zeta", "a", "mid"]
    assert list(run.result["a"]) == ["y", "b"]
    assert list(store.published(run_id)["shape"][0]) == ["zeta", "a", "mid"]


def test_a_yaml_runs_steps_are_in_step_order(
    store: Store, daemon: Daemon, fake_clock: FakeClock, tmp_path: Path
) -> None:
    (tmp_path / "order.yaml").write_text(YAML)
    run_id = ops.start(store, str(tmp_path / "order.yaml"), {}, clock=fake_clock).run.run_id
    daemon.tick()
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert list(run.result["steps"]) == ["zeta", "a", "mid"]
