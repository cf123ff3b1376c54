"""Step output on both stores: appended in order, read by page, step and tail, gone with its
run; a step's print reaches `flowctl logs` and a running run's tail reaches `show`."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import Store

ROOT = Path(__file__).resolve().parent.parent

FLOWS = """\
from flowctl import workflow

@workflow
def talk(ctx, who="ana"):
    ctx.step("greet", print, "hello from", who)
    ctx.step("quiet", lambda: 1)
    ctx.step("bye", print, "bye", who)
    return who

@workflow
def waits(ctx):
    ctx.wait_signal("go")
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def flowctl(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command on the store's database (a file path or a postgresql:// URL)."""
    db = store.location
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_chunks_read_back_in_order_by_page_step_and_tail(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    run_id = ops.start(store, f"{flows}:waits", {}, clock=fake_clock).run.run_id
    other = ops.start(store, f"{flows}:waits", {}, clock=fake_clock).run.run_id
    at = fake_clock.now()
    store.append_output(run_id, 0, "a", at, [("stdout", "one\n"), ("stderr", "two\n")])
    store.append_output(other, 0, "x", at, [("stdout", "not mine\n")])
    store.append_output(
        run_id, 2, "b", at + timedelta(seconds=1), [("stdout", f"{i}\n") for i in range(30)]
    )
    store.append_output(run_id, 1, "c", at, [])
    every = store.output(run_id)
    assert [(c.call_index, c.step, c.stream, c.text) for c in every[:2]] == [
        (0, "a", "stdout", "one\n"),
        (0, "a", "stderr", "two\n"),
    ]
    assert [c.text for c in every[2:]] == [f"{i}\n" for i in range(30)]
    assert [c.seq for c in every] == sorted(c.seq for c in every)
    assert {c.run_id for c in every} == {run_id}
    assert every[2].at == at + timedelta(seconds=1)
    assert store.output(run_id, after=every[1].seq, limit=3) == every[2:5]
    assert [c.text for c in store.output(run_id, step="a")] == ["one\n", "two\n"]
    tail = store.output_tail(run_id, chunks=4)
    assert [c.text for c in tail] == ["26\n", "27\n", "28\n", "29\n"]  # the highest index, in order
    assert store.output("no-such-run") == [] and store.output_tail("no-such-run") == []


def test_output_of_a_run_that_is_gone_is_not_stored_and_goes_with_a_pruned_run(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    store.append_output("no-such-run", 0, "a", fake_clock.now(), [("stdout", "lost\n")])
    assert store.output("no-such-run") == []
    run_id = ops.start(store, f"{flows}:talk", {}, clock=fake_clock).run.run_id
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    assert store.get_run(run_id).status is RunStatus.COMPLETED
    assert [c.text for c in store.output(run_id)] == ["hello from ana\n", "bye ana\n"]
    fake_clock.advance(60)
    gone = store.prune_runs([RunStatus.COMPLETED], fake_clock.now(), 10)
    assert [p.run_id for p in gone] == [run_id]
    assert store.output(run_id) == []


def test_logs_prints_what_the_steps_printed(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    run_id = ops.start(store, f"{flows}:talk", {"who": "bo"}, clock=fake_clock).run.run_id
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    out = flowctl(store, "logs", run_id)
    assert out.returncode == 0, out.stderr
    assert "hello from bo" in out.stdout and "bye bo" in out.stdout
    assert out.stdout.index("hello from bo") < out.stdout.index("bye bo")
    step = flowctl(store, "logs", run_id, "--step", "bye")
    assert "bye bo" in step.stdout and "hello" not in step.stdout


def test_show_tails_the_output_of_the_step_running_now(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    run_id = ops.start(store, f"{flows}:talk", {}, clock=fake_clock).run.run_id
    now = fake_clock.now()
    (claim,), _ = store.claim_due("w-1", now, now + timedelta(seconds=15), 1)
    store.append_output(run_id, 0, "greet", now, [("stdout", "old\n")])
    store.append_output(run_id, 2, "bye", now, [("stdout", "".join(f"l{i}\n" for i in range(9)))])
    detail = ops.show_run(store, run_id, clock=fake_clock)
    assert detail.output_step == "#2 'bye'"
    assert detail.output_tail == ["l4", "l5", "l6", "l7", "l8"]
    out = flowctl(store, "show", run_id)
    assert out.returncode == 0, out.stderr
    assert "of step #2 'bye'" in out.stdout and "l8" in out.stdout and "old" not in out.stdout
    assert claim.lease.run_id == run_id
