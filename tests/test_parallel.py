"""Parallel branches (issue 36): ctx.map and ctx.parallel, on both stores.

Runs are driven by `daemon.tick()` on a FakeClock; branch bodies in parallel_flows count
their calls, so "not run again" is a counter that did not move.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import parallel_flows as flows
import pytest
from parallel_flows import CALLS, GATES, KNOBS, RUNNING

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.fanout import MAX_FANOUT
from flowctl.model import CallKind, EntryState, RunStatus
from flowctl.store import Store
from tests.durable_flows import TESTS_DIR
from tests.helpers import wait_until
from tests.test_check import flowctl


@pytest.fixture(autouse=True)
def _fresh_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


def start(store: Store, clock: FakeClock, name: str, **input: object) -> str:
    started = ops.start(store, f"parallel_flows:{name}", input, clock=clock, cwd=TESTS_DIR)
    return started.run.run_id


def rows(store: Store, run_id: str) -> list[tuple[int, str, str, str]]:
    return [
        (e.call_index, str(e.kind), e.name, str(e.state)) for e in store.journal(run_id).values()
    ]


def test_map_runs_one_step_per_item_and_returns_results_in_order(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "mapped", items=[3, 1, 2])
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result == {"out": [6, 2, 4], "after": "ok"}
    assert rows(store, rid) == [
        (0, "fanout", "double", "done"),
        (1, "step", "double[0]", "done"),
        (2, "step", "double[1]", "done"),
        (3, "step", "double[2]", "done"),
        (4, "step", "after", "done"),
    ]
    assert store.journal(rid)[0].value == {
        "call": "ctx.map",
        "count": 3,
        "digest": store.journal(rid)[0].value["digest"],
    }


def test_failed_items_raise_one_parallel_error_after_all_ran_and_retry_runs_only_them(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail"] = {1, 3}
    rid = start(store, fake_clock, "mapped", items=[0, 1, 2, 3])
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.QUEUED  # the attempt failed; the run retries
    assert run.error["type"] == "ParallelError"
    assert [f["index"] for f in run.error["failures"]] == [1, 3]
    assert "[1]" in run.error["message"] and "bad item 3" in run.error["message"]
    assert all(CALLS[f"double:{x}"] == 1 for x in range(4))  # every item ran to its end
    KNOBS["fail"] = set()
    fake_clock.advance(60)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result["out"] == [0, 2, 4, 6]
    # the next attempt ran only the items without a result
    assert dict(CALLS) == {"double:0": 1, "double:1": 2, "double:2": 1, "double:3": 2}


def test_a_caught_parallel_error_names_each_failed_index(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail"] = {2}
    rid = start(store, fake_clock, "caught", items=[1, 2, 3])
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED
    assert [(f["index"], f["name"]) for f in run.result["failures"]] == [(1, "double[1]")]
    assert "ValueError: bad item 2" in run.result["failures"][0]["error"]
    assert "1 of 3 branches failed" in run.result["message"]


def test_items_follow_their_step_retry_policy_each_on_a_durable_timer(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["flaky_fails"] = {1: 2}  # item 1 fails twice, then succeeds
    rid = start(store, fake_clock, "mapped_flaky", items=[0, 1, 2])
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.QUEUED and run.attempt == 1
    states = {e.name: e.state for e in store.journal(rid).values()}
    assert states["flaky[1]"] is EntryState.RETRYING
    assert states["flaky[0]"] is EntryState.DONE and states["flaky[2]"] is EntryState.DONE
    for _ in range(2):
        fake_clock.advance(60)
        daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result == [100, 101, 102]
    assert dict(CALLS) == {"flaky:0": 1, "flaky:1": 3, "flaky:2": 1}
    assert run.attempt == 1


def test_max_concurrency_bounds_the_bodies_running_at_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    GATES["tracked"] = threading.Event()
    rid = start(store, fake_clock, "mapped_tracked", items=list(range(12)), limit=3)
    daemon.tick()
    assert store.get_run(rid).result == list(range(12))
    assert 1 <= RUNNING["max"] <= 3


def test_async_bodies_run_concurrently_on_one_loop(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "mapped_async", items=list(range(50)))
    daemon.tick()
    run = store.get_run(rid)
    assert run.result == [x * 3 for x in range(50)]
    assert RUNNING["max"] > 1  # awaited side by side...
    assert len(flows.THREADS) == 1  # ...on one event loop's thread, not a thread each
    assert sum(1 for e in store.journal(rid).values() if e.kind is CallKind.STEP) == 50


def test_an_async_step_body_is_awaited(store: Store, fake_clock: FakeClock, daemon: Daemon) -> None:
    rid = start(store, fake_clock, "async_step")
    daemon.tick()
    assert store.get_run(rid).result == 15


def test_parallel_runs_callables_and_partials(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "branches", a=2, b=5)
    daemon.tick()
    run = store.get_run(rid)
    assert run.result == [4, 5, 6], run.error
    assert [r[2] for r in rows(store, rid)] == ["pair", "pair[0]", "pair[1]", "pair[2]"]


def test_items_that_are_not_a_list_end_the_run_at_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "not_a_list")
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert "list or tuple, got set" in run.error["message"]
    assert store.journal(rid) == {}


def test_a_fan_out_past_the_limit_is_refused_at_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "too_many", n=MAX_FANOUT + 1)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert f"the largest fan-out is {MAX_FANOUT}" in run.error["message"]
    assert CALLS == {}


def test_a_durable_call_inside_a_branch_is_refused(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "nested")
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert "steps do not nest" in run.error["message"]


@pytest.mark.parametrize("changed", [[1, 2, 3, 4], [2, 1, 3]], ids=["count", "order"])
def test_another_number_or_order_of_items_in_flight_is_non_determinism(
    store: Store, fake_clock: FakeClock, daemon: Daemon, changed: list[int]
) -> None:
    rid = start(store, fake_clock, "mapped_then_sleep", items=[1, 2, 3])
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    KNOBS["items"] = changed  # a deploy changed the code under the sleeping run
    fake_clock.advance(2 * 3600)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    message = run.error["message"]
    assert run.error["type"] == "ShapeChanged"
    assert "call #0 was recorded as ctx.map 'double' with 3 branches" in message
    assert f"now makes ctx.map 'double' with {len(changed)} branches" in message
    assert CALLS == {"double:1": 1, "double:2": 1, "double:3": 1}  # nothing ran again


def test_the_same_items_replay_without_running_again(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "mapped_then_sleep", items=[1, 2, 3])
    daemon.tick()
    fake_clock.advance(2 * 3600)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED and run.result == [2, 4, 6]
    assert CALLS == {"double:1": 1, "double:2": 1, "double:3": 1}


def test_reordered_parallel_branches_are_non_determinism(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "branches_then_sleep", a=1, b=2)
    daemon.tick()
    KNOBS["reorder"] = True
    fake_clock.advance(2 * 3600)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert "ctx.parallel 'pair' with 3 branches" in run.error["message"]


MAP_FLOW = """
from flowctl import workflow


def double(x):
    return x * 2


@workflow
def fan(ctx):
    out = ctx.map("double", double, {items})
    ctx.sleep("1h")
    return out
"""


def test_flowctl_check_finds_a_changed_fan_out_before_a_deploy(tmp_path: Path, db: str) -> None:
    (tmp_path / "fan.py").write_text(MAP_FLOW.format(items="[1, 2, 3]"))
    out = flowctl(db, "run", "fan.py:fan", "--json", cwd=tmp_path)
    assert json.loads(out.stdout)["status"] == "sleeping", out.stderr
    assert flowctl(db, "check", cwd=tmp_path).returncode == 0
    (tmp_path / "fan.py").write_text(MAP_FLOW.format(items="[1, 2, 3, 4]"))
    js = flowctl(db, "check", "--json", cwd=tmp_path)
    assert js.returncode == 1, js.stderr
    [finding] = json.loads(js.stdout)
    assert finding["problem"] == "nondeterminism" and finding["call_index"] == 0
    assert finding["recorded"].startswith("ctx.map 'double' with 3 branches")
    assert finding["now"].startswith("ctx.map 'double' with 4 branches")


# ---------------------------------------------------------------- ctx.children


def children_of(store: Store, rid: str) -> list[str]:
    return [r.run_id for r in store.children_of(rid)]


def test_children_run_once_each_with_the_parent_waiting_holding_no_worker(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "fan_children", ns=[3, 1, 2], nap="2d")
    daemon.tick()
    parent = store.get_run(rid)
    assert parent.status is RunStatus.WAITING and parent.lease_owner is None
    kids = store.children_of(rid)
    assert len(kids) == 3 and {k.status for k in kids} == {RunStatus.SLEEPING}  # days asleep
    assert [k.key for k in kids] == [f"child:{rid}:{i}" for i in (1, 2, 3)]
    fake_clock.advance(3 * 86400)
    for _ in range(4):
        daemon.tick()
    parent = store.get_run(rid)
    assert parent.status is RunStatus.COMPLETED, parent.error
    assert parent.result == {"out": [9, 1, 4], "after": "ok"}
    assert children_of(store, rid) == [k.run_id for k in kids]  # none started twice
    assert [r[2:] for r in rows(store, rid)] == [
        ("workflow parallel_flows:child", "done"),
        *((f"workflow parallel_flows:child[{k}]", "done") for k in range(3)),
        ("after", "done"),
    ]


def test_max_concurrency_keeps_at_most_n_children_active(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "fan_children", ns=[1, 2, 3, 4, 5], nap="1h", limit=2)
    daemon.tick()
    assert len(store.children_of(rid)) == 2
    seen = []
    for _ in range(6):
        fake_clock.advance(3600)
        for _ in range(3):
            daemon.tick()
        active = [k for k in store.children_of(rid) if not k.status.is_terminal]
        seen.append(len(active))
    assert max(seen) <= 2
    parent = store.get_run(rid)
    assert parent.status is RunStatus.COMPLETED, parent.error
    assert parent.result["out"] == [1, 4, 9, 16, 25]
    assert len(store.children_of(rid)) == 5


def test_dead_children_raise_parallel_error_naming_each_child_run(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["child_fail"] = {2}
    rid = start(store, fake_clock, "fan_children", ns=[1, 2, 3])
    for _ in range(4):
        daemon.tick()
    parent = store.get_run(rid)
    dead = next(k for k in store.children_of(rid) if k.status is RunStatus.DEAD)
    assert parent.error is not None and parent.error["type"] == "ParallelError"
    [failure] = parent.error["failures"]
    assert failure["index"] == 1 and failure["child_run_id"] == dead.run_id
    assert "child 2 refuses" in parent.error["message"] and dead.run_id in parent.error["message"]


def test_a_cancelled_child_raises_parallel_error_after_the_others_end(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "fan_children", ns=[1, 2, 3], nap="1h")
    for _ in range(3):
        daemon.tick()  # the parent parks waiting; its three children sleep
    kids = store.children_of(rid)
    assert [k.status for k in kids] == [RunStatus.SLEEPING] * 3
    ops.cancel(store, kids[1].run_id, clock=fake_clock, reason="not this one", by="ana")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.WAITING  # the others still sleep
    fake_clock.advance(timedelta(hours=1))
    for _ in range(4):
        daemon.tick()
    parent = store.get_run(rid)  # its attempt failed: retried by its policy, then dead
    assert parent.error is not None and parent.error["type"] == "ParallelError"
    [failure] = parent.error["failures"]
    assert failure["index"] == 1 and failure["child_run_id"] == kids[1].run_id
    assert kids[1].run_id in parent.error["message"]
    for _ in range(5):
        fake_clock.advance(timedelta(minutes=1))
        daemon.tick()
    assert store.get_run(rid).status is RunStatus.DEAD  # the same failure on each attempt
    assert len(store.children_of(rid)) == 3  # no child started again
    ended = {k.run_id: k.status for k in store.children_of(rid)}
    assert ended == {
        kids[0].run_id: RunStatus.COMPLETED,
        kids[1].run_id: RunStatus.CANCELLED,
        kids[2].run_id: RunStatus.COMPLETED,
    }


def test_a_redrive_runs_only_the_items_without_a_result(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail"] = {2}
    rid = start(store, fake_clock, "once", items=[1, 2, 3])
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.DEAD
    KNOBS["fail"] = set()
    ops.redrive(store, rid, clock=fake_clock)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED and run.result == [2, 4, 6]
    assert dict(CALLS) == {"double:1": 1, "double:2": 2, "double:3": 1}


def test_each_branch_prints_into_its_own_step_output(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "chatty")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.COMPLETED
    chunks = store.output(rid)
    by_step = {(c.call_index, c.step): c.text for c in chunks}
    assert by_step == {
        (1, "shout[0]"): "item 1\n",
        (2, "shout[1]"): "item 2\n",
        (4, "yell[0]"): "async item 3\n",
    }


def test_a_cancel_during_a_fan_out_starts_no_more_branches(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    GATES["double:1"] = threading.Event()
    rid = start(store, fake_clock, "cancellable", items=[1, 2, 3])
    worker = threading.Thread(target=daemon.tick)
    worker.start()
    wait_until(lambda: CALLS["double:1"] == 1, timeout=10)
    ops.cancel(store, rid, clock=fake_clock)
    daemon.heartbeat_once()  # the handler learns of the cancel while branch 1 runs
    GATES["double:1"].set()
    worker.join(20)
    run = store.get_run(rid)
    assert run.status is RunStatus.CANCELLED, run.status
    assert CALLS["double:3"] == 0  # branch 3 never started


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("bad_limit", "max_concurrency must be a positive integer, got 0"),
        ("bad_calls", "takes a list of zero-argument callables"),
        ("bad_inputs", "takes its inputs as a list of dicts"),
    ],
)
def test_bad_arguments_end_the_run_at_once_with_one_line(
    store: Store, fake_clock: FakeClock, daemon: Daemon, name: str, said: str
) -> None:
    rid = start(store, fake_clock, name)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD and run.attempt == 1
    assert said in run.error["message"] and "\n" not in run.error["message"]
    assert store.journal(rid) == {} and store.children_of(rid) == []


def test_other_children_in_flight_are_non_determinism(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "children_then_sleep", ns=[1, 2])
    for _ in range(3):
        daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    KNOBS["ns"] = [1, 2, 3]
    fake_clock.advance(2 * 3600)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert "ctx.children 'workflow parallel_flows:child' with 2 branches" in run.error["message"]
    assert len(store.children_of(rid)) == 2  # no third child was started
