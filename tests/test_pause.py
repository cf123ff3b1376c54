"""`flowctl pause` / `flowctl resume`: the `paused` status through the store, the daemon (tick
and the serving loop), the pure guards, `why`, the client and the CLI, on a FakeClock.

A paused run is never claimed; its wake time may pass while paused; its deadline keeps
running and dead-letters it; resume makes it due at once if its wake passed, else at its
wake; a running run parks at its next durable call, nothing interrupted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable_flows as flows
import pytest
from durable_flows import CALLS, HOOKS, KNOBS, calls, start
from helpers import wait_until
from typer.testing import CliRunner

from flowctl import cli, ops, transitions
from flowctl.client import Client
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.lifecycle import POLL_INTERVAL
from flowctl.errors import InvalidStateError, UsageError
from flowctl.model import RunStatus
from flowctl.runtime.context import current
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.transitions import Action


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


@pytest.fixture
def daemon(store: Store, fake_clock: FakeClock) -> Daemon:
    return Daemon(store, fake_clock, DaemonConfig(concurrency=2, lease=15, heartbeat=1))


def types(store: Store, run_id: str) -> list[str]:
    return [e.type for e in store.timeline(run_id)]


def event(store: Store, run_id: str, type_: str) -> dict[str, Any]:
    found = [e.data for e in store.timeline(run_id) if e.type == type_]
    assert found, f"no {type_!r} event in {types(store, run_id)}"
    return found[-1]


# ---------------------------------------------------------------- pure guards


def test_guards_say_which_statuses_pause_and_resume_accept() -> None:
    for status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SLEEPING, RunStatus.WAITING):
        assert transitions.refusal(Action.PAUSE, "r", status) is None
    for status in (RunStatus.PAUSED, RunStatus.COMPLETED, RunStatus.DEAD, RunStatus.CANCELLED):
        assert transitions.refusal(Action.PAUSE, "r", status) == (
            f"run r is {status}: only queued, running, sleeping or waiting runs can be paused"
        )
    assert transitions.refusal(Action.RESUME, "r", RunStatus.PAUSED) is None
    assert transitions.refusal(Action.RESUME, "r", RunStatus.RUNNING, pause_requested=True) is None
    for status in RunStatus:
        if status is not RunStatus.PAUSED:
            assert transitions.refusal(Action.RESUME, "r", status) == (
                f"run r is {status}, not paused: only a paused run can be resumed"
            )
    # signals may still be sent to a paused run; it is not woken by hand
    assert transitions.refusal(Action.SIGNAL, "r", RunStatus.PAUSED) is None
    assert transitions.refusal(Action.WAKE, "r", RunStatus.PAUSED) is not None


# ---------------------------------------------------------------- parked runs


def test_a_paused_sleeper_is_never_claimed_and_resumes_at_once_after_its_wake(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    wake = store.get_run(rid).run_at
    assert store.get_run(rid).status is RunStatus.SLEEPING and wake is not None
    paused = ops.pause(store, rid, clock=fake_clock, by="ana")
    assert (paused.status, paused.paused_status, paused.paused_run_at, paused.run_at) == (
        RunStatus.PAUSED,
        RunStatus.SLEEPING,
        wake,
        None,  # no deadline: nothing for the daemon to act on
    )
    detail = ops.show_run(store, rid, clock=fake_clock)
    assert ops.why(detail, fake_clock.now()).startswith("paused (was sleeping); `flowctl resume`")
    fake_clock.advance(timedelta(hours=2))  # its wake time passes while it is paused
    assert daemon.tick() == 0
    assert store.get_run(rid).status is RunStatus.PAUSED
    assert CALLS["after"] == 0
    resumed = ops.resume(store, rid, clock=fake_clock, by="bob")
    assert (resumed.status, resumed.run_at) == (RunStatus.SLEEPING, fake_clock.now())
    assert resumed.paused_status is None and resumed.paused_run_at is None
    assert daemon.tick() == 1
    assert store.get_run(rid).status is RunStatus.COMPLETED
    assert CALLS == {"before": 1, "after": 1}
    assert event(store, rid, "paused") == {
        "by": "ana",
        "was": "sleeping",
        "due": wake.isoformat(timespec="microseconds"),
    }
    assert event(store, rid, "resumed")["by"] == "bob"


def test_resumed_before_its_wake_it_is_due_at_its_wake(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    wake = store.get_run(rid).run_at
    ops.pause(store, rid, clock=fake_clock)
    fake_clock.advance(timedelta(minutes=10))
    resumed = ops.resume(store, rid, clock=fake_clock)
    assert (resumed.status, resumed.run_at) == (RunStatus.SLEEPING, wake)
    assert daemon.tick() == 0  # not due yet


def test_a_paused_run_dies_at_its_deadline_and_never_runs(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    deadline = fake_clock.now() + timedelta(minutes=30)
    rid = start(store, fake_clock, "sleeper", deadline=deadline)
    daemon.tick()
    paused = ops.pause(store, rid, clock=fake_clock)
    assert paused.run_at == deadline  # parked for the daemon's deadline check only
    assert (deadline.timestamp() * 1e6, rid) in [(a, b) for a, b in store.next_due(10)]
    fake_clock.advance(timedelta(minutes=29))
    assert daemon.tick() == 0 and store.get_run(rid).status is RunStatus.PAUSED
    fake_clock.set(deadline)
    assert daemon.tick() == 0  # ended at the claim, not executed
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert run.error is not None and run.error["kind"] == "deadline"
    assert run.paused_status is None
    assert CALLS["after"] == 0
    with pytest.raises(InvalidStateError, match="not paused"):
        ops.resume(store, rid, clock=fake_clock)


def test_queued_and_waiting_runs_pause_and_resume_with_their_times(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    later = fake_clock.now() + timedelta(hours=1)
    queued = start(store, fake_clock, "two_steps", run_at=later)
    waiter = start(store, fake_clock, "waiter", {"timeout": "2h"})
    daemon.tick()
    timeout_at = store.get_run(waiter).run_at
    for rid in (queued, waiter):
        ops.pause(store, rid, clock=fake_clock)
    # a signal sent while paused is buffered; resume makes the waiter due at once
    ops.send_signal(store, waiter, "approved", {"by": "ana"}, clock=fake_clock)
    assert store.get_run(waiter).status is RunStatus.PAUSED
    fake_clock.advance(timedelta(minutes=5))
    assert daemon.tick() == 0
    back = ops.resume(store, waiter, clock=fake_clock)
    assert back.status is RunStatus.WAITING and back.run_at == fake_clock.now()
    assert timeout_at is not None and back.run_at < timeout_at
    back = ops.resume(store, queued, clock=fake_clock)
    assert (back.status, back.run_at) == (RunStatus.QUEUED, later)
    assert daemon.tick() == 1
    assert store.get_run(waiter).result == {"by": "ana"}


def test_resuming_a_run_that_is_not_paused_is_refused(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    daemon.tick()
    with pytest.raises(InvalidStateError) as e:
        ops.resume(store, rid, clock=fake_clock)
    assert str(e.value) == f"run {rid} is sleeping, not paused: only a paused run can be resumed"
    ops.pause(store, rid, clock=fake_clock)
    with pytest.raises(InvalidStateError, match="can be paused"):
        ops.pause(store, rid, clock=fake_clock)


# ---------------------------------------------------------------- running runs


def test_pausing_a_running_run_parks_it_at_its_next_durable_call(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "two_steps")
    seen: list[RunStatus] = []

    def operator_pauses() -> None:  # inside step "a", while the handler runs
        run = ops.pause(store, rid, clock=fake_clock, by="ana")
        seen.append(run.status)
        daemon.heartbeat_once()  # the heartbeat tells the live handler

    HOOKS["a"] = operator_pauses
    daemon.tick()
    assert seen == [RunStatus.RUNNING]  # a request: step "a" was not interrupted
    run = store.get_run(rid)
    assert run.status is RunStatus.PAUSED
    assert [c[2] for c in calls(store, rid)] == ["a"]  # parked before step "b"
    assert CALLS == {"a": 1}
    assert event(store, rid, "pause requested") == {"by": "ana"}
    assert event(store, rid, "paused")["by"] == "ana"
    why = ops.why_run(store, rid, clock=fake_clock)
    assert why.reason == "paused" and why.facts["paused_by"] == "ana"
    assert "resume makes it due at once" in why.message
    HOOKS.clear()
    ops.resume(store, rid, clock=fake_clock)
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED and run.result == {"a": 2, "b": 20}
    assert CALLS == {"a": 1, "b": 1}  # "a" replayed from its checkpoint


def test_a_pause_requested_while_running_takes_effect_when_it_sleeps(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "sleeper")
    HOOKS["before"] = lambda: ops.pause(store, rid, clock=fake_clock)  # no heartbeat
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.paused_status) == (RunStatus.PAUSED, RunStatus.SLEEPING)
    assert run.paused_run_at == fake_clock.now() + timedelta(hours=1)
    assert not run.pause_requested


def test_resume_withdraws_a_pause_not_yet_taken(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "two_steps")

    def pause_then_change_mind() -> None:
        ops.pause(store, rid, clock=fake_clock)
        assert ops.resume(store, rid, clock=fake_clock).pause_requested is False
        daemon.heartbeat_once()

    HOOKS["a"] = pause_then_change_mind
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.COMPLETED
    assert event(store, rid, "resumed")["was"] == "pause requested"


def test_a_pause_requested_when_its_worker_dies_parks_it_at_the_reclaim(
    store: Store, fake_clock: FakeClock
) -> None:
    rid = start(store, fake_clock, "two_steps")
    dead = "otherhost/1/1/dead"
    store.claim_due(dead, fake_clock.now(), fake_clock.now() + timedelta(seconds=15), 1)
    ops.pause(store, rid, clock=fake_clock)
    assert store.get_run(rid).status is RunStatus.RUNNING  # only requested
    fake_clock.advance(timedelta(seconds=16))  # the lease lapses
    assert Daemon(store, fake_clock).tick() == 0
    run = store.get_run(rid)
    assert (run.status, run.paused_status, run.paused_run_at) == (
        RunStatus.PAUSED,
        RunStatus.QUEUED,
        fake_clock.now(),
    )
    assert CALLS == {}


def test_a_step_failure_while_a_pause_is_requested_parks_the_retry(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    KNOBS["fail:flaky"] = 1
    rid = start(store, fake_clock, "retrying")
    HOOKS["flaky"] = lambda: ops.pause(store, rid, clock=fake_clock)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.paused_status) == (RunStatus.PAUSED, RunStatus.QUEUED)
    assert run.paused_run_at == fake_clock.now() + timedelta(seconds=10)  # the step's backoff


# ---------------------------------------------------------------- the serving loop


def test_the_serving_loop_dead_letters_a_paused_run_at_its_deadline(
    db_path: Path, store: Store, fake_clock: FakeClock
) -> None:
    daemon = Daemon(Store(db_path), fake_clock, DaemonConfig(concurrency=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        assert daemon.serving.wait(5)
        deadline = fake_clock.now() + timedelta(seconds=30)
        rid = start(store, fake_clock, "sleeper", deadline=deadline)
        fake_clock.advance(POLL_INTERVAL)
        wait_until(lambda: store.get_run(rid).status is RunStatus.SLEEPING, timeout=5)
        ops.pause(store, rid, clock=fake_clock)  # another process: data_version moves
        fake_clock.advance(POLL_INTERVAL)
        wait_until(lambda: store.get_run(rid).run_at == deadline, timeout=5)
        fake_clock.set(deadline)
        wait_until(lambda: store.get_run(rid).status is RunStatus.DEAD, timeout=5)
        assert store.get_run(rid).finished_at == deadline
    finally:
        daemon.stop(drain=False)
        thread.join(5)
        daemon.store.close()


def test_the_serving_loop_tells_a_live_handler_of_a_pause_written_elsewhere(
    db_path: Path, store: Store, fake_clock: FakeClock
) -> None:
    daemon = Daemon(Store(db_path), fake_clock, DaemonConfig(concurrency=1, heartbeat=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    inside = threading.Event()
    told: list[bool] = []

    def long_step() -> None:  # step "work": the operator pauses while it runs
        ctx = current()
        assert ctx is not None
        inside.set()
        told.append(
            wait_until(lambda: fake_clock.advance(POLL_INTERVAL) and ctx.pause_requested, 5)
        )

    HOOKS["work"] = long_step
    thread.start()
    try:
        assert daemon.serving.wait(5)
        rid = start(store, fake_clock, "busy")
        fake_clock.advance(POLL_INTERVAL)
        assert inside.wait(5)
        ops.pause(store, rid, clock=fake_clock, by="ana")  # another connection
        wait_until(lambda: store.get_run(rid).status is RunStatus.PAUSED, timeout=5)
        assert told == [True]
        assert CALLS == {"work": 1}  # the step finished; "more" never started
        assert [c[2] for c in calls(store, rid)] == ["work"]
        assert event(store, rid, "paused")["by"] == "ana"
        ops.resume(store, rid, clock=fake_clock)
        fake_clock.advance(POLL_INTERVAL)
        wait_until(lambda: store.get_run(rid).status is RunStatus.COMPLETED, timeout=5)
        assert CALLS == {"work": 1, "more": 1}
    finally:
        daemon.stop(drain=False)
        thread.join(5)
        daemon.store.close()


# ---------------------------------------------------------------- many runs, client, CLI


def test_pause_and_resume_every_run_of_a_workflow(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    a = start(store, fake_clock, "sleeper")
    b = start(store, fake_clock, "sleeper")
    other = start(store, fake_clock, "waiter")
    daemon.tick()
    done = start(store, fake_clock, "two_steps")
    daemon.tick()
    wf = store.get_run(a).workflow
    paused = ops.pause_workflow(store, wf, clock=fake_clock)
    assert sorted(r.run_id for r in paused) == sorted([a, b])
    assert store.get_run(other).status is RunStatus.WAITING
    assert store.get_run(done).status is RunStatus.COMPLETED
    assert ops.pause_workflow(store, wf, clock=fake_clock) == []  # nothing active left
    resumed = ops.resume_workflow(store, wf, clock=fake_clock)
    assert {r.status for r in resumed} == {RunStatus.SLEEPING}
    # A workflow with no run at all is a typo: said, not "0 run(s) paused".
    with pytest.raises(UsageError) as exc:
        ops.pause_workflow(store, wf[:-1], clock=fake_clock)
    assert str(exc.value).startswith(f"no run of workflow {wf[:-1]!r} exists (did you mean")


def test_client_pause_and_resume(tmp_path: Path, fake_clock: FakeClock) -> None:
    with Client(tmp_path / "c.db", clock=fake_clock) as client:
        rid = start(client.store, fake_clock, "sleeper", run_at=fake_clock.now() + timedelta(1))
        assert client.pause(rid).status is RunStatus.PAUSED
        assert client.list(status="paused")[0].run_id == rid
        assert client.resume(rid).status is RunStatus.QUEUED


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_clock: FakeClock) -> Any:
    monkeypatch.setattr(cli, "SystemClock", lambda: fake_clock)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    runner = CliRunner()
    db = tmp_path / "cli.db"

    def call(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli.app, ["--db", str(db), *args])
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    call.db = db  # type: ignore[attr-defined]
    return call


def test_pause_resume_commands(invoke: Any, fake_clock: FakeClock) -> None:
    with Store(invoke.db) as store:
        rid = start(store, fake_clock, "sleeper", run_at=fake_clock.now() + timedelta(hours=1))
    assert invoke("pause", rid).stdout == f"paused {rid} (sleeper)\n"
    listed = json.loads(invoke("ls", "--status", "paused", "--json").stdout)
    assert [(r["id"], r["status"], r["paused_status"]) for r in listed] == [
        (rid, "paused", "queued")
    ]
    assert json.loads(invoke("status", "--json").stdout)["counts"]["paused"] == 1
    assert json.loads(invoke("why", rid, "--json").stdout)["reason"] == "paused"
    shown = json.loads(invoke("show", rid, "--json").stdout)
    assert [e["type"] for e in shown["timeline"]][-1] == "paused"
    fake_clock.advance(timedelta(hours=2))
    assert invoke("resume", rid).stdout == f"resumed {rid}: queued, due now\n"
    err = invoke("resume", rid, code=1).stderr
    assert err == f"flowctl: run {rid} is queued, not paused: only a paused run can be resumed\n"
    out = json.loads(invoke("pause", "--workflow", "sleeper", "--json").stdout)
    assert [r["status"] for r in out] == ["paused"]
    assert invoke("resume", "-w", "sleeper").stdout.endswith("1 run(s) of sleeper resumed\n")
    assert "give a RUN, or --workflow" in invoke("pause", code=2).stderr
    assert invoke("pause", "nope", code=1).stderr.startswith("flowctl: no run matches 'nope'")


def test_help_has_examples(invoke: Any) -> None:
    for command in ("pause", "resume"):
        text = " ".join(invoke(command, "--help").stdout.split())
        assert f"Examples: flowctl {command} m8rtkeef" in text
