"""Client.start_many / ops.start_many: many runs in one transaction, keys per run, and
nothing written when any input is bad (issue 14, item 4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from flowctl import Client
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import InputError, SerializationError, UsageError
from flowctl.ids import new_run_id
from flowctl.model import RunStatus
from flowctl.store import Store
from flowctl.store.records import NewRun

FLOWS = """\
from flowctl import workflow

@workflow
def double(ctx, n: int):
    return ctx.step("double", lambda: 2 * n)
"""


@pytest.fixture
def target(tmp_path: Path) -> str:
    (tmp_path / "flows.py").write_text(FLOWS)
    return f"{tmp_path / 'flows.py'}:double"


def test_a_thousand_runs_are_one_commit(db: str, target: str) -> None:
    with Client(db) as client:
        before = client.store.commit_stats().commits
        ids = client.start_many(target, [{"n": i} for i in range(1000)])
        assert client.store.commit_stats().commits - before == 1
        assert len(set(ids)) == 1000
        runs = client.store.runs_by_ids(ids)
        assert {r.status for r in runs} == {RunStatus.QUEUED}
        assert sorted(r.input["n"] for r in runs) == list(range(1000))
        assert client.store.count_by_status()[RunStatus.QUEUED] == 1000


def test_the_runs_it_queues_run_to_completion(db: str, target: str) -> None:
    clock = FakeClock()
    with Client(db, clock=clock) as client:
        ids = client.start_many(target, [{"n": i} for i in range(5)])
        Daemon(client.store, clock, DaemonConfig(concurrency=1)).tick()
        assert [client.get(i).result for i in ids] == [0, 2, 4, 6, 8]


def test_keys_hold_per_run_across_calls_and_within_one(db: str, target: str) -> None:
    with Client(db) as client:
        first = client.start_many(target, [{"n": 1}, {"n": 2}], keys=["a", "b"])
        again = client.start_many(target, [{"n": 9}, {"n": 3}, {"n": 4}], keys=["b", "c", "c"])
        assert again[0] == first[1]  # known key: the first run, not a new one
        assert again[2] == again[1]  # the same key twice in one call: one run
        assert client.get(again[0]).input == {"n": 2}
        assert len(client.list(limit=100)) == 3


def test_one_bad_input_writes_nothing_and_names_its_position(db: str, target: str) -> None:
    with Client(db) as client:
        with pytest.raises(InputError, match=r"input #3: .*needs input 'n'"):
            client.start_many(target, [{"n": 1}, {"n": 2}, {}, {"n": 4}])
        with pytest.raises(InputError, match=r"input #2 is list"):
            client.start_many(target, [{"n": 1}, [1]])  # type: ignore[list-item]
        with pytest.raises(SerializationError):
            client.start_many(target, [{"n": 1}, {"n": object()}])
        with pytest.raises(UsageError, match="2 keys for 1 inputs"):
            client.start_many(target, [{"n": 1}], keys=["a", "b"])
        assert client.list() == []
        assert client.store.count_by_status()[RunStatus.QUEUED] == 0


def test_the_runs_returned_are_the_rows_stored_in_order_with_created_flags(
    db: str, target: str
) -> None:
    """ops.start_many hands back each run as stored (read back in bulk on SQLite), in the
    order of the inputs, a reused key's run marked not created."""
    from flowctl import ops

    clock = FakeClock()
    with Client(db, clock=clock) as client:
        (old,) = ops.start_many(client.store, target, [{"n": 0}], clock=clock, keys=["k"])
        inputs = [{"n": i} for i in range(1, 700)] + [{"n": 99}]
        keys = [None] * 699 + ["k"]
        started = ops.start_many(client.store, target, inputs, clock=clock, keys=keys)
        assert [s.created for s in started] == [True] * 699 + [False]
        assert started[-1].run == old.run
        assert [s.run.input for s in started[:-1]] == inputs[:-1]
        for s in started:
            assert s.run == client.store.get_run(s.run.run_id)


def test_a_created_run_is_handed_back_as_a_read_of_it_gives_it(store: Store) -> None:
    """The SQLite store builds the created run from what it wrote instead of reading the
    row back: every field must be what a read gives, in a read's types (UTC instants,
    JSON-normalised values, the definition row's texts, the stored timeout)."""
    now = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    paris = timezone(timedelta(hours=1))

    def new(**fields: Any) -> NewRun:
        base: dict[str, Any] = {
            "run_id": new_run_id(),
            "workflow": "wf",
            "target": "flows.py:wf",
            "kind": "python",
            "input": {"n": 1},
        }
        return NewRun(**{**base, **fields})

    news = [
        new(),
        new(
            input={"t": (1, 2), "nested": {"a": [None, True, 1.5]}},  # a tuple reads as a list
            source="def wf(ctx): ...",
            source_hash="h1",
            source_path="/x/flows.py",
            cwd="/x",
            run_at=now + timedelta(hours=2),
            max_attempts=7,
            backoff={"initial": 1.0, "factor": 2},
            deadline=datetime(2026, 3, 1, 14, 0, tzinfo=paris),  # reads back as UTC
            timeout=0.1 + 0.2,  # a float that does not survive microseconds exactly
            key="key-fresh",
            schedule="nightly",
            scheduled_at=datetime(2026, 3, 1, 13, 0, tzinfo=paris),
            secret_keys=("token", "api"),
            notify={"on": ["dead"]},
        ),
        new(run_at=now + timedelta(days=1), deadline=now + timedelta(hours=1)),  # parked early
        new(cwd=""),  # one definition with cwd NULL: the row's value is handed back
        new(parent_run_id="parentrun0000000"),
    ]
    one = new(key="key-single", timeout=1e-7)
    (single, created) = store.create_run(one, now)
    assert created and single == store.get_run(one.run_id)
    made = store.create_runs(news, now)
    assert all(created for _, created in made)
    for run, _ in made:
        assert run == store.get_run(run.run_id)
        assert repr(run) == repr(store.get_run(run.run_id))  # same types and time zones too
    again = store.create_runs([new(key="key-fresh")], now)  # the key's run, not a new one
    assert again == [(made[1][0], False)]
