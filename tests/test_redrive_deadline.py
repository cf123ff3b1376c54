"""`flowctl redrive` and a run's deadline (issue 39, item 5).

A redrive used to clear the deadline, so a run dead of DeadlineExceededError ran on with no
deadline at all. Now a redriven run keeps its own deadline; one that has passed is refused
in one line unless `--deadline` gives a new one or `--no-deadline` drops it. The CLI runs
in-process on a FakeClock, with a daemon ticked on the same clock and database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import Client, cli, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import UsageError
from flowctl.model import RunStatus
from flowctl.store import Store, open_store

FLOWS = """
from flowctl import workflow


@workflow
def nap(ctx):
    ctx.sleep("2h")
    return "rested"


@workflow
def boom(ctx):
    ctx.step("explode", lambda: 1 / 0)
"""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def project(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "flows.py").write_text(FLOWS)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    return folder


@pytest.fixture
def store(db: str, project: Path) -> Iterator[Store]:
    opened = open_store(db, create=True)
    yield opened
    opened.close()


@pytest.fixture
def invoke(db: str, clock: FakeClock, project: Path) -> Any:
    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def dead_past_deadline(invoke: Any, store: Store, clock: FakeClock) -> str:
    """A run of `nap` (a 2h sleep) under a 1h deadline, dead of it."""
    started = invoke("run", "flows.py:nap", "--deadline", "1h", "--json")
    run_id = str(json.loads(started.stdout)["id"])
    clock.advance(timedelta(hours=1, seconds=1))
    Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
    run = store.get_run(run_id)
    assert run.status is RunStatus.DEAD
    assert run.error is not None and run.error["type"] == "DeadlineExceededError"
    return run_id


def test_redrive_past_the_deadline_is_refused_in_one_line_and_writes_nothing(
    invoke: Any, store: Store, clock: FakeClock
) -> None:
    run_id = dead_past_deadline(invoke, store, clock)
    before = (store.get_run(run_id), len(store.timeline(run_id)))
    out = invoke("redrive", run_id, code=2)
    assert out.stderr.count("\n") == 1, out.stderr
    assert f"run {run_id} is past its deadline" in out.stderr
    assert "give --deadline" in out.stderr and "--no-deadline" in out.stderr
    assert (store.get_run(run_id), len(store.timeline(run_id))) == before


def test_redrive_with_a_new_deadline_runs_under_it(
    invoke: Any, store: Store, clock: FakeClock
) -> None:
    run_id = dead_past_deadline(invoke, store, clock)
    out = invoke("redrive", run_id, "--deadline", "3h", "--json")
    (shown,) = json.loads(out.stdout)
    new = clock.now() + timedelta(hours=3)
    assert shown["status"] == "queued"
    assert store.get_run(run_id).deadline == new
    assert store.timeline(run_id)[-1].data["deadline"] == new.isoformat(timespec="microseconds")
    # It runs on under the new deadline: back to its recorded 2h sleep (due at 14:00, which
    # the old deadline cut at 13:00), then it completes.
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
    daemon.tick()
    assert store.get_run(run_id).run_at == datetime(2026, 3, 27, 14, 0, tzinfo=UTC)
    clock.advance(timedelta(hours=1))
    daemon.tick()
    assert store.get_run(run_id).status is RunStatus.COMPLETED


def test_redrive_with_no_deadline_drops_it(invoke: Any, store: Store, clock: FakeClock) -> None:
    run_id = dead_past_deadline(invoke, store, clock)
    out = invoke("redrive", run_id, "--no-deadline")
    assert out.stdout.startswith(f"redriven {run_id} (nap): queued")
    run = store.get_run(run_id)
    assert (run.status, run.deadline) == (RunStatus.QUEUED, None)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--deadline", "2h", "--no-deadline"], "give --deadline or --no-deadline, not both"),
        (["--deadline", "whenever"], "--deadline 'whenever'"),
        (["--deadline", "2020-01-01T00:00:00Z"], "is already in the past"),
    ],
)
def test_bad_redrive_options_are_refused_before_anything_is_written(
    invoke: Any, store: Store, clock: FakeClock, args: list[str], needle: str
) -> None:
    run_id = dead_past_deadline(invoke, store, clock)
    out = invoke("redrive", run_id, *args, code=2)
    assert needle in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert store.get_run(run_id).status is RunStatus.DEAD


def test_a_run_dead_before_its_deadline_keeps_it_when_redriven(
    invoke: Any, store: Store, clock: FakeClock
) -> None:
    started = invoke("run", "flows.py:boom", "--deadline", "1d", "--max-attempts", "1", code=1)
    run_id = store.list_runs(limit=1)[0].run_id
    assert "ZeroDivisionError" in started.stderr
    deadline = store.get_run(run_id).deadline
    assert deadline == datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    invoke("redrive", run_id)
    run = store.get_run(run_id)
    assert (run.status, run.deadline) == (RunStatus.QUEUED, deadline)  # it used to be None
    assert "deadline" not in store.timeline(run_id)[-1].data  # unchanged: nothing to say


def test_redrive_all_leaves_runs_past_their_deadline_and_says_so(
    invoke: Any, store: Store, clock: FakeClock
) -> None:
    late = dead_past_deadline(invoke, store, clock)
    invoke("run", "flows.py:boom", "--max-attempts", "1", code=1)
    other = next(r.run_id for r in store.list_runs(limit=5) if r.run_id != late)
    out = invoke("redrive", "--all")
    assert f"redriven {other} (boom): queued" in out.stdout and late not in out.stdout
    assert "1 dead run(s) past their deadline left dead" in out.stderr
    assert store.get_run(late).status is RunStatus.DEAD
    again = invoke("redrive", "--all", "--deadline", "1h")
    assert f"redriven {late} (nap): queued" in again.stdout
    assert store.get_run(late).deadline == clock.now() + timedelta(hours=1)


def test_client_redrive_takes_the_same_options(
    invoke: Any, store: Store, clock: FakeClock, db: str
) -> None:
    run_id = dead_past_deadline(invoke, store, clock)
    client = Client(db, clock=clock)
    try:
        with pytest.raises(UsageError) as refused:
            client.redrive(run_id)
        assert refused.value.field == "deadline"
        assert "give deadline with a new one" in str(refused.value)
        assert client.redrive(run_id, deadline=timedelta(minutes=30)).deadline == (
            clock.now() + timedelta(minutes=30)
        )
        ops.cancel(store, run_id, clock=clock)
        assert client.redrive(run_id, no_deadline=True).deadline is None
    finally:
        client.close()
