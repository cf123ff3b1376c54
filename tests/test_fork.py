"""`flowctl fork RUN --from INDEX` and `flowctl rerun RUN`: checkpoints before INDEX are
copied (so those steps do not run again), the rest runs anew, the original is untouched, the
timeline names the origin; through ops on a FakeClock and through the Typer app."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import InputError, RunNotFoundError, UsageError
from flowctl.model import RunStatus
from flowctl.store import Store

FLOWS = """
from pathlib import Path

from flowctl import workflow


def effect(log, name):
    with open(log, "a") as f:
        f.write(name + "\\n")
    return name


@workflow
def three(ctx, log, tag="a"):
    a = ctx.step("one", effect, log, "one-" + tag)
    b = ctx.step("two", effect, log, "two-" + tag)
    c = ctx.step("three", effect, log, "three-" + tag)
    return [a, b, c]


@workflow
def versioned(ctx, log):
    v1 = ctx.version("first", 1, 2)
    ctx.step("one", effect, log, "one")
    v2 = ctx.version("second", 1, 2)
    ctx.step("two", effect, log, "two")
    return [v1, v2]
"""


@pytest.fixture
def flows(flows_dir: Path) -> Path:
    path = flows_dir / "flows.py"
    path.write_text(FLOWS)
    return path


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "effects.log"


def effects(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def finish(store: Store, clock: FakeClock) -> None:
    Daemon(store, clock, DaemonConfig(concurrency=1)).tick()


def completed(store: Store, clock: FakeClock, target: str, log: Path) -> str:
    rid = ops.start(store, target, {"log": str(log)}, clock=clock).run.run_id
    finish(store, clock)
    assert store.get_run(rid).status is RunStatus.COMPLETED
    return rid


def test_fork_copies_the_checkpoints_before_index_and_runs_the_rest(
    store: Store, fake_clock: FakeClock, flows: Path, log: Path
) -> None:
    origin = completed(store, fake_clock, f"{flows}:three", log)
    before = (store.get_run(origin), store.journal(origin), store.timeline(origin))
    fake_clock.advance(timedelta(minutes=1))
    new = ops.fork(store, origin, 2, clock=fake_clock, by="ana")
    assert new.status is RunStatus.QUEUED and new.run_id != origin
    assert new.input == {"log": str(log)} and new.target == before[0].target
    assert sorted(store.journal(new.run_id)) == [0, 1]
    finish(store, fake_clock)
    done = store.get_run(new.run_id)
    assert done.status is RunStatus.COMPLETED
    assert done.result == ["one-a", "two-a", "three-a"]
    assert effects(log) == ["one-a", "two-a", "three-a", "three-a"]  # only #2 ran again
    forked = [e for e in store.timeline(new.run_id) if e.type == "forked"]
    assert [e.data for e in forked] == [
        {"from_run": origin, "from_index": 2, "checkpoints": 2, "by": "ana"}
    ]
    # the original is left exactly as it was
    assert (store.get_run(origin), store.journal(origin), store.timeline(origin)) == before


def test_fork_with_a_new_input_and_rerun_from_zero(
    store: Store, fake_clock: FakeClock, flows: Path, log: Path
) -> None:
    origin = completed(store, fake_clock, f"{flows}:three", log)
    new = ops.fork(store, origin, 1, clock=fake_clock, input={"log": str(log), "tag": "b"})
    finish(store, fake_clock)
    # #0 is copied (its recorded result stands); #1 and #2 run with the new input
    assert store.get_run(new.run_id).result == ["one-a", "two-b", "three-b"]
    again = ops.rerun(store, origin, clock=fake_clock)
    assert store.journal(again.run_id) == {}
    finish(store, fake_clock)
    assert store.get_run(again.run_id).result == ["one-a", "two-a", "three-a"]
    assert effects(log)[-3:] == ["one-a", "two-a", "three-a"]
    assert len(effects(log)) == 3 + 2 + 3


def test_fork_from_the_end_keeps_every_checkpoint(
    store: Store, fake_clock: FakeClock, flows: Path, log: Path
) -> None:
    origin = completed(store, fake_clock, f"{flows}:three", log)
    new = ops.fork(store, origin, 3, clock=fake_clock)
    finish(store, fake_clock)
    assert store.get_run(new.run_id).result == ["one-a", "two-a", "three-a"]
    assert len(effects(log)) == 3  # nothing ran again


class TickingClock(FakeClock):
    """Moves 1 ms at every reading, as a real clock moves between two calls."""

    def now(self) -> Any:
        self.advance(timedelta(milliseconds=1))
        return super().now()


def test_version_markers_recorded_before_the_cut_are_copied(
    store: Store, flows: Path, log: Path
) -> None:
    clock = TickingClock()
    rid = ops.start(store, f"{flows}:versioned", {"log": str(log)}, clock=clock).run.run_id
    finish(store, clock)
    assert store.versions(rid) == {"first": 2, "second": 2}
    # "first" came before checkpoint #0, "second" after it: a fork from 1 keeps only "first",
    # and meets "second" at its own frontier
    new = ops.fork(store, rid, 1, clock=clock)
    assert store.versions(new.run_id) == {"first": 2}
    assert store.versions(ops.fork(store, rid, 0, clock=clock).run_id) == {}
    assert store.versions(ops.fork(store, rid, 2, clock=clock).run_id) == store.versions(rid)
    finish(store, clock)
    assert store.get_run(new.run_id).result == [2, 2]


def test_index_outside_the_journal_is_a_usage_error_and_writes_nothing(
    store: Store, fake_clock: FakeClock, flows: Path, log: Path
) -> None:
    origin = completed(store, fake_clock, f"{flows}:three", log)
    count = len(store.list_runs())
    for bad in (-1, 4):
        with pytest.raises(UsageError) as e:
            ops.fork(store, origin, bad, clock=fake_clock)
        assert e.value.field == "from"  # the CLI spells it --from
        assert e.value.spelled(lambda f: f"--{f}") == (
            f"--from {bad} is outside the journal of run {origin}: use 0..3"
            " (0 starts over, 3 keeps every checkpoint)"
        )
    with pytest.raises(InputError):
        ops.fork(store, origin, 1, clock=fake_clock, input={"nope": 1})
    with pytest.raises(RunNotFoundError):
        ops.fork(store, "missing", 0, clock=fake_clock)
    assert len(store.list_runs()) == count


# ---------------------------------------------------------------- the commands


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_clock: FakeClock) -> Any:
    monkeypatch.setattr(cli, "SystemClock", lambda: fake_clock)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    runner = CliRunner()
    db = tmp_path / "cli.db"

    def call(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli.app, ["--db", str(db), *args])
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    call.db = db  # type: ignore[attr-defined]
    return call


def test_fork_and_rerun_commands(invoke: Any, flows: Path, log: Path) -> None:
    first = json.loads(
        invoke("run", f"{flows}:three", "--input", json.dumps({"log": str(log)}), "--json").stdout
    )
    assert first["status"] == "completed"
    out = invoke("fork", first["id"][:12], "--from", "1").stdout
    assert out.startswith("queued ") and f"forked from {first['id']} at call #1" in out
    assert "1 checkpoint(s) copied" in out
    shown = json.loads(invoke("show", out.split()[1], "--json").stdout)
    assert shown["run"]["status"] == "queued"
    assert [c["index"] for c in shown["checkpoints"]] == [0]
    forked = [e for e in shown["timeline"] if e["type"] == "forked"]
    assert forked[0]["from_run"] == first["id"] and forked[0]["from_index"] == 1
    waited = json.loads(invoke("fork", first["id"], "--from", "2", "--wait", "--json").stdout)
    assert waited["status"] == "completed" and waited["result"] == ["one-a", "two-a", "three-a"]
    assert (waited["forked_from"], waited["from_index"], waited["copied"]) == (first["id"], 2, 2)
    shown_steps = invoke("fork", first["id"], "--from", "2", "--wait").stdout
    assert "✓ three" in shown_steps and "✓ one" not in shown_steps  # copied ones did not run
    text = invoke(
        "rerun", first["id"], "--wait", "--input", json.dumps({"log": str(log), "tag": "z"})
    ).stdout
    assert "completed " in text and '["one-z", "two-z", "three-z"]' in text


def test_fork_index_outside_exits_2_with_one_line(invoke: Any, flows: Path, log: Path) -> None:
    first = json.loads(
        invoke("run", f"{flows}:three", "--input", json.dumps({"log": str(log)}), "--json").stdout
    )
    result = invoke("fork", first["id"], "--from", "9", code=2)
    assert result.stderr == (
        f"flowctl: --from 9 is outside the journal of run {first['id']}: use 0..3"
        " (0 starts over, 3 keeps every checkpoint)\n"
    )
    runs = json.loads(invoke("ls", "--json").stdout)
    assert len(runs) == 1
    assert invoke("fork", "nope", "--from", "0", code=1).stderr.startswith("flowctl: no run")


def test_help_has_examples(invoke: Any) -> None:
    def help_of(command: str) -> str:
        return " ".join(invoke(command, "--help").stdout.split())

    assert "Examples: flowctl fork m8rtkeefq3x7bz2w --from 3 --wait" in help_of("fork")
    assert "Examples: flowctl rerun m8rtkeefq3x7bz2w --wait" in help_of("rerun")
