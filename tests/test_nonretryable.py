"""Errors no retry can fix end the run `dead` at once: no attempt, no backoff, no step retry.

Each case runs on a FakeClock through the daemon's tick(); the proof of "at once" is the run
dead on attempt 1 with no run_at and no "retry scheduled" in its timeline, and step bodies
called once. Retryable errors still retry (the control case), and the CLI exits 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import nonretryable_flows as flows
import pytest
from nonretryable_flows import CALLS

from flowctl import NonRetryableError, RetryPolicy, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.errors import DurableCallError, UsageError, is_non_retryable
from flowctl.model import EntryState, RunStatus
from flowctl.runtime.targets import load_target
from flowctl.store import Store
from flowctl.testing import WorkflowEnvironment
from tests.conftest import ROOT

TESTS_DIR = str(Path(__file__).resolve().parent)


@pytest.fixture(autouse=True)
def _fresh_counts() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def start(store: Store, clock: FakeClock, name: str, input: dict[str, Any] | None = None) -> str:
    started = ops.start(
        store, f"nonretryable_flows:{name}", input or {}, clock=clock, cwd=TESTS_DIR
    )
    return started.run.run_id


def assert_dead_at_once(store: Store, run_id: str, type_: str, kind: str = "non_retryable") -> Any:
    """Dead on its first attempt, nothing left to wake it, and no retry was ever scheduled."""
    run = store.get_run(run_id)
    assert (run.status, run.attempt, run.run_at) == (RunStatus.DEAD, 1, None)
    assert run.error is not None
    assert (run.error["type"], run.error["kind"]) == (type_, kind)
    types = [e.type for e in store.timeline(run_id)]
    assert "retry scheduled" not in types and "step retry scheduled" not in types
    assert types[-1] == "dead-lettered"
    return run.error


@pytest.mark.parametrize(
    ("name", "type_", "says"),
    [
        ("naive_sleep_until", "UsageError", "needs a timezone-aware datetime"),
        ("bad_duration", "DurationError", "invalid duration '5 minuts'"),
        ("bad_signal_timeout", "DurationError", "invalid duration '3 dais'"),
        ("durable_call_in_step", "DurableCallError", "inside step 'nested'"),
        ("durable_call_from_a_thread", "DurableCallError", "from another thread"),
        ("raises_non_retryable", "NonRetryableError", "order 7 does not exist"),
        ("result_not_json", "SerializationError", "the workflow's result is not JSON"),
    ],
)
def test_a_mistake_in_the_workflow_ends_the_run_dead_at_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon, name: str, type_: str, says: str
) -> None:
    rid = start(store, fake_clock, name)
    daemon.tick()
    error = assert_dead_at_once(store, rid, type_)
    assert says in error["message"]
    assert error["non_retryable"] is True
    assert error["dead_reason"] == "not retried: no retry can fix this error"
    assert CALLS["nested"] <= 1


def test_a_step_result_that_is_not_json_is_neither_retried_by_the_step_nor_by_the_run(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "step_result_not_json")  # the step's policy allows 5 tries
    daemon.tick()
    error = assert_dead_at_once(store, rid, "SerializationError")
    assert "the result of step 'when' is not JSON-serialisable" in error["message"]
    assert CALLS["when"] == 1
    (entry,) = store.journal(rid).values()
    assert (entry.state, entry.tries, entry.value["type"]) == (
        EntryState.ERROR,
        1,
        "SerializationError",
    )


def test_non_determinism_ends_the_run_dead_at_once_under_its_own_kind(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "nondeterministic")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    fake_clock.advance(timedelta(hours=1))  # past the 1h sleep
    daemon.tick()
    error = assert_dead_at_once(store, rid, "NonDeterminismError", kind="nondeterminism")
    assert "call #0 was recorded as step 'first'" in error["message"]


def test_an_input_that_does_not_bind_to_the_handler_ends_the_run_before_it_runs(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    # A run stored with an input its handler does not take (the handler changed since, or
    # the run was written by another tool): no attempt of the same code can bind it.
    wf = load_target("nonretryable_flows:takes_user", cwd=TESTS_DIR)
    run, _ = store.create_run(wf.new_run({"usr": "ana"}), fake_clock.now())
    daemon.tick()
    error = assert_dead_at_once(store, run.run_id, "InputError")
    assert "has no input 'usr' (did you mean 'user'?)" in error["message"]
    assert CALLS["takes_user"] == 0


def test_non_retryable_error_raised_by_a_step_is_not_retried_by_its_policy(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "step_raises_non_retryable")
    daemon.tick()
    error = assert_dead_at_once(store, rid, "CardDeclined")
    assert error["message"] == "card declined"
    assert CALLS["charge"] == 1
    (entry,) = store.journal(rid).values()
    assert (entry.state, entry.value["non_retryable"]) == (EntryState.ERROR, True)


def test_an_error_listed_in_the_step_policy_non_retryable_ends_the_run_dead_at_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "listed_non_retryable")
    daemon.tick()
    assert_dead_at_once(store, rid, "KeyError")
    assert CALLS["lookup"] == 1


def test_a_workflow_that_catches_a_non_retryable_step_error_goes_on(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "catches_non_retryable")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    fake_clock.advance(timedelta(hours=1))
    daemon.tick()  # the replay re-raises the recorded CardDeclined: caught again
    run = store.get_run(rid)
    assert (run.status, run.result) == (RunStatus.COMPLETED, "refunded")
    assert CALLS["charge"] == 1


def test_a_retryable_error_still_spends_backoff_and_attempts(
    store: Store, fake_clock: FakeClock, daemon: Daemon
) -> None:
    rid = start(store, fake_clock, "retryable")
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 1)  # the step's own backoff
    fake_clock.advance(flows.RETRY_FIVE.initial * 10)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt, run.error and run.error["kind"]) == (
        RunStatus.QUEUED,
        2,
        "raised",
    )
    assert CALLS["flaky"] == 2


def test_the_classification_is_pure_and_kept_by_the_step_policy() -> None:
    assert is_non_retryable(NonRetryableError("x"))
    assert is_non_retryable(flows.CardDeclined("x"))
    assert is_non_retryable(DurableCallError("x"))
    assert not is_non_retryable(UsageError("x"))  # only when flowctl flags it
    assert not is_non_retryable(RuntimeError("x"))
    policy = RetryPolicy.make(max_attempts=5, retry_on=(NonRetryableError,))
    assert not policy.retryable(NonRetryableError("x"))  # never, even when listed in retry_on
    assert policy.final(NonRetryableError("x"))


# ---------------------------------------------------------------- YAML workflows


def _yaml(tmp_path: Path, body: str) -> str:
    path = tmp_path / f"wf-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(body)
    return str(path)


@pytest.mark.parametrize(
    ("steps", "input", "type_", "says"),
    [
        (
            '  - sleep: "${{ input.wait }}"\n',
            {"wait": "5 minuts"},
            "UsageError",
            "invalid duration '5 minuts'",
        ),
        (
            '  - sleep_until: "${{ input.wait }}"\n',
            {"wait": "2030-01-01T09:00:00"},
            "UsageError",
            "has no UTC offset",
        ),
        (
            "  - id: check\n"
            "    run: [echo, '{\"a\": 1}']\n"
            "  - id: use\n"
            '    run: [echo, "${{ steps.check.json.b }}"]\n',
            {"wait": "x"},
            "ExpressionError",
            "has no key 'b'",
        ),
    ],
)
def test_yaml_mistakes_found_while_running_end_the_run_dead_at_once(
    tmp_path: Path, db: str, steps: str, input: dict[str, Any], type_: str, says: str
) -> None:
    env = WorkflowEnvironment(db=db)
    body = "name: mistakes\ninput: {wait: str}\nsteps:\n" + steps
    rid = env.start(_yaml(tmp_path, body), input)
    error = assert_dead_at_once(env.store, rid, type_)
    assert says in error["message"]
    env.close()


def test_a_yaml_call_step_that_returns_no_json_ends_the_run_dead_at_once(
    tmp_path: Path, db: str
) -> None:
    module = f"nr_helpers_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "import datetime\n\ndef when():\n    return datetime.datetime(2030, 1, 1)\n"
    )
    body = (
        "name: callme\nsteps:\n"
        f"  - id: when\n    call: {module}:when\n    retry: {{max_attempts: 4, backoff: 1s}}\n"
    )
    env = WorkflowEnvironment(db=db)
    rid = env.start(_yaml(tmp_path, body))
    error = assert_dead_at_once(env.store, rid, "SerializationError")
    assert "the result of step 'when' is not JSON" in error["message"]
    env.close()


def test_a_yaml_run_whose_stored_input_does_not_convert_ends_dead_before_any_step(
    tmp_path: Path, db: str
) -> None:
    marker = tmp_path / "ran"
    path = _yaml(
        tmp_path,
        f"name: typed\ninput: {{count: int}}\nsteps:\n  - id: touch\n    run: [touch, '{marker}']\n",
    )
    env = WorkflowEnvironment(db=db)
    wf = load_target(path)
    run, _ = env.store.create_run(wf.new_run({"count": "many"}), env.clock.now())
    env.run_due()
    error = assert_dead_at_once(env.store, run.run_id, "InputError")
    assert "input 'count' must be" in error["message"]
    assert not marker.exists()
    env.close()


# ---------------------------------------------------------------- the CLI


def _flowctl(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )


def test_flowctl_run_of_a_non_retryable_mistake_exits_1_and_prints_the_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "typo.py").write_text(
        "from flowctl import workflow\n\n"
        "@workflow\n"
        "def typo(ctx):\n"
        "    ctx.step('greet', lambda: 'hi')\n"
        "    ctx.sleep('5 minuts')\n"
    )
    db = tmp_path / "flowctl.db"
    proc = _flowctl(db, "run", "typo.py:typo", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "queued" not in proc.stdout and "next attempt" not in proc.stdout
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("dead ")]
    assert "DurationError: invalid duration '5 minuts'" in line
    assert "Traceback" not in proc.stderr
    shown = _flowctl(db, "show", line.split()[1].rstrip(":"), cwd=tmp_path)
    assert "dead_reason: not retried: no retry can fix this error" in shown.stdout
