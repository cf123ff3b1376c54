"""Signals by idempotency key: `flowctl signal --key KEY NAME` and Client.signal(key=...)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flowctl import Client
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import InvalidStateError, RunNotFoundError, UsageError
from flowctl.model import RunStatus
from tests.helpers import query
from tests.inproc import Ran, run_main

FLOWS = """\
from flowctl import workflow

@workflow
def followup(ctx, user: str):
    ctx.sleep("1h")
    first = ctx.wait_signal("replied", timeout="7d")
    second = ctx.wait_signal("replied", timeout="7d")
    return {"user": user, "first": first, "second": second}
"""


@pytest.fixture
def target(tmp_path: Path) -> str:
    (tmp_path / "flows.py").write_text(FLOWS)
    return f"{tmp_path / 'flows.py'}:followup"


@pytest.fixture
def flowctl(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    def call(db: str, *args: str) -> Ran:
        return run_main(monkeypatch, "--db", str(db), *args)

    return call


def signals(db: str) -> list[tuple[str, str, Any]]:
    """(run, name, payload as a value): jsonb re-spells the text it stores."""
    rows = query(db, "SELECT run_id, name, payload FROM signals ORDER BY seq")
    return [(r, n, json.loads(p)) for r, n, p in rows]


def test_cli_signal_by_key_reaches_the_keyed_run_in_order(
    db: str, target: str, flowctl: Callable[..., Ran]
) -> None:
    started = flowctl(db, "run", target, "-i", "user=42", "--key", "user-42", "--detach", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    other = flowctl(db, "run", target, "-i", "user=7", "--key", "user-7", "--detach")
    assert other.returncode == 0, other.stderr

    one = flowctl(db, "signal", "--key", "user-42", "replied", "--data", '{"text": "thanks"}')
    two = flowctl(db, "signal", "--key", "user-42", "replied", "--data", '"again"', "--json")
    assert one.returncode == 0, one.stderr
    assert f"sent 'replied' to {run_id}" in one.stdout
    assert json.loads(two.stdout)["id"] == run_id
    # Buffered in the order sent, both on the keyed run, none on the other one.
    assert signals(db) == [
        (run_id, "replied", {"text": "thanks"}),
        (run_id, "replied", "again"),
    ]


def test_cli_signal_by_key_refusals_are_one_line_and_write_nothing(
    db: str, target: str, flowctl: Callable[..., Ran]
) -> None:
    assert flowctl(db, "run", target, "-i", "user=1", "--key", "k1", "--detach").returncode == 0
    cases = [
        (["signal", "--key", "nobody", "replied"], 1, "no run has the key 'nobody'"),
        (["signal", "--key", "k1", "_internal"], 2, "reserved"),
        (["signal", "--key", "k1"], 2, "Missing argument '[RUN] NAME'"),
        (["signal", "--key", "k1", "a", "b"], 2, "signal takes NAME (with --key)"),
        (["signal", "--key", "k1", "replied", "--data", "{nope"], 2, "--data"),
    ]
    for args, code, text in cases:
        out = flowctl(db, *args)
        assert out.returncode == code, (args, out.stderr)
        assert text in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr
    assert signals(db) == []


def test_signal_by_key_to_an_ended_run_names_it(
    db: str, target: str, flowctl: Callable[..., Ran]
) -> None:
    with Client(db) as client:
        run_id = client.start(target, {"user": "3"}, key="done-3")
        client.cancel(run_id)
        with pytest.raises(RunNotFoundError, match=f"run {run_id} with it is cancelled"):
            client.signal(key="done-3", name="replied", data=1)
    out = flowctl(db, "signal", "--key", "done-3", "replied")
    assert out.returncode == 1
    assert f"no active run has the key 'done-3': run {run_id} with it is cancelled" in out.stderr
    assert signals(db) == []


def test_client_signal_by_key_buffers_and_never_ends_a_sleep(
    db: str, target: str, fake_clock: FakeClock
) -> None:
    with Client(db, clock=fake_clock) as client:
        run_id = client.start(target, {"user": "42"}, key="user-42")
        daemon = Daemon(client.store, fake_clock, DaemonConfig(concurrency=1))
        daemon.tick()
        assert client.get(run_id).status is RunStatus.SLEEPING
        sent = client.signal(key="user-42", name="replied", data={"n": 1})
        assert sent.run_id == run_id
        client.signal(key="user-42", name="replied", data={"n": 2})
        daemon.tick()
        # The signals are buffered: the sleep still stands until its recorded deadline.
        assert client.get(run_id).status is RunStatus.SLEEPING
        fake_clock.advance(3600)
        for _ in range(5):
            daemon.tick()
        run = client.get(run_id)
        assert run.status is RunStatus.COMPLETED
        assert run.result == {"user": "42", "first": {"n": 1}, "second": {"n": 2}}
        with pytest.raises(UsageError):
            client.signal(run_id, "replied", key="user-42")
        with pytest.raises(InvalidStateError):
            client.signal(run_id, "replied")
