"""Suspects run alone. A daemon on the system clock runs each in a worker process of its
own beside everything else (tests/crash/test_isolation.py, and the real restart loop with
a step that kills its worker in tests/crash/test_poison_suspects.py). Driven by an
injected clock, which worker processes cannot share, the serving loop runs them itself,
one at a time with nothing beside them: this file."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import open_same, wait_until

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.ids import HOST
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store

FLOWS = """
import time

import flowctl_suspect_hooks as hooks
from flowctl import workflow


def busy(tag):
    with hooks.LOCK:
        hooks.ACTIVE.append(tag)
        hooks.PEAKS.append(sorted(hooks.ACTIVE))
    if tag.startswith("f"):
        hooks.TOGETHER.wait(5)  # the fresh runs meet here: they must run side by side
    else:
        time.sleep(0.03)
    with hooks.LOCK:
        hooks.ACTIVE.remove(tag)
    return tag


@workflow
def work(ctx, tag):
    return ctx.step("busy", busy, tag)
"""

DEAD = f"{HOST}/999999999/1/dead"  # no such pid: provably gone


@pytest.fixture
def hooks() -> Iterator[types.SimpleNamespace]:
    ns = types.SimpleNamespace(
        LOCK=threading.Lock(), ACTIVE=[], PEAKS=[], TOGETHER=threading.Barrier(3)
    )
    mod = types.ModuleType("flowctl_suspect_hooks")
    mod.__dict__.update(vars(ns))
    sys.modules["flowctl_suspect_hooks"] = mod
    yield ns
    sys.modules.pop("flowctl_suspect_hooks", None)


def test_runs_reclaimed_from_a_dead_worker_run_one_at_a_time_then_the_rest_together(
    tmp_path: Path,
    store: Store,
    fake_clock: FakeClock,
    hooks: types.SimpleNamespace,
) -> None:
    flows = tmp_path / "suspect_flows.py"
    flows.write_text(FLOWS)

    def start(tag: str) -> str:
        return ops.start(store, f"{flows}:work", {"tag": tag}, clock=fake_clock).run.run_id

    in_flight = [start(f"s{i}") for i in range(3)]
    now = fake_clock.now()
    claims, _ = store.claim_due(DEAD, now, now + timedelta(minutes=10), 10)
    assert len(claims) == 3  # a daemon held all three, then died
    fresh = [start(f"f{i}") for i in range(3)]

    own = open_same(store)
    daemon = Daemon(own, fake_clock, DaemonConfig(concurrency=4))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        everything = in_flight + fresh

        def all_done() -> bool:
            if all(store.get_run(r).status is RunStatus.COMPLETED for r in everything):
                return True
            fake_clock.advance(0.05)
            time.sleep(0.005)
            return False

        wait_until(all_done, timeout=10)
    finally:
        daemon.stop()
        thread.join(5)
        own.close()
    suspects = {f"s{i}" for i in range(3)}
    for peak in hooks.PEAKS:  # whatever ran at the same time as a suspect: nothing
        assert len(peak) == 1 or not suspects & set(peak)
    assert [store.get_run(r).result for r in fresh] == ["f0", "f1", "f2"]  # met, together
    for run_id in in_flight:
        run = store.get_run(run_id)
        assert (run.suspect, run.crashes, run.solo) == (False, 0, False)  # cleared by the end
        (reclaimed,) = [e for e in store.timeline(run_id) if e.type == "reclaimed"]
        assert (reclaimed.data["from"], reclaimed.data["alone"]) == (DEAD, True)
