"""A long-lived process runs the workflow file as it is on disk: a daemon (or serve)
that imported `file.py` once imports it again after it is edited, so a redriven or new
run executes the fixed code, as `show` promises ("the run replays the new code"). Found
by a new user's pass: a fix to a dead run's step only took effect after a restart."""

from __future__ import annotations

import os
from pathlib import Path

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.model import RunStatus
from flowctl.runtime.targets import load_target
from flowctl.store import Store

FLOW = """
from flowctl import workflow


def body():
    return {body}


@workflow(max_attempts=1)
def fixme(ctx):
    return ctx.step("work", body)
"""


def write(path: Path, body: str, tick: int) -> None:
    path.write_text(FLOW.format(body=body))
    os.utime(path, ns=(tick * 10**9, tick * 10**9))  # an edit the stamp must see


def test_an_edited_workflow_file_is_run_as_edited_by_the_same_daemon(
    store: Store, daemon: Daemon, fake_clock: FakeClock, flows_dir: Path
) -> None:
    path = flows_dir / "fixme.py"
    write(path, "1 / 0", 1)
    target = f"{path}:fixme"
    broken = ops.start(store, target, {}, clock=fake_clock).run.run_id
    daemon.tick()
    assert store.get_run(broken).status is RunStatus.DEAD
    write(path, '"fixed"', 2)
    ops.redrive(store, broken, clock=fake_clock)
    fresh = ops.start(store, target, {}, clock=fake_clock).run.run_id
    daemon.tick()
    assert [(store.get_run(r).status, store.get_run(r).result) for r in (broken, fresh)] == [
        (RunStatus.COMPLETED, "fixed"),
        (RunStatus.COMPLETED, "fixed"),
    ]


def test_an_unchanged_file_is_not_imported_again_and_an_edited_one_is() -> None:
    # The same module object while the file is unchanged (a stat per load, no re-import);
    # a new one, with the new code, once it changes.
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "flow.py"
        write(path, "1", 1)
        first = load_target(f"{path}:fixme").handler
        assert load_target(f"{path}:fixme").handler is first
        write(path, "2", 2)
        second = load_target(f"{path}:fixme").handler
        assert second is not first
        assert second.__globals__["body"]() == 2


SLEEPER = """
from flowctl import workflow


@workflow(max_attempts=1)
def later(ctx):
    first = ctx.step("first", lambda: 1)
    ctx.sleep(60)
    return ctx.step("second", lambda: first + {body})
"""


def test_a_half_edited_file_saved_while_a_run_sleeps_costs_it_no_attempt(
    store: Store, daemon: Daemon, fake_clock: FakeClock, flows_dir: Path
) -> None:
    """The run wakes while its file holds a syntax error (a save in the middle of an edit):
    it waits for the file to load again, its one attempt unspent, and once the file is
    fixed it goes on from its checkpoint, `first` not run again."""
    path = flows_dir / "later.py"
    path.write_text(SLEEPER.format(body="1"))
    os.utime(path, ns=(10**9, 10**9))
    rid = ops.start(store, f"{path}:later", {}, clock=fake_clock).run.run_id
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    path.write_text(SLEEPER.format(body="(1 +"))  # saved half-edited
    os.utime(path, ns=(2 * 10**9, 2 * 10**9))
    fake_clock.advance(61)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 1)
    assert run.error is not None and run.error["kind"] == "load"
    assert "SyntaxError" in str(run.error["message"]) or "syntax" in str(run.error["message"])
    why = ops.why_run(store, rid, clock=fake_clock)
    assert why.reason == "retry_load" and "no attempt spent" in why.message
    path.write_text(SLEEPER.format(body="41"))  # the edit finished
    os.utime(path, ns=(3 * 10**9, 3 * 10**9))
    fake_clock.advance(1)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.result, run.attempt) == (RunStatus.COMPLETED, 42, 1)
    steps = [e for e in store.journal(rid).values() if e.name in ("first", "second")]
    assert [(e.name, e.value) for e in steps] == [("first", 1), ("second", 42)]


CAUGHT = """
import os
from flowctl import workflow


def risky(path):
    with open(path, "a") as f:
        f.write("x")
    raise ValueError("no")


@workflow(max_attempts=1)
def caught(ctx, path: str):
    try:
        ctx.step("risky", risky, path)
    except ValueError:
        pass
    ctx.sleep(60)
    return ctx.step("after", lambda: {body})
"""


def test_a_load_retry_keeps_the_attempts_journal_a_caught_step_error_included(
    store: Store, daemon: Daemon, fake_clock: FakeClock, flows_dir: Path
) -> None:
    """A load failure retries the same attempt: its journal stands whole. (A new attempt
    starts again from its first step error; the same attempt must not, or the step whose
    error the workflow caught would run a second time.)"""
    path = flows_dir / "caught.py"
    calls = flows_dir / "calls"
    path.write_text(CAUGHT.format(body="1"))
    os.utime(path, ns=(10**9, 10**9))
    rid = ops.start(store, f"{path}:caught", {"path": str(calls)}, clock=fake_clock).run.run_id
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING and calls.read_text() == "x"
    path.write_text(CAUGHT.format(body="(1 +"))  # saved half-edited
    os.utime(path, ns=(2 * 10**9, 2 * 10**9))
    fake_clock.advance(61)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.QUEUED
    path.write_text(CAUGHT.format(body="2"))
    os.utime(path, ns=(3 * 10**9, 3 * 10**9))
    fake_clock.advance(1)
    daemon.tick()
    run = store.get_run(rid)
    assert (run.status, run.result, run.attempt) == (RunStatus.COMPLETED, 2, 1)
    assert calls.read_text() == "x"  # the caught step ran once
    assert [(e.name, str(e.state)) for e in store.journal(rid).values()] == [
        ("risky", "error"),
        ("sleep", "done"),
        ("after", "done"),
    ]
