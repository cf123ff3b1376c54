"""Named limits (issue 37, item 2): a step that names one takes it in the transaction of
its start; one that finds none parks its run (sleeping, no worker, no slot) until the
limit allows it; an unknown name kills the run at once, naming the defined limits. The
daemon runs on a fake clock; the store-level tests use explicit instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import UsageError
from flowctl.model import CallKind, RunStatus
from flowctl.ops import limits as limit_ops
from flowctl.store import Lease, NewRun, Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
SECOND = timedelta(seconds=1)
LEASE = 15 * SECOND
OWNER = "host-a/100/1/aaaa"
OTHER = "host-b/200/1/bbbb"

FLOWS = """\
from flowctl import step, workflow

@step(limit="api")
def call(n):
    return n

@step(limit="nope")
def lost(n):
    return n

@workflow
def hit(ctx, n: int = 0):
    before = ctx.step("plain", lambda: n)
    return ctx.step("call", call, before)

@workflow
def typo(ctx):
    return ctx.step("lost", lost, 1)

@workflow
def fanned(ctx):
    return ctx.map("calls", call, [1, 2])
"""


@pytest.fixture
def flows(tmp_path: Path) -> str:
    path = tmp_path / "limit_flows.py"
    path.write_text(FLOWS)
    return str(path)


def define(store: Store, name: str, clock: Any, **given: Any) -> None:
    limit_ops.set_limit(store, limit_ops.limit_spec(name, **given), clock=clock)


def step_times(store: Store, run_ids: list[str], name: str) -> list[datetime]:
    times = []
    for rid in run_ids:
        for entry in store.journal(rid).values():
            if entry.kind is CallKind.STEP and entry.name == name and entry.recorded_at:
                times.append(entry.recorded_at)
    return sorted(times)


def test_a_rate_limit_parks_runs_until_their_token_and_never_exceeds_it(
    store: Store, flows: str
) -> None:
    clock = FakeClock(T0)
    define(store, "api", clock, rate="2/10s")
    ids = [ops.start(store, f"{flows}:hit", {"n": i}, clock=clock).run.run_id for i in range(5)]
    daemon = Daemon(store, clock, DaemonConfig(concurrency=4))
    daemon.tick()
    runs = [store.get_run(r) for r in ids]
    assert sum(r.status is RunStatus.COMPLETED for r in runs) == 2
    parked = [r for r in runs if r.status is not RunStatus.COMPLETED]
    assert {r.status for r in parked} == {RunStatus.SLEEPING}
    assert {r.flow_wait for r in parked} == {"api"}
    assert {r.run_at for r in parked} == {T0 + 10 * SECOND}  # the next token, not a poll
    (state,) = store.limit_states(clock.now())
    assert state.starts == 2 and state.next_free == T0 + 10 * SECOND
    for _ in range(4):
        clock.advance(5)
        daemon.tick()
    assert all(store.get_run(r).status is RunStatus.COMPLETED for r in ids)
    starts = step_times(store, ids, "call")
    assert len(starts) == 5
    worst = max(sum(1 for t in starts if s <= t < s + 10 * SECOND) for s in starts)
    assert worst == 2
    assert [e.type for e in store.timeline(parked[0].run_id)].count("waiting for limit") == 1


def test_an_unknown_limit_kills_the_run_naming_the_defined_ones(store: Store, flows: str) -> None:
    clock = FakeClock(T0)
    define(store, "api", clock, concurrency=2)
    define(store, "db", clock, rate="5/1s")
    rid = ops.start(store, f"{flows}:typo", {}, clock=clock).run.run_id
    Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD and run.attempt == 1
    assert run.error is not None
    assert "limit 'nope', which is not defined; defined limits: api, db" in run.error["message"]


def claimed(store: Store, run_id: str, now: datetime, owner: str = OWNER) -> Lease:
    store.create_run(NewRun(run_id, "wf", "wf.py:wf", "python", {}), now)
    claims, _ = store.claim_due(owner, now, now + LEASE, 10, run_id=run_id)
    return claims[0].lease


def test_a_concurrency_limit_holds_until_the_step_ends_or_its_lease_lapses(store: Store) -> None:
    store.set_limit("db", 1, None, T0)
    a, b = claimed(store, "a", T0), claimed(store, "b", T0)
    assert store.take_limit(a, "db", 3, T0).taken
    wait = store.take_limit(b, "db", 0, T0 + SECOND)
    assert not wait.taken and wait.why == "concurrency"
    assert wait.until == T0 + LEASE  # a's lease: the fallback if a's worker dies
    (state,) = store.limit_states(T0 + SECOND)
    assert [h[:2] for h in state.holders] == [("a", 3)]
    event = ("waiting for limit", {"limit": "db"})
    store.suspend_run(b, RunStatus.SLEEPING, wait.until, T0 + SECOND, 0.0, None, event)
    store.release_limit(a, "db", 3, T0 + 2 * SECOND)
    assert store.get_run("b").run_at == T0 + 2 * SECOND  # given back: the waiter is due
    assert store.limit_states(T0 + 2 * SECOND)[0].holders == []


def test_a_hold_of_a_run_whose_lease_lapsed_is_given_back(store: Store) -> None:
    store.set_limit("db", 1, None, T0)
    a, b = claimed(store, "a", T0), claimed(store, "b", T0, OTHER)
    assert store.take_limit(a, "db", 0, T0).taken
    assert not store.take_limit(b, "db", 0, T0 + SECOND).taken
    # a's daemon died: no heartbeat, its lease lapses; b (heartbeating) may go
    store.heartbeat(OTHER, [(b, 0.0)], T0 + 2 * LEASE, T0 + LEASE - SECOND)
    assert store.take_limit(b, "db", 0, T0 + LEASE + SECOND).taken


def test_a_stalled_daemons_own_holds_still_count_for_it(store: Store) -> None:
    """A daemon stalled past its runs' leases (its heartbeat late, nobody took them over)
    is alive when it asks again: its hold still counts for its own runs, and two of them
    never hold at once (the crash test met it: two steps of one process under a limit of
    1, both leases lapsed in a stall). Another daemon may still take the limit."""
    store.set_limit("db", 1, None, T0)
    a, b = claimed(store, "a", T0), claimed(store, "b", T0)
    assert store.take_limit(a, "db", 0, T0).taken
    stalled = T0 + LEASE + SECOND  # no heartbeat: both leases lapsed
    wait = store.take_limit(b, "db", 0, stalled)
    assert not wait.taken and wait.why == "concurrency"
    assert wait.until == stalled + SECOND  # looked at again soon; a's release wakes it first
    c = claimed(store, "c", stalled, OTHER)
    assert store.take_limit(c, "db", 0, stalled).taken  # a's daemon may be dead, to others


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number from 1"),
        ({"concurrency": -3}, "concurrency must be a whole number from 1"),
        ({"rate": "2/0s"}, "rate needs a period above zero"),
        ({"rate": "many"}, "rate must be N/PERIOD"),
        ({"rate": "0/1s"}, "must be a whole number from 1"),
        ({}, "give concurrency N, rate N/PERIOD, or both"),
    ],
)
def test_a_bad_limit_is_one_line_and_writes_nothing(
    store: Store, given: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        limit_ops.limit_spec("api", **given)
    assert "\n" not in str(caught.value)
    assert store.limit_names() == []


def test_removing_an_unknown_limit_names_the_defined_ones(store: Store) -> None:
    store.set_limit("api", 1, None, T0)
    with pytest.raises(UsageError, match="no limit named 'apy'; defined limits: api"):
        limit_ops.remove_limit(store, "apy")
    limit_ops.remove_limit(store, "api")
    assert store.limit_names() == []


def test_a_copy_keeps_the_named_limits_and_a_held_run(tmp_path: Path, store: Store) -> None:
    from flowctl.store import open_store
    from flowctl.store.copy import copy_rows

    clock = FakeClock(T0)
    define(store, "api", clock, rate="100/1m", concurrency=3)
    for rid in ("a1", "a2"):
        store.create_run(
            NewRun(rid, "wf", "wf.py:wf", "python", {}, flow_key="wf", flow_limit=1), T0
        )
    claims, _ = store.claim_due(OWNER, T0, T0 + LEASE, 10)
    assert [c.run.run_id for c in claims] == ["a1"]
    with open_store(tmp_path / "copy.db") as dest:
        copy_rows(store, dest, ops.plan_copy(store, dest, clock=clock))
        (api,) = dest.limit_states(T0)
        assert (api.spec.concurrency, api.spec.rate) == (3, "100/1m")
        held = dest.get_run("a2")
        assert held.held_at == T0 and held.flow_key == "wf" and held.run_at is None


def test_a_fan_out_of_a_limited_step_is_refused_not_run_unlimited(store: Store, flows: str) -> None:
    clock = FakeClock(T0)
    define(store, "api", clock, concurrency=1)
    rid = ops.start(store, f"{flows}:fanned", {}, clock=clock).run.run_id
    Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD and run.error is not None
    assert "takes limit 'api', which only ctx.step steps take" in run.error["message"]
    assert store.limit_states(clock.now())[0].holders == []


def test_a_for_each_step_with_a_limit_is_a_validation_error(tmp_path: Path) -> None:
    from flowctl.yamlflow import load_yaml

    text = "name: x\nsteps:\n  - id: a\n    for_each: [1, 2]\n    run: [echo, hi]\n    limit: api\n"
    with pytest.raises(UsageError, match=r"x.yaml:6:12: steps\[0\]\.limit: `limit` does not"):
        load_yaml(text, "x.yaml")
