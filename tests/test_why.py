"""`flowctl why RUN`: the pure decision (explain) for every reason, the facts read from a real
store after real transitions, and the command through the Typer app, on a FakeClock."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ids import HOST, make_owner
from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus
from flowctl.ops.explain import DaemonFact, OperatorEvent, WhyFacts, explain, when
from flowctl.store.sqlite import SqliteStore as Store

NOW = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)
ALIVE = DaemonFact("h/1/1/aaaa", "h", 1, True, 2, 0)
GONE_OWNER = f"{HOST}/999999999/1/dead"  # above pid_max: provably gone


def run(status: RunStatus = RunStatus.QUEUED, **kw: Any) -> Run:
    base: dict[str, Any] = {
        "run_id": "r1",
        "workflow": "wf",
        "target": "wf.py:wf",
        "kind": "python",
        "status": status,
        "input": {},
        "created_at": NOW - timedelta(hours=1),
        "run_at": NOW,
    }
    return Run(**{**base, **kw})


def entry(index: int, kind: CallKind, name: str, state: EntryState, **kw: Any) -> JournalEntry:
    return JournalEntry("r1", index, kind, name, state, **kw)


@pytest.fixture
def paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# ---------------------------------------------------------------- the pure decision


def test_when_says_local_time_with_the_zone_and_how_far(paris: None) -> None:
    """The format the tables use (model.local_text), no second UTC spelling beside it."""
    assert when(NOW + timedelta(hours=2), NOW) == "2026-03-29 16:00:00 CEST (in 2h00m)"
    assert when(NOW - timedelta(minutes=5), NOW) == "2026-03-29 13:55:00 CEST (5m00s ago)"
    late = datetime(2026, 3, 29, 23, 30, tzinfo=UTC)  # 01:30 the next day in Paris
    assert when(late, NOW) == "2026-03-30 01:30:00 CEST (in 11h30m)"


def test_when_in_utc_says_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert when(NOW + timedelta(hours=2), NOW) == "2026-03-29 14:00:00 UTC (in 2h00m)"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_sleeping_names_the_call_index_and_wake(paris: None) -> None:
    wake = NOW + timedelta(days=3)
    pending = entry(2, CallKind.SLEEP, "cool-off", EntryState.PENDING, wake_at=wake)
    why = explain(
        WhyFacts(run(RunStatus.SLEEPING, run_at=wake), pending=pending, daemons=(ALIVE,)), NOW
    )
    assert why.reason == "sleeping"
    assert why.message == (
        "sleeping until 2026-04-01 14:00:00 CEST (in 3d00h) (sleep #2 'cool-off')"
    )
    assert why.facts["wake_at"] == "2026-04-01T12:00:00.000000Z"
    assert why.facts["call_index"] == 2


def test_a_parked_run_with_no_daemon_says_so_and_when_one_last_ran() -> None:
    wake = NOW + timedelta(hours=1)
    pending = entry(0, CallKind.SLEEP, "sleep", EntryState.PENDING, wake_at=wake)
    facts = WhyFacts(
        run(RunStatus.SLEEPING, run_at=wake),
        pending=pending,
        daemon_last_seen=NOW - timedelta(days=2),
        db="/x/f.db",
    )
    why = explain(facts, NOW)
    assert why.reason == "sleeping"
    assert "but no daemon is running on this database; one last ran at " in why.message
    assert "2d00h ago)" in why.message
    assert why.facts["daemon"] == {
        "running": False,
        "daemons": [],
        "last_seen": "2026-03-27T12:00:00.000000Z",
        "db": "/x/f.db",
    }


def test_waiting_for_a_signal_since_when_and_its_timeout() -> None:
    since = NOW - timedelta(hours=1)
    pending = entry(
        1,
        CallKind.SIGNAL,
        "approved",
        EntryState.PENDING,
        recorded_at=since,
        wake_at=NOW + timedelta(days=7),
    )
    why = explain(
        WhyFacts(run(RunStatus.WAITING, run_at=NOW + timedelta(days=7)), pending=pending,
                 daemons=(ALIVE,)),
        NOW,
    )  # fmt: skip
    assert why.reason == "waiting_signal"
    assert why.message.startswith("waiting for signal 'approved' since ")
    assert "1h00m ago" in why.message and "timeout at " in why.message and "in 7d00h" in why.message
    assert why.facts["signal"] == "approved"
    assert why.facts["since"] == "2026-03-29T11:00:00.000000Z"
    no_timeout = entry(1, CallKind.SIGNAL, "go", EntryState.PENDING, recorded_at=since)
    why = explain(
        WhyFacts(run(RunStatus.WAITING, run_at=None), pending=no_timeout, daemons=(ALIVE,)), NOW
    )
    assert why.reason == "waiting_signal" and "with no timeout" in why.message
    assert why.facts["timeout_at"] is None


def test_queued_for_a_step_retry_after_its_error() -> None:
    at = NOW + timedelta(seconds=30)
    pending = entry(
        3,
        CallKind.STEP,
        "charge",
        EntryState.RETRYING,
        value={"type": "TimeoutError", "message": "gateway slow\ntrace"},
        wake_at=at,
        tries=2,
    )
    why = explain(WhyFacts(run(run_at=at), pending=pending, daemons=(ALIVE,)), NOW)
    assert why.reason == "retry_step"
    assert "retry of step 'charge' (call #3, try 3)" in why.message
    assert why.message.endswith("after TimeoutError: gateway slow")
    assert why.facts["retry_at"] == "2026-03-29T12:00:30.000000Z"


def test_queued_for_the_next_attempt_after_a_run_error() -> None:
    at = NOW + timedelta(seconds=4)
    r = run(run_at=at, attempt=2, error={"type": "KeyError", "message": "'x'"})
    why = explain(WhyFacts(r, daemons=(ALIVE,)), NOW)
    assert why.reason == "retry_run"
    assert "attempt 2/3" in why.message and why.message.endswith("after KeyError: 'x'")


def test_queued_until_its_workflow_loads_again() -> None:
    at = NOW + timedelta(seconds=8)
    error = {"type": "TargetError", "message": "bad.py: SyntaxError", "kind": "load"}
    r = run(run_at=at, attempt=1, error={**error, "attempt": 1, "load_failures": 4})
    why = explain(WhyFacts(r, daemons=(ALIVE,)), NOW)
    assert why.reason == "retry_load"
    assert "waiting for its workflow to load" in why.message
    assert "no attempt spent (4 failure(s) in a row" in why.message
    assert why.message.endswith("after TargetError: bad.py: SyntaxError")
    assert why.facts["load_failures"] == 4
    # A load error of an earlier attempt says nothing of this one: a plain retry.
    older = run(run_at=at, attempt=2, error={**error, "attempt": 1, "load_failures": 4})
    assert explain(WhyFacts(older, daemons=(ALIVE,)), NOW).reason == "retry_run"


def test_queued_to_start_later_then_due() -> None:
    later = run(run_at=NOW + timedelta(minutes=10))
    assert explain(WhyFacts(later, daemons=(ALIVE,)), NOW).reason == "scheduled"
    due = run(run_at=NOW - timedelta(seconds=1))
    why = explain(WhyFacts(due, daemons=(ALIVE,), due_ahead=0), NOW)
    assert why.reason == "due" and "2 free slot(s)" in why.message


def test_queued_behind_n_runs_with_no_free_slot() -> None:
    busy = DaemonFact("h/1/1/aaaa", "h", 1, True, 2, 2)
    why = explain(
        WhyFacts(run(run_at=NOW - timedelta(minutes=1)), daemons=(busy,), due_ahead=7), NOW
    )
    assert why.reason == "queued_no_slot"
    assert "queued behind 7 run(s): all 2 worker slot(s) of 1 daemon(s) are busy" in why.message
    assert (why.facts["queued_behind"], why.facts["slots"], why.facts["busy"]) == (7, 2, 2)


def test_due_with_no_daemon_running() -> None:
    dead = DaemonFact("h/2/1/bbbb", "h", 2, False, 4, 0)
    why = explain(WhyFacts(run(run_at=NOW - timedelta(minutes=1)), daemons=(dead,), db="f.db"), NOW)
    assert why.reason == "no_daemon"
    assert "no daemon is running on this database; none has run on it yet" in why.message
    assert why.facts["daemon"]["running"] is False


def test_deadline_passed_is_acted_on_by_the_next_daemon() -> None:
    r = run(RunStatus.SLEEPING, run_at=NOW + timedelta(hours=1), deadline=NOW - timedelta(1))
    why = explain(WhyFacts(r), NOW)
    assert why.reason == "deadline_passed"
    assert "the next daemon to run on this database dead-letters it" in why.message
    assert why.facts["deadline"] == "2026-03-28T12:00:00.000000Z"
    assert (
        "dead-letters it at its next claim" in explain(WhyFacts(r, daemons=(ALIVE,)), NOW).message
    )
    live = replace(
        r,
        status=RunStatus.RUNNING,
        lease_owner=ALIVE.owner,
        lease_until=NOW + timedelta(seconds=9),
        current_step="#4 'export'",
    )
    why = explain(WhyFacts(live, daemons=(ALIVE,)), NOW)
    assert why.reason == "deadline_passed"
    assert why.message.endswith(
        "; step #4 'export' still runs in daemon pid 1 on h, told at its heartbeat;"
        " the run ends dead when the handler stops"
    )


def test_dead_names_the_error_and_the_redrive_command() -> None:
    err = {"type": "ValueError", "message": "bad row", "dead_reason": "attempts exhausted (3/3)",
           "traceback": "long"}  # fmt: skip
    r = run(RunStatus.DEAD, run_at=None, finished_at=NOW - timedelta(minutes=3), error=err)
    why = explain(WhyFacts(r), NOW)
    assert why.reason == "dead"
    assert "with ValueError: bad row (attempts exhausted (3/3))" in why.message
    assert why.message.endswith("`flowctl redrive r1` gives it a fresh attempt budget")
    assert why.facts["redrive"] == "flowctl redrive r1"
    assert "traceback" not in why.facts["error"]


def test_dead_past_its_deadline_names_the_redrive_that_gives_a_new_one() -> None:
    # A bare `flowctl redrive` of it is refused (issue 39): `why` names the one that works.
    err = {"type": "DeadlineExceededError", "message": "deadline passed"}
    r = run(
        RunStatus.DEAD,
        run_at=None,
        deadline=NOW - timedelta(minutes=5),
        finished_at=NOW - timedelta(minutes=5),
        error=err,
    )
    why = explain(WhyFacts(r), NOW)
    assert why.facts["redrive"] == "flowctl redrive r1 --deadline DURATION"
    assert why.message.endswith(
        "`flowctl redrive r1 --deadline DURATION` gives it a fresh attempt budget"
    )
    later = replace(r, deadline=NOW + timedelta(hours=1))  # not passed: a bare redrive keeps it
    assert explain(WhyFacts(later), NOW).facts["redrive"] == "flowctl redrive r1"


def test_cancel_requested_while_the_handler_still_runs_in_a_daemon() -> None:
    r = run(
        RunStatus.RUNNING,
        lease_owner=ALIVE.owner,
        lease_until=NOW + timedelta(seconds=10),
        cancel_requested=True,
    )
    last = entry(1, CallKind.STEP, "load", EntryState.DONE)
    why = explain(
        WhyFacts(r, last_checkpoint=last, daemons=(ALIVE,),
                 cancel_requested=OperatorEvent(NOW - timedelta(seconds=5), "ana")),
        NOW,
    )  # fmt: skip
    assert why.reason == "cancel_requested"
    assert "by ana while its handler (after checkpoint #1 step 'load') still runs" in why.message
    assert "in daemon pid 1 on h" in why.message
    inside = explain(
        WhyFacts(replace(r, current_step="#2 'charge'"), last_checkpoint=last, daemons=(ALIVE,)),
        NOW,
    )
    assert "while step #2 'charge' still runs in daemon pid 1 on h" in inside.message
    assert inside.facts["step"] == "#2 'charge'"


def test_the_step_a_handler_is_inside_comes_from_its_heartbeat(
    store: Store, fake_clock: FakeClock
) -> None:
    import durable_flows as flows

    flows.reset()
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    rid = flows.start(store, fake_clock, "two_steps")
    seen = []

    def operator_asks() -> None:  # inside step "b", while the handler runs
        ops.cancel(store, rid, clock=fake_clock, by="ana")
        daemon.heartbeat_once()
        seen.append(ops.why_run(store, rid, clock=fake_clock))

    flows.HOOKS["b"] = operator_asks
    try:
        daemon.tick()
    finally:
        flows.reset()
    (why,) = seen
    assert why.reason == "cancel_requested"
    assert "by ana while step #1 'b' still runs in worker pid " in why.message
    assert store.get_run(rid).status is RunStatus.CANCELLED


def test_lease_held_by_a_process_that_is_gone() -> None:
    r = run(RunStatus.RUNNING, lease_owner=GONE_OWNER, lease_until=NOW + timedelta(seconds=9))
    why = explain(WhyFacts(r, lease_owner_gone=True, daemons=(ALIVE,)), NOW)
    assert why.reason == "lease_owner_gone"
    assert "worker pid 999999999" in why.message and "a daemon reclaims it at once" in why.message
    lapsed = run(RunStatus.RUNNING, lease_owner="otherhost/5/1/x", lease_until=NOW)
    assert explain(WhyFacts(lapsed), NOW).reason == "lease_expired"
    live = run(RunStatus.RUNNING, lease_owner=ALIVE.owner, lease_until=NOW + timedelta(seconds=9))
    assert explain(WhyFacts(live, daemons=(ALIVE,)), NOW).reason == "running"


def test_every_reason_is_json_with_the_same_message() -> None:
    why = explain(WhyFacts(run(run_at=NOW + timedelta(minutes=1)), daemons=(ALIVE,)), NOW)
    out = why.to_json()
    assert out["reason"] == "scheduled" and out["message"] == why.message
    assert out["run_id"] == "r1" and out["status"] == "queued"
    assert out["start_at"] == "2026-03-29T12:01:00.000000Z"


# ---------------------------------------------------------------- facts from a real store

FLOWS = """
from flowctl import step, workflow, RetryPolicy


@workflow
def nap(ctx):
    ctx.step("a", lambda: 1)
    ctx.sleep("2h", name="nap")
    return "done"


@workflow
def ask(ctx):
    return ctx.wait_signal("approved", timeout="1d")


@step(retry=RetryPolicy.make(max_attempts=3, backoff="30s"))
def flaky():
    raise RuntimeError("down")


@workflow
def retrying(ctx):
    return ctx.step("flaky", flaky)
"""


@pytest.fixture
def flows(flows_dir: Path) -> Path:
    path = flows_dir / "flows.py"
    path.write_text(FLOWS)
    return path


def start(store: Store, clock: FakeClock, target: str, **kw: Any) -> str:
    return ops.start(store, target, {}, clock=clock, **kw).run.run_id


def test_facts_after_real_transitions(store: Store, fake_clock: FakeClock, flows: Path) -> None:
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2))
    napper = start(store, fake_clock, f"{flows}:nap")
    asker = start(store, fake_clock, f"{flows}:ask")
    retry = start(store, fake_clock, f"{flows}:retrying")
    daemon.tick()
    why = ops.why_run(store, napper, clock=fake_clock)
    assert (why.reason, why.facts["call_index"]) == ("sleeping", 1)
    assert why.facts["daemon"]["running"] is False  # tick() registers no daemon
    assert ops.why_run(store, asker, clock=fake_clock).facts["signal"] == "approved"
    why = ops.why_run(store, retry, clock=fake_clock)
    assert (why.reason, why.facts["step"]) == ("retry_step", "flaky")
    assert why.facts["error"] == "RuntimeError: down"
    # a signal sent while waiting: buffered, due now
    ops.send_signal(store, asker, "approved", 1, clock=fake_clock)
    assert ops.why_run(store, asker, clock=fake_clock).reason == "no_daemon"


def test_queue_position_and_slots_from_registered_daemons(
    store: Store, fake_clock: FakeClock, flows: Path
) -> None:
    ids = [start(store, fake_clock, f"{flows}:nap") for _ in range(3)]
    fake_clock.advance(timedelta(seconds=1))
    owner = make_owner()  # this test process: alive
    store.register_daemon(owner, HOST, os.getpid(), None, fake_clock.now(), {"concurrency": 1})
    claims, _ = store.claim_due(owner, fake_clock.now(), fake_clock.now() + timedelta(seconds=15),
                                1)  # fmt: skip
    assert [c.run.run_id for c in claims] == [min(ids)]
    last = max(ids)
    why = ops.why_run(store, last, clock=fake_clock)
    assert why.reason == "queued_no_slot"
    assert why.facts["queued_behind"] == 1  # the other queued one; the running one is not due
    assert why.facts["daemon"]["daemons"][0]["pid"] == os.getpid()
    held = ops.why_run(store, min(ids), clock=fake_clock)
    assert held.reason == "running" and f"daemon pid {os.getpid()}" in held.message


def test_lease_owner_gone_read_from_the_store(
    store: Store, fake_clock: FakeClock, flows: Path
) -> None:
    rid = start(store, fake_clock, f"{flows}:nap")
    store.claim_due(GONE_OWNER, fake_clock.now(), fake_clock.now() + timedelta(seconds=15), 1)
    why = ops.why_run(store, rid, clock=fake_clock)
    assert why.reason == "lease_owner_gone"


def test_the_last_daemon_is_remembered_after_it_stops(
    store: Store, fake_clock: FakeClock, flows: Path
) -> None:
    rid = start(store, fake_clock, f"{flows}:nap", run_at=fake_clock.now() + timedelta(hours=1))
    assert store.daemon_last_seen() is None
    d = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    assert d.run_forever(until_idle=True) == 0
    stopped = fake_clock.now()
    fake_clock.advance(timedelta(hours=3))
    assert store.daemons() == []
    assert store.daemon_last_seen() == stopped
    why = ops.why_run(store, rid, clock=fake_clock)
    assert why.reason == "no_daemon"
    assert why.facts["daemon"]["last_seen"] == stopped.isoformat(timespec="microseconds").replace(
        "+00:00", "Z"
    )
    assert "one last ran at " in why.message and "3h00m ago" in why.message


def test_show_says_the_same_as_why(store: Store, fake_clock: FakeClock, flows: Path) -> None:
    rid = start(store, fake_clock, f"{flows}:nap")
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    detail = ops.show_run(store, rid, clock=fake_clock)
    shown = ops.explain_detail(detail, fake_clock.now())
    assert shown == ops.why_run(store, rid, clock=fake_clock)


# ---------------------------------------------------------------- the command


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


def test_why_command_text_and_json(invoke: Any, fake_clock: FakeClock, flows: Path) -> None:
    out = invoke("run", f"{flows}:nap", "--json").stdout
    rid = json.loads(out)["id"]
    text = invoke("why", rid[:10]).stdout
    assert text.startswith(f"{rid} (sleeping): sleeping until ")
    assert "(sleep #1 'nap'); but no daemon is running on this database" in text
    assert text.count("\n") == 1
    data = json.loads(invoke("why", rid, "--json").stdout)
    assert data["reason"] == "sleeping" and data["status"] == "sleeping"
    wake = fake_clock.now() + timedelta(hours=2)
    assert data["wake_at"] == wake.isoformat(timespec="microseconds").replace("+00:00", "Z")
    assert data["message"] in text


def test_why_of_an_unknown_run_is_one_line_exit_1(invoke: Any) -> None:
    Store(invoke.db).close()  # `why` creates no database: give it one
    result = invoke("why", "nope", code=1)
    assert result.stderr == "flowctl: no run matches 'nope': give a run id or a unique prefix\n"
    assert result.stdout == ""


def test_why_help_has_an_example(invoke: Any) -> None:
    assert "Examples: flowctl why m8rtkeefq3x7bz2w --json" in " ".join(
        invoke("why", "--help").stdout.split()
    )


# ---------------------------------------------------------------- recovery (issue 39)


def test_a_suspect_running_alone_says_so_and_what_waits() -> None:
    isolated = f"{HOST}/4242/1/beef"
    r = run(
        RunStatus.RUNNING,
        lease_owner=isolated,
        lease_until=NOW + timedelta(seconds=9),
        suspect=True,
        solo=True,
        crashes=2,
    )
    why = explain(WhyFacts(r, daemons=(ALIVE,), suspects=(1, 3)), NOW)
    assert why.reason == "suspect_alone"
    assert "runs alone in worker pid 4242" in why.message
    assert "(2 of 5 charged); other runs go on beside it" in why.message
    assert (why.facts["suspects_alone"], why.facts["suspects_waiting"]) == (1, 3)


def test_a_suspect_waiting_for_a_worker_of_its_own_says_how_many_wait() -> None:
    r = run(RunStatus.RUNNING, lease_owner=GONE_OWNER, lease_until=NOW, suspect=True)
    why = explain(WhyFacts(r, lease_owner_gone=True, daemons=(ALIVE,), suspects=(4, 7)), NOW)
    assert why.reason == "suspect_waiting"
    assert "at its next reclaim pass" in why.message
    assert "7 suspect(s) wait, 4 run(s) alone now; other runs go on meanwhile" in why.message


def test_a_run_a_drain_handed_back_is_no_suspect() -> None:
    r = run(RunStatus.RUNNING, lease_owner=None, lease_until=NOW, run_at=NOW)
    why = explain(WhyFacts(r, daemons=(ALIVE,)), NOW)
    assert why.reason == "released"
    assert "no suspect" in why.message and "claims it with the other due runs" in why.message
    alone = explain(WhyFacts(r), NOW)
    assert alone.reason == "released" and "no daemon is running" in alone.message


def test_a_resting_run_waits_in_memory_until_its_wake_then_any_daemon_takes_it() -> None:
    """A short sleep or retry waited out in memory (issue 40): running, let go, due to any
    daemon at its margin; once past the margin it is a handed-back run like any other."""
    wake, margin = NOW + timedelta(seconds=1), NOW + timedelta(seconds=2)
    r = run(RunStatus.RUNNING, lease_owner=None, lease_until=None, run_at=margin)
    sleep = entry(1, CallKind.SLEEP, "nap", EntryState.PENDING, wake_at=wake)
    why = explain(WhyFacts(r, pending=sleep, daemons=(ALIVE,)), NOW)
    assert why.reason == "resting" and why.to_json()["wake_at"] == "2026-03-29T12:00:01.000000Z"
    assert "waits in memory for its sleep at" in why.message
    retry = entry(0, CallKind.STEP, "charge", EntryState.RETRYING, wake_at=wake)
    assert "for its retry of step 'charge'" in explain(WhyFacts(r, pending=retry), NOW).message
    assert explain(WhyFacts(r, pending=sleep), margin).reason == "released"


def test_why_and_status_read_the_suspects_from_the_store(
    store: Store, fake_clock: FakeClock, flows: Path
) -> None:
    rid = start(store, fake_clock, f"{flows}:nap")
    now = fake_clock.now()
    store.claim_due(GONE_OWNER, now, now + timedelta(seconds=5), 10)
    fake_clock.advance(10)
    now = fake_clock.now()
    assert store.claim_due(ALIVE.owner, now, now + timedelta(seconds=5), 10) == ([], [])
    assert ops.status(store, clock=fake_clock).suspects == (0, 1)  # held for isolation
    assert ops.status(store, clock=fake_clock).to_json()["suspects"] == {"alone": 0, "waiting": 1}
    claim, _ = store.claim_suspect(make_owner(), now, now + timedelta(seconds=5))
    assert claim is not None and claim.run.run_id == rid
    assert ops.status(store, clock=fake_clock).suspects == (1, 0)
    why = ops.why_run(store, rid, clock=fake_clock)
    assert why.reason == "suspect_alone"
    assert (why.facts["suspects_alone"], why.facts["suspects_waiting"]) == (1, 0)


def test_status_says_what_recovery_runs_alone_and_what_waits(
    invoke: Any, fake_clock: FakeClock, flows: Path
) -> None:
    store = Store(invoke.db)
    try:
        start(store, fake_clock, f"{flows}:nap")
        lines = invoke("status").stdout.splitlines()
        assert not [ln for ln in lines if ln.startswith("recovery")]  # nothing to recover
        now = fake_clock.now()
        assert store.claim_due(GONE_OWNER, now, now + timedelta(seconds=5), 10)[0]
    finally:
        store.close()
    fake_clock.advance(10)
    line = "recovery  0 suspect(s) running alone, 1 waiting to; other runs go on"
    assert line in invoke("status").stdout.splitlines()
