"""What `run`, `Client.start_many` and `ls --search` refuse before anything is written: a
blank or over-long idempotency key, search text longer than any id, key or name
(found by a new user's pass over the CLI and the HTTP API)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.errors import UsageError
from flowctl.limits import MAX_KEY, MAX_SEARCH
from flowctl.store import Store

FLOW = """
from flowctl import workflow

@workflow
def hello(ctx, name: str = "x"):
    return ctx.step("greet", lambda: "hi " + name)
"""
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)


@pytest.fixture
def flow(tmp_path: Path) -> str:
    path = tmp_path / "flows.py"
    path.write_text(FLOW)
    return f"{path}:hello"


@pytest.mark.parametrize("key", ["", "   ", "k" * (MAX_KEY + 1)])
def test_a_blank_or_huge_key_is_refused_and_nothing_is_written(
    store: Store, flow: str, key: str
) -> None:
    clock = FakeClock(START)
    with pytest.raises(UsageError, match=r"^key (must not be empty|is [0-9,]+ characters)"):
        ops.start(store, flow, {}, clock=clock, key=key)
    with pytest.raises(UsageError, match="key #2 "):
        ops.start_many(store, flow, [{}, {}], clock=clock, keys=["ok", key])
    assert store.list_runs(limit=10) == []
    # The longest key accepted is a key like any other.
    started = ops.start(store, flow, {}, clock=clock, key="k" * MAX_KEY)
    assert ops.start(store, flow, {}, clock=clock, key="k" * MAX_KEY).run == started.run


def test_search_text_longer_than_any_id_key_or_name_is_refused(store: Store, flow: str) -> None:
    ops.start(store, flow, {}, clock=FakeClock(START), key="user-42")
    too_long = "x" * (MAX_SEARCH + 1)
    for call in (ops.list_runs, ops.count_runs, ops.count_listed):
        with pytest.raises(UsageError, match=f"at most {MAX_SEARCH:,} are accepted"):
            call(store, search=too_long)
    assert [r.key for r in ops.list_runs(store, search="user-42")] == ["user-42"]
    assert ops.list_runs(store, search="x" * MAX_SEARCH) == []  # the longest accepted
