"""The NUL character (U+0000) in a value flowctl stores, on both stores.

SQLite keeps it. PostgreSQL's text and jsonb types refuse it: a value stored in one of those
(an input, a signal name) is refused with one SerializationError line saying so and
nothing is written, as for a value that is not JSON; never a driver traceback. A result or
a step's value is json text there (escaped, `\u0000`), kept on both stores.

Found running the HTTP API against PostgreSQL (tests/test_serve_fuzz.py draws such text):
before, a NUL in a run's input was a traceback (a 500) with psycopg's UntranslatableCharacter,
in a signal name psycopg's DataError.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.errors import SerializationError, UsageError
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """\
from flowctl import workflow


def nul():
    return "a\\x00b"


@workflow
def waits(ctx, text: str = "", nested: object = None):
    return ctx.wait_signal("go", timeout="1h")


@workflow
def makes(ctx):
    return ctx.step("nul", nul)


@workflow
def lone(ctx, where: str = "result"):
    # A lone surrogate where the store would take it as text: a result, a call name, a key.
    if where == "result":
        return ctx.step("bad", lambda: "\\ud800")
    if where == "name":
        return ctx.step("n\\ud800", lambda: 1)
    if where == "signal":
        return ctx.wait_signal("s\\ud800", timeout="1h")
    ctx.publish("k\\ud800", 1)
    return 0
"""

NUL = "a\x00b"


def on_postgres(store: Store) -> bool:
    return type(store).__name__ == "PostgresStore"


@pytest.fixture
def flows(flows_dir: Path) -> str:
    (flows_dir / "nul_flows.py").write_text(FLOWS)
    return str(flows_dir)


def test_an_input_or_a_signal_with_a_nul_is_kept_on_sqlite_and_refused_whole_on_postgres(
    store: Store, fake_clock: FakeClock, flows: str
) -> None:
    run = ops.start(store, "nul_flows.py:waits", {}, clock=fake_clock, cwd=flows).run
    nul_run = {"text": NUL, "nested": [{"k": NUL}]}
    if not on_postgres(store):
        kept = ops.start(store, "nul_flows.py:waits", nul_run, clock=fake_clock, cwd=flows).run
        assert store.get_run(kept.run_id).input == nul_run
        ops.send_signal(store, run.run_id, "go", {"why": NUL}, clock=fake_clock)
        assert [p for _, p, _ in store.pending_signals(run.run_id)] == [{"why": NUL}]
        return
    before = len(store.list_runs()), store.timeline(run.run_id)
    with pytest.raises(SerializationError, match=r"NUL character \(\\u0000\)") as refused:
        ops.start(store, "nul_flows.py:waits", nul_run, clock=fake_clock, cwd=flows)
    assert "\n" not in str(refused.value)
    with pytest.raises(SerializationError, match="NUL"):
        ops.send_signal(store, run.run_id, "go", {"why": NUL}, clock=fake_clock)
    with pytest.raises(UsageError, match="control character"):  # refused on either backend
        ops.send_signal(store, run.run_id, f"g{NUL}o", 1, clock=fake_clock)
    assert (len(store.list_runs()), store.timeline(run.run_id)) == before
    assert store.pending_signals(run.run_id) == []


def test_a_step_returning_a_nul_completes_on_both_stores(
    store: Store, fake_clock: FakeClock, daemon: Daemon, flows: str
) -> None:
    """A result is stored as the JSON text it is (PostgreSQL's json, as SQLite's text), so
    an escaped NUL in it is kept; jsonb, which refused it, is not used for results."""
    run = ops.start(store, "nul_flows.py:makes", {}, clock=fake_clock, cwd=flows).run
    daemon.tick()
    done = store.get_run(run.run_id)
    assert (done.status, done.result) == (RunStatus.COMPLETED, NUL)
    assert [e.kind for e in store.journal(run.run_id).values()] == ["step"]


def test_a_lone_surrogate_is_refused_as_no_text_and_a_surrogate_pair_is_kept() -> None:
    from flowctl.errors import SerializationError
    from flowctl.store.records import dumps

    with pytest.raises(SerializationError) as exc:
        dumps({"name": ["ok", "\ud800"]}, "the input")
    assert str(exc.value).startswith(
        "the input holds a lone UTF-16 surrogate ('\\ud800'), which is not text"
    )
    assert dumps({"name": "\U0001f600"}) == '{"name":"\\ud83d\\ude00"}'
    assert dumps({"path": "C:\\udir"}) == '{"path":"C:\\\\udir"}'  # a backslash, no surrogate


@pytest.mark.parametrize("where", ["result", "name", "signal", "publish"])
def test_a_lone_surrogate_a_workflow_makes_ends_its_run_dead_at_once_not_its_worker(
    store: Store, fake_clock: FakeClock, daemon: Daemon, flows: str, where: str
) -> None:
    # It used to fail inside the store's write: the worker crashed five times over about
    # 75 s and the run ended as poison.
    run = ops.start(store, "nul_flows.py:lone", {"where": where}, clock=fake_clock, cwd=flows).run
    daemon.tick()
    done = store.get_run(run.run_id)
    assert done.status is RunStatus.DEAD, (done.status, done.error)
    assert done.error is not None and done.error["type"] == "SerializationError"
    assert "lone UTF-16 surrogate" in str(done.error["message"])
    assert done.attempt == 1


def test_json_a_user_gives_with_a_lone_surrogate_is_refused() -> None:
    from flowctl.errors import InputError
    from flowctl.limits import loads_json

    assert loads_json('{"a": "\\ud83d\\ude00"}', "x") == {"a": "\U0001f600"}
    for text in ('{"a": "\\ud800"}', '["\\uDFFF"]', '"x\\ud83d"'):
        with pytest.raises(InputError, match="lone UTF-16 surrogate"):
            loads_json(text, "--input")
