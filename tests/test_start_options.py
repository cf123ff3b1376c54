"""A run's start options are resolved and checked once, by ops.start_options, for every
front end: the CLI's text, the HTTP API's JSON values and the Client's Python values give
the same options, and a bad one is a UsageError about its field, worded without a CLI
flag (each front end spells the field itself: tests/test_serve.py shows both spellings).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.client import Client
from flowctl.clock import FakeClock
from flowctl.errors import DurationError, InputError, UsageError
from flowctl.model import local_text
from flowctl.store import Store

NOW = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
PAST = local_text(NOW)  # a deadline refused as passed, said as people read times
FLOW = """
from flowctl import workflow

@workflow
def hello(ctx, name: str):
    return "hi " + name
"""


@pytest.fixture
def flow(tmp_path: Path) -> str:
    (tmp_path / "flows.py").write_text(FLOW)
    return f"{tmp_path / 'flows.py'}:hello"


@pytest.mark.parametrize(
    ("cli", "http", "python"),
    [
        ({"delay": "10m"}, {"delay": 600}, {"delay": timedelta(minutes=10)}),
        (
            {"at": "2026-03-27T13:00:00Z"},
            {"at": "2026-03-27T14:00:00+01:00"},
            {"at": NOW.replace(hour=13)},
        ),
        ({"deadline": "2h"}, {"deadline": 7200}, {"deadline": timedelta(hours=2)}),
        (
            {"deadline": "2026-03-27T14:00Z"},
            {"deadline": 7200.0},
            {"deadline": NOW.replace(hour=14)},
        ),
        ({"timeout": "30s"}, {"timeout": 30}, {"timeout": timedelta(seconds=30)}),
        ({"max_attempts": 5}, {"max_attempts": 5}, {"max_attempts": 5}),
    ],
)
def test_text_json_and_python_values_resolve_to_the_same_options(
    cli: dict[str, object], http: dict[str, object], python: dict[str, object]
) -> None:
    clock = FakeClock(NOW)
    resolved = [ops.start_options(clock, **given) for given in (cli, http, python)]  # type: ignore[arg-type]
    assert resolved[0] == resolved[1] == resolved[2] != ops.StartOptions()


@pytest.mark.parametrize(
    ("given", "field", "message"),
    [
        ({"delay": "soon"}, "in", "invalid duration 'soon': use seconds (90)"),
        ({"delay": -5}, "in", "in must not be negative, got -5: give a duration from now"),
        ({"delay": "5m", "at": "now"}, "at", "give in or at, not both"),
        ({"at": "tomorrowish"}, "at", "at 'tomorrowish' is not a time: use ISO-8601"),
        ({"at": "2026-03-27T11:00:00Z"}, "at", "at '2026-03-27T11:00:00Z' is in the past ("),
        ({"at": 5}, "at", "at must be an ISO-8601 time like 2026-12-01T09:00:00Z, or now; got int"),
        ({"deadline": "whenever"}, "deadline", "deadline 'whenever' is neither a duration"),
        ({"deadline": NOW}, "deadline", f"deadline {PAST} is already in the past: give a"),
        ({"deadline": "0s"}, "deadline", f"deadline {PAST} is already in the past: give a"),
        ({"deadline": -60}, "deadline", "deadline must not be negative, got -60"),
        ({"deadline": [1]}, "deadline", "invalid duration [1]"),
        (
            {"deadline": "9999-01-01T00:00Z"},
            "deadline",
            "deadline '9999-01-01T00:00Z' is out of range",
        ),
        ({"timeout": "0s"}, "timeout", "timeout must be a positive duration, got '0s'"),
        ({"timeout": -1.5}, "timeout", "timeout must not be negative, got -1.5"),
        ({"timeout": True}, "timeout", "invalid duration True"),
        ({"max_attempts": 0}, "max_attempts", "max_attempts must be a whole number from 1 to"),
        ({"max_attempts": True}, "max_attempts", "max_attempts must be a whole number from 1 to"),
        ({"max_attempts": "3"}, "max_attempts", "max_attempts must be a whole number from 1 to"),
    ],
)
def test_a_bad_option_is_a_one_line_usage_error_about_its_field(
    given: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        ops.start_options(FakeClock(NOW), **given)  # type: ignore[arg-type]
    error = caught.value
    assert error.field == field
    assert str(error).startswith(message) and "\n" not in str(error)
    assert "--" not in str(error) and error.spelled(lambda f: f) == str(error)  # no CLI flag
    said = error.spelled(lambda f: f"--{f.replace('_', '-')}")
    if isinstance(error, DurationError):  # a duration's own words name no field
        assert said == str(error)
    else:  # the CLI spells the field as its flag
        assert said.count("--") >= 1 and f"--{field.replace('_', '-')}" in said


def test_the_at_field_is_spelled_wherever_the_message_names_it() -> None:
    with pytest.raises(UsageError) as caught:
        ops.start_options(FakeClock(NOW), at="2026-03-27T11:00:00Z")
    said = caught.value.spelled(lambda f: f"--{f}")
    assert said.startswith("--at '2026-03-27T11:00:00Z' is in the past (")
    assert said.endswith("; give a later time, or --at now")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "key must not be empty: give the name this run is known by, e.g. user-42"),
        ("k" * 1001, "key is 1,001 characters long: at most 1,000 are accepted"),
        (42, "key must be text, got int"),
    ],
)
def test_a_bad_key_is_about_the_key_field(key: object, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        ops.check_key(key)
    assert (caught.value.field, str(caught.value)) == ("key", message)


def test_the_client_is_refused_by_the_same_check(db: str, flow: str) -> None:
    with Client(db, clock=FakeClock(NOW)) as client:
        with pytest.raises(UsageError) as caught:
            client.start(flow, {"name": "ana"}, deadline=NOW - timedelta(seconds=1))
        assert caught.value.field == "deadline"
        # A negative delay is refused as the CLI and the API refuse it (it used to mean now).
        with pytest.raises(UsageError, match=r"^in must not be negative"):
            client.start(flow, {"name": "ana"}, delay=-5)
        with pytest.raises(UsageError) as many:
            client.start_many(flow, [{"name": "ana"}], timeout=0)
        assert many.value.field == "timeout"
        assert client.list() == []


def test_start_is_start_many_of_one(store: Store, flow: str) -> None:
    clock = FakeClock(NOW)
    options = ops.start_options(clock, deadline="2h", timeout="30s", max_attempts=2)
    one = ops.start(store, flow, {"name": "ana"}, clock=clock, options=options).run
    (many,) = ops.start_many(store, flow, [{"name": "ana"}], clock=clock, options=options)
    shape = ("workflow", "input", "deadline", "timeout", "max_attempts", "run_at", "status")
    assert [getattr(one, a) for a in shape] == [getattr(many.run, a) for a in shape]
    # One run's bad input is said as itself; one of many by its position.
    with pytest.raises(InputError, match=r"^workflow hello needs input 'name'"):
        ops.start(store, flow, {}, clock=clock)
    with pytest.raises(InputError, match=r"^input #1: workflow hello needs input 'name'"):
        ops.start_many(store, flow, [{}], clock=clock)
    with pytest.raises(TypeError, match="not both"):
        ops.start(store, flow, {"name": "x"}, clock=clock, options=options, max_attempts=3)
    assert len(store.list_runs()) == 2


def test_a_known_key_returns_its_run_before_the_target_is_loaded(
    store: Store, flow: str, tmp_path: Path
) -> None:
    clock = FakeClock(NOW)
    first = ops.start(store, flow, {"name": "ana"}, clock=clock, key="user-42").run
    (tmp_path / "flows.py").unlink()  # the target is gone, the keyed run stays the answer
    again = ops.start(store, flow, {}, clock=clock, key="user-42")
    assert (again.run.run_id, again.created) == (first.run_id, False)
