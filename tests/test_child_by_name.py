"""Child runs by name, and `run --wait` of a run with children (issue 39, item 4).

`ctx.child("kid")` failed with UnknownWorkflowError though `flowctl run kid` worked: it
looked for no names at all. It now finds a name as `flowctl run NAME` does (the project's
workflows folder, from flowctl.toml), as YAML `workflow:` steps do. And `run --wait` of a
workflow with a child hung forever without a daemon: the child is now driven in the
foreground with its parent. The CLI runs in-process on a FakeClock whose waits in the
CLI's own thread move time on, so a durable sleep passes at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import UnknownWorkflowError
from flowctl.model import RunStatus
from flowctl.runtime.targets import load_child
from flowctl.store import Store, open_store

PARENTS = """
from flowctl import workflow


@workflow
def parent(ctx, n: int = 21):
    doubled = ctx.child("kid", {"n": n})
    greeted = ctx.child("greet", {"who": "ana"})
    return {"doubled": doubled, "greeted": greeted}


@workflow
def orphan(ctx):
    return ctx.child("nosuchkid")


@workflow
def patient(ctx):
    return ctx.child("napper")
"""
KIDS = """
from flowctl import workflow


@workflow
def kid(ctx, n: int):
    return ctx.step("double", lambda: n * 2)


@workflow
def napper(ctx):
    ctx.sleep("2s")  # run --wait polls the database through it: a short one
    return ctx.step("after", lambda: "rested")
"""
GREET = (
    "name: greet\ninput: {who: str}\nsteps:\n  - id: hi\n    run: [echo, 'hi ${{ input.who }}']\n"
)
# A YAML workflow outside the workflows folder naming one inside it.
ELSEWHERE = "name: elsewhere\nsteps:\n  - id: kid\n    workflow: kid\n    with: {n: 4}\n"


class CliClock(FakeClock):
    """Fake time that the CLI's own thread moves on when it waits (tests/test_cli.py's)."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self._owner = threading.get_ident()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if threading.get_ident() == self._owner and timeout is not None and not event.is_set():
            self.advance(timeout)
            return event.is_set()
        return super().wait(event, timeout)

    def wait_until(self, event: threading.Event, deadline: float) -> bool:
        if threading.get_ident() == self._owner and not event.is_set():
            self.advance(max(0.0, deadline - self.monotonic()))
            return event.is_set()
        return super().wait_until(event, deadline)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose flowctl.toml names its workflows folder `flows`; the parents in
    one file, the kids in another, a YAML kid, and a YAML file outside the folder."""
    root = tmp_path / "project"
    (root / "flows").mkdir(parents=True)
    (root / "flowctl.toml").write_text('workflows = "flows"\n')
    (root / "flows" / "parents.py").write_text(PARENTS)
    (root / "flows" / "kids.py").write_text(KIDS)
    (root / "flows" / "greet.yaml").write_text(GREET)
    (root / "other").mkdir()
    (root / "other" / "elsewhere.yaml").write_text(ELSEWHERE)
    return root


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> CliClock:
    fake = CliClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.setattr(cli, "SystemClock", lambda: fake)
    return fake


@pytest.fixture
def store(db: str, project: Path) -> Iterator[Store]:
    opened = open_store(db, create=True)
    yield opened
    opened.close()


@pytest.fixture
def invoke(db: str, clock: CliClock, project: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(project)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def test_ctx_child_finds_a_name_as_flowctl_run_does_from_any_folder(
    store: Store, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.chdir(project)
    started = ops.start(store, "parent", {}, clock=clock, workflows_dir=project / "flows")
    monkeypatch.chdir(tmp_path)  # the daemon runs elsewhere: the run's folder decides
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
    for _ in range(6):
        daemon.tick()
    run = store.get_run(started.run.run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result == {"doubled": 42, "greeted": {"steps": {"hi": "hi ana"}}}
    kids = {r.workflow: r for r in store.list_runs(limit=10) if r.parent_run_id == run.run_id}
    assert set(kids) == {"kid", "greet"}
    assert kids["kid"].target == f"{(project / 'flows' / 'kids.py').resolve()}:kid"


def test_a_yaml_workflow_step_outside_the_folder_finds_a_name_in_it(
    store: Store, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    monkeypatch.chdir(tmp_path)
    target = str(project / "other" / "elsewhere.yaml")
    run_id = ops.start(store, target, {}, clock=clock).run.run_id
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
    for _ in range(4):
        daemon.tick()
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result == {"steps": {"kid": 8}}


def test_an_unknown_child_name_says_where_it_looked(project: Path) -> None:
    with pytest.raises(UnknownWorkflowError) as refused:
        load_child("nosuchkid", str(project / "flows"))
    assert f"unknown workflow 'nosuchkid' in {project / 'flows'}" in str(refused.value)


def test_run_wait_of_a_workflow_with_children_runs_them_here_and_ends(
    invoke: Any, store: Store
) -> None:
    # It waited forever for a daemon to run the children.
    out = invoke("run", "parent", "--wait", "--json")
    shown = json.loads(out.stdout)
    assert (shown["status"], shown["result"]["doubled"]) == ("completed", 42)
    runs = store.list_runs(limit=10)
    assert {r.workflow: r.status for r in runs} == {
        "parent": RunStatus.COMPLETED,
        "kid": RunStatus.COMPLETED,
        "greet": RunStatus.COMPLETED,
    }


def test_run_wait_carries_a_sleeping_child_through_its_sleep(invoke: Any, store: Store) -> None:
    out = invoke("run", "patient", "--wait")
    lines = out.stdout.splitlines()
    assert any(line.startswith("  … waiting for child run ") for line in lines), lines
    assert lines[-1].startswith("completed ") and lines[-1].endswith(': "rested"'), lines
    assert {r.workflow: r.status for r in store.list_runs(limit=10)} == {
        "patient": RunStatus.COMPLETED,
        "napper": RunStatus.COMPLETED,
    }


def test_run_without_wait_runs_the_child_until_it_parks_and_says_so(
    invoke: Any, store: Store
) -> None:
    out = invoke("run", "patient")
    napper = next(r for r in store.list_runs(limit=10) if r.workflow == "napper")
    assert napper.status is RunStatus.SLEEPING  # it ran here, up to its sleep
    first, second = out.stdout.splitlines()[-2:]
    assert first.startswith(f"waiting for child run {napper.run_id} (napper), which is sleeping")
    assert "`flowctl daemon` carries it on" in second


def test_run_wait_of_a_child_that_does_not_exist_ends_dead_not_hung(
    invoke: Any, store: Store
) -> None:
    out = invoke("run", "orphan", "--wait", "--max-attempts", "1", code=1)
    assert "unknown workflow 'nosuchkid'" in out.stderr
    assert store.list_runs(limit=1)[0].status is RunStatus.DEAD


def test_client_run_carries_the_children_too(
    db: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowctl import Client

    monkeypatch.chdir(project)
    client = Client(db, clock=FakeClock(datetime(2026, 3, 27, 12, 0, tzinfo=UTC)))
    try:
        run = client.run("parent", {"n": 5})
        assert (run.status, run.result["doubled"]) == (RunStatus.COMPLETED, 10)
        kids = [r for r in client.store.list_runs(limit=10) if r.parent_run_id == run.run_id]
        assert sorted(r.status for r in kids) == [RunStatus.COMPLETED] * 2
    finally:
        client.close()
