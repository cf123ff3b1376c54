"""Flow control's declarations (issue 37, items 1, 4, 7): parsed where they are written,
keys rendered from a run's input when it is created, and every mistake one line."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowctl import workflow
from flowctl.errors import InputError, UsageError
from flowctl.flow.keys import key_parts, render
from flowctl.flow.spec import (
    Concurrency,
    flow_fields,
    parse_concurrency,
    parse_debounce,
    parse_rate,
)
from flowctl.flow.tokens import LimitSpec, decide, period_text, rate_wait


def test_concurrency_is_a_count_or_a_limit_per_key() -> None:
    assert parse_concurrency(2) == Concurrency(2)
    spec = parse_concurrency({"limit": 1, "key": "${{ input.user }}"})
    assert spec == Concurrency(1, "${{ input.user }}")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "from 1 to"),
        (-1, "from 1 to"),
        ("2", "whole number"),
        ({"key": "${{ input.user }}"}, "needs a limit"),
        ({"limit": 1, "key": "user"}, "must use the input"),
        ({"limit": 1, "key": "${{ steps.a }}"}, "not an input path"),
        ({"limit": 1, "per": "x"}, "unknown field 'per'"),
    ],
)
def test_a_bad_concurrency_is_one_line(value: Any, words: str) -> None:
    with pytest.raises(UsageError, match=words) as caught:
        parse_concurrency(value)
    assert "\n" not in str(caught.value)


def test_a_decorated_workflow_checks_its_flow_control_when_defined() -> None:
    with pytest.raises(UsageError, match="concurrency must be a whole number"):
        workflow(concurrency=0)
    with pytest.raises(UsageError, match=r"debounce\.period"):
        workflow(debounce={"period": "soon"})


def test_keys_render_from_the_input_or_refuse_it() -> None:
    assert render("${{ input.user }}", {"user": "zed"}, "k") == "zed"
    assert render("${{ input.org.id }}-${{ input.n }}", {"org": {"id": 7}, "n": 1}, "k") == "7-1"
    with pytest.raises(
        InputError, match=r"concurrency.key .* does not render: the input has no input.user"
    ):
        flow_fields("wf", parse_concurrency({"limit": 1, "key": "${{ input.user }}"}), None, {})
    fields = flow_fields(
        "wf",
        parse_concurrency({"limit": 2, "key": "${{ input.user }}"}),
        parse_debounce({"period": "2s", "key": "${{ input.user }}"}),
        {"user": "zed"},
    )
    assert key_parts(fields["flow_key"]) == ("wf", "user", "zed")
    assert fields["flow_limit"] == 2 and fields["debounce_us"] == 2_000_000
    assert flow_fields("wf", parse_concurrency(3), None, {})["flow_key"] == "wf"


def test_rates_parse_as_n_per_period() -> None:
    assert parse_rate("100/1m").n == 100
    assert parse_rate("100/1m").period == timedelta(minutes=1)
    assert parse_rate("5/s").period == timedelta(seconds=1)
    for bad in ("2/0s", "many", "0/1s", "1/", "/1s", "3/never"):
        with pytest.raises(UsageError):
            parse_rate(bad)


def test_token_times_never_allow_more_than_n_per_window() -> None:
    assert rate_wait([], 2, 10) is None
    assert rate_wait([1], 2, 10) is None
    assert rate_wait([1, 4], 2, 10) == 11
    assert rate_wait([1, 4, 6], 2, 10) == 14
    spec = LimitSpec("api", 1, 2, 10)
    assert decide(spec, [50], [], 5).why == "concurrency"
    assert decide(spec, [], [1, 4], 5).until_us == 11
    assert decide(spec, [], [1, 4], 11).until_us is None
    assert period_text(60_000_000) == "1m" and period_text(1_500_000) == "1500ms"
