"""The per-run Python work the hot path skips still gives the same answers (issue 14):
an input check remembered per set of keys still refuses a bad input, one shared JSON
encoder writes what json.dumps wrote, a step result skips the JSON round trip only when
the trip would change nothing, and a step that prints nothing stores nothing."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.errors import InputError, SerializationError
from flowctl.model import RunStatus
from flowctl.output import capturing
from flowctl.runtime.engine import Engine
from flowctl.runtime.targets import load_target
from flowctl.store import dumps
from flowctl.store.sqlite import SqliteStore

FLOWS = """\
import enum

class Level(enum.IntEnum):
    HIGH = 3

def needs_a(ctx, a, b=1):
    return a + b

def results(ctx):
    return [
        ctx.step("tuple", lambda: (1, 2)),
        ctx.step("int keys", lambda: {1: "x"}),
        ctx.step("int enum", lambda: Level.HIGH),
        ctx.step("text", lambda: "t"),
        ctx.step("none", lambda: None),
        ctx.step("true", lambda: True),
    ]
"""


def test_an_input_check_remembered_for_its_keys_still_refuses_other_keys(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    wf = load_target(f"{tmp_path / 'flows.py'}:needs_a")
    for _ in range(2):  # the second is answered from what the first found
        wf.check_binds({"a": 1})
        wf.check_binds({"a": 1, "b": 2})
    with pytest.raises(InputError, match="no input 'c'"):
        wf.check_binds({"a": 1, "c": 2})
    with pytest.raises(InputError, match="needs input 'a'"):
        wf.check_binds({"b": 2})


@pytest.mark.parametrize(
    "value", [1, "é\n", None, True, 2.5, [1, [2, {"k": None}]], {"a": 1, "b": [True]}, (1, 2)]
)
def test_the_shared_encoder_writes_what_json_dumps_wrote(value: Any) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize("value", [math.nan, math.inf, {1, 2}, object()])
def test_the_shared_encoder_still_refuses_what_is_not_json(value: Any) -> None:
    with pytest.raises(SerializationError, match="not JSON-serialisable"):
        dumps(value)


def test_a_step_returns_on_its_first_run_what_a_replay_returns(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    clock = FakeClock(datetime(2026, 3, 29, tzinfo=UTC))
    with SqliteStore(tmp_path / "r.db") as store:
        started = ops.start(store, f"{tmp_path / 'flows.py'}:results", {}, clock=clock)
        claims, _ = store.claim_due("t/1/1", clock.now(), clock.now(), 1)
        outcome = Engine(store, clock).execute(claims[0])
        assert outcome.status is RunStatus.COMPLETED
        first = outcome.result
        assert first == [[1, 2], {"1": "x"}, 3, "t", None, True]
        assert type(first[2]) is int  # the IntEnum went through JSON, as its replay does
        replayed = [e.value for e in store.journal(started.run.run_id).values()]
        assert replayed == first


class _Counting:
    """The one store call a step's output makes, counted."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []

    def append_output(self, run_id: str, index: int, step: str, at: Any, rows: Any) -> None:
        self.rows.extend(rows)


def test_a_step_that_prints_nothing_stores_nothing_and_one_that_prints_is_stored() -> None:
    store, clock = _Counting(), FakeClock()
    with capturing(store, "r", 0, "quiet", clock) as sink:  # type: ignore[arg-type]
        pass
    assert (sink.touched, store.rows) == (False, [])
    with capturing(store, "r", 1, "loud", clock) as sink:  # type: ignore[arg-type]
        print("hello")
    assert sink.touched
    assert store.rows == [("stdout", "hello\n")]


def test_step_options_are_found_on_functions_methods_and_decorated_callables() -> None:
    """options_of reads a function's own __dict__ (no AttributeError per step) and asks
    any other callable as before: a decorated class's instances keep their options."""
    from flowctl.retry import RetryPolicy, options_of, step

    @step(retry=RetryPolicy.make(max_attempts=3))
    def decorated() -> None:
        return None

    class Holder:
        @step(retry=RetryPolicy.make(max_attempts=5))
        def method(self) -> None:
            return None

        def plain(self) -> None:
            return None

    @step(retry=RetryPolicy.make(max_attempts=4))
    class Callable_:
        def __call__(self) -> None:
            return None

    holder = Holder()
    got = [
        options_of(fn).retry.max_attempts
        for fn in (decorated, holder.method, Callable_(), holder.plain, print, lambda: 1)
    ]
    assert got == [3, 5, 4, 1, 1, 1]
