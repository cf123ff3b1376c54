"""mapping._run_from_row builds a Run without the dataclass's __init__ (a claim decodes one
row per run): it must agree with `Run(...)` field for field, for every kind of value."""

from __future__ import annotations

import dataclasses
import json

import pytest

from flowctl.model import Run, RunStatus, from_us
from flowctl.store.mapping import _RUN_COLUMNS, _dt, _run_from_row

FIELDS = [f.name for f in dataclasses.fields(Run)]
US = 1_796_176_909_963_764


def _row(**over: object) -> list[object]:
    row: dict[str, object] = dict.fromkeys(c.strip() for c in _RUN_COLUMNS.split(","))
    row.update(
        run_id="r1", workflow="wf", target="m:f", kind="python", status="queued",
        input='{"n": 1}', created_at=US, attempt=1, max_attempts=3, exec_spent_us=0,
        fence=0, reclaims=0, cancel_requested=0, pause_requested=0, suspect=0, solo=0,
        crashes=0, priority=0,
    )  # fmt: skip
    row.update(over)
    return list(row.values())


def _by_init(r: list[object]) -> Run:
    """The Run the plain constructor makes from the same row (the reference)."""
    loads = lambda t: None if t is None else json.loads(t)  # noqa: E731
    status = lambda t: None if t is None else RunStatus(t)  # noqa: E731
    return Run(
        r[0], r[1], r[2], r[3], RunStatus(r[4]), json.loads(r[5]), from_us(r[6]),  # type: ignore[arg-type]
        _dt(r[7]), _dt(r[8]), _dt(r[9]), r[10], r[11], _dt(r[12]),  # type: ignore[arg-type]
        None if r[13] is None else r[13] / 1e6, r[14] / 1e6, loads(r[15]), loads(r[16]),  # type: ignore[operator]
        r[17], _dt(r[18]), r[19], r[20], bool(r[21]), r[22], r[23], r[24], r[25],  # type: ignore[arg-type]
        _dt(r[26]), r[27], r[28], r[29], loads(r[30]), bool(r[31]), status(r[32]),  # type: ignore[arg-type]
        _dt(r[33]), r[34], tuple(loads(r[35]) or ()), bool(r[36]), bool(r[37]), r[38],  # type: ignore[arg-type]
        _dt(r[39]), r[40], r[41], r[42], r[43], _dt(r[44]), r[45], r[46],  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(
    "over",
    [
        {},
        {
            "status": "paused", "run_at": US + 1, "started_at": 0, "finished_at": -1,
            "deadline": US * 2, "timeout_us": 1_500_000, "exec_spent_us": 250_000,
            "result": '{"a": [1, 2]}', "error": '{"type": "E"}', "lease_owner": "o",
            "lease_until": US + 15, "fence": 7, "reclaims": 2, "cancel_requested": 1,
            "cancel_reason": "why", "key": "k", "parent_run_id": "p", "schedule": "s",
            "scheduled_at": US - 3, "cwd": "/x", "source_hash": "h", "source_path": "/p",
            "backoff": '{"initial": 1}', "pause_requested": 1, "paused_status": "sleeping",
            "paused_run_at": US + 9, "current_step": "#1 'a'", "secret_keys": '["pw"]',
            "suspect": 1, "solo": 1, "crashes": 4, "step_started_at": US + 2,
            "priority": -3, "flow_key": '["wf", "ann"]', "flow_limit": 2, "held_at": US + 4,
            "flow_wait": "api", "debounce_key": "wf",
        },
        {"secret_keys": "null", "result": "null"},
    ],
)  # fmt: skip
def test_run_from_row_agrees_with_the_constructor(over: dict[str, object]) -> None:
    row = _row(**over)
    got, want = _run_from_row(row), _by_init(row)
    assert got == want
    assert list(vars(got)) == FIELDS  # the same attributes, in declaration order
    for name in FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert type(a) is type(b) and a == b, name
        if hasattr(a, "tzinfo"):
            assert a.tzinfo is b.tzinfo and a.isoformat() == b.isoformat(), name


def test_an_unknown_status_is_the_same_error() -> None:
    with pytest.raises(ValueError, match="'bogus' is not a valid RunStatus"):
        _run_from_row(_row(status="bogus"))
