"""`flowctl daemon --workers N`: the wire codec, and a real daemon whose handlers run in
two worker processes making every kind of durable call, on both stores (crash tests: tests/crash/
test_workers_kill9.py)."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import logged_daemon, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.errors import DiskFullError, SerializationError
from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus
from flowctl.store import open_store
from flowctl.store.records import Claim, Lease
from flowctl.transitions import ErrorKind
from flowctl.workers.wire import (
    decode,
    dumps_line,
    encode,
    error_message,
    loads_line,
    rebuild_error,
)
from flowctl.workers.worker import Channel

ROOT = Path(__file__).resolve().parent.parent
WHEN = datetime(2026, 3, 29, 0, 59, 1, 123456, tzinfo=UTC)


def roundtrip(value: object) -> object:
    return decode(loads_line(dumps_line({"v": encode(value)}))["v"])


def test_the_values_the_engine_and_store_exchange_cross_the_wire_unchanged() -> None:
    run = Run(
        "r1",
        "wf",
        "flows.py:wf",
        "python",
        RunStatus.RUNNING,
        {"user": 42, "$t": "not a tag", "nested": [{"$dt": 1}]},
        WHEN,
        run_at=WHEN,
        secret_keys=("token",),
        error={"kind": "raised"},
    )
    claim = Claim(run, Lease("r1", 7, "host/1/2/abcd"), woke_from=RunStatus.SLEEPING)
    entry = JournalEntry("r1", 3, CallKind.SLEEP, "nap", EntryState.PENDING, None, wake_at=WHEN)
    for value in (claim, entry, {0: entry, 1: None}, ("a", 1, None), [WHEN, 1.5, True]):
        assert roundtrip(value) == value
    back = roundtrip(claim)
    assert isinstance(back, Claim) and back.run.status is RunStatus.RUNNING
    assert back.run.created_at.tzinfo is not None and back.run.secret_keys == ("token",)
    # Another StrEnum (an error's kind) travels as its text, which compares equal.
    assert roundtrip({"kind": ErrorKind.CANCELLED}) == {"kind": "cancelled"}


# What a user value can be, as the store would take it, and what the engine hands the
# store besides: tuples, datetimes, statuses, keys that look like the codec's own tags.
_KEYS = st.text(max_size=4) | st.sampled_from(["$t", "$dt", "$e", "$tup", "$map", "f", "v"])
_LEAF = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(list(RunStatus))
    | st.datetimes(timezones=st.just(UTC))
)
_VALUES = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_KEYS, inner, max_size=4)
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_any_value_crosses_the_wire_as_itself_with_its_types(value: object) -> None:
    back = roundtrip(value)
    assert back == value
    assert _shape(back) == _shape(value)  # a tuple stays a tuple, a status a status


def _shape(value: object) -> object:
    """The value with each part's exact type beside it (== alone says 1 == True, (1,) != [1])."""
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), type(k).__name__, _shape(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(v) for v in value])
    return (type(value).__name__, value)


def test_what_json_cannot_carry_is_refused_before_it_is_sent() -> None:
    with pytest.raises(TypeError):
        encode({1, 2})
    with pytest.raises(ValueError):
        dumps_line({"v": encode(float("nan"))})
    ours, theirs = __import__("socket").socketpair()
    try:
        channel = Channel(ours)
        entry = JournalEntry("r1", 0, CallKind.STEP, "a set", EntryState.DONE, {1, 2})
        with pytest.raises(SerializationError, match="result of 'a set' is not JSON"):
            channel.call("record_entry", (Lease("r1", 1, "o"), entry, WHEN), {})
        theirs.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.recv(1)  # nothing was sent
    finally:
        ours.close()
        theirs.close()


def test_a_store_error_is_raised_again_in_the_worker_as_its_own_type() -> None:
    err = rebuild_error(error_message(DiskFullError("database or disk is full: 0.1 MB free")))
    assert isinstance(err, DiskFullError) and "0.1 MB free" in str(err)
    other = rebuild_error(error_message(KeyError("x")))
    assert type(other).__name__ == "DatabaseError" and "KeyError" in str(other)


def two_worker_daemon(db: str, tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """A real `flowctl daemon --workers 2` on `db`, its output in tmp_path/daemon.log."""
    return logged_daemon(db, tmp_path / "daemon.log", "--workers", "2", *args)


def test_a_daemon_with_two_worker_processes_runs_every_durable_call(
    db: str, tmp_path: Path
) -> None:
    clock = SystemClock()
    with open_store(db) as store:
        started = [
            ops.start(
                store, "tests/workers_flows.py:everything", {"x": i}, clock=clock, cwd=str(ROOT)
            )
            for i in range(4)
        ]
        bad = ops.start(store, "tests/workers_flows.py:not_json", {}, clock=clock, cwd=str(ROOT))
        bad_result = ops.start(
            store, "tests/workers_flows.py:not_json_result", {}, clock=clock, cwd=str(ROOT)
        )
    ids = [s.run.run_id for s in started]
    proc = two_worker_daemon(db, tmp_path)
    try:
        with open_store(db) as store:
            wait_until(
                lambda: all(store.get_run(r).status is RunStatus.WAITING for r in ids), timeout=30
            )
            for i, run_id in enumerate(ids):
                ops.send_signal(store, run_id, "go", {"i": i}, clock=clock)
            wait_until(lambda: all(store.get_run(r).status.is_terminal for r in ids), timeout=30)
            runs = [store.get_run(r) for r in ids]
            dead = store.get_run(bad.run.run_id)
            dead_result = store.get_run(bad_result.run.run_id)
            published = store.published(ids[0])
            output = store.output(ids[0])
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    for i, run in enumerate(runs):
        assert run.status is RunStatus.COMPLETED, run.error
        result = run.result
        assert result["a"] == i + 1 and result["doubled"] == 2 * (i + 1)
        assert result["version"] == 2 and result["signal"] == {"i": i} and result["tz"] == "UTC"
        assert result["keys"] == ["$t", "1", "pid", "text"]
        assert result["pid"] != proc.pid  # the step ran in a worker process
    assert len({r.result["pid"] for r in runs}) <= 2  # two worker processes ran them all
    assert published["progress"][0] == {"a": 1}
    assert "step says hello" in "".join(chunk.text for chunk in output)
    assert dead.status is RunStatus.DEAD and dead.error is not None
    assert dead.error["type"] == "SerializationError"
    assert dead_result.status is RunStatus.DEAD and dead_result.error is not None
    assert "not JSON-serialisable" in dead_result.error["message"]
    text = (tmp_path / "daemon.log").read_text()
    assert "workers 2" in text and "Traceback" not in text
    # At exit, where the CPU went: the steps ran in the workers, so they spent some.
    split = re.search(r"CPU ([\d.]+) s in this process, ([\d.]+) s in 2 worker process", text)
    assert split is not None, text[-500:]
    assert float(split[1]) > 0 and float(split[2]) > 0


@pytest.mark.parametrize("runner", [("--workers", "2"), ()], ids=["two-workers", "one-process"])
def test_parents_signalled_while_their_children_run_in_other_workers_all_finish(
    db: str, tmp_path: Path, runner: tuple[str, ...]
) -> None:
    # Each parent waits for a child that another worker process ends at a random moment,
    # and is signalled as soon as it waits (a wake, so a replay that races the child's
    # end). A child end that finds its parent running must still leave it due when it parks.
    # In one process too: the batch runner on SQLite, threads on PostgreSQL.
    n = 40
    clock = SystemClock()
    proc = logged_daemon(db, tmp_path / "daemon.log", *runner, "-c", "8")
    try:
        with open_store(db) as store:
            ids = [
                ops.start(
                    store, "tests/workers_flows.py:parent", {"x": i}, clock=clock, cwd=str(ROOT)
                ).run.run_id
                for i in range(n)
            ]
            unsignalled = dict(zip(ids, range(n), strict=True))

            def signalled_once_waiting() -> bool:
                for run_id in list(unsignalled):
                    run = store.get_run(run_id)
                    if run.status is RunStatus.WAITING or run.status.is_terminal:
                        ops.send_signal(store, run_id, "go", unsignalled.pop(run_id), clock=clock)
                return not unsignalled

            wait_until(signalled_once_waiting, timeout=60, interval=0.001)
            wait_until(lambda: all(store.get_run(r).status.is_terminal for r in ids), timeout=60)
            runs = [store.get_run(r) for r in ids]
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert [r.status for r in runs] == [RunStatus.COMPLETED] * n
    assert [r.result for r in runs] == [{"a": 2 * i, "b": 4 * i, "got": i} for i in range(n)]
