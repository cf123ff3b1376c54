"""`flowctl daemon --workers N`: a real daemon supervising two worker processes that make
every kind of durable call, on both stores; a worker that cannot serve stops the daemon
(crash tests: tests/crash/test_workers_kill9.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import logged_daemon, wait_until

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.daemon.processes import MAX_PAUSE, replacement_pause
from flowctl.model import RunStatus
from flowctl.store import open_store

ROOT = Path(__file__).resolve().parent.parent


def test_a_worker_that_keeps_dying_before_it_serves_is_replaced_ever_more_slowly() -> None:
    assert [replacement_pause(n) for n in range(1, 8)] == [0, 1, 2, 4, 8, 16, MAX_PAUSE]
    assert replacement_pause(100) == MAX_PAUSE


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
            # The daemon and its two workers, each a registered daemon naming its supervisor.
            wait_until(lambda: len(store.daemons()) == 3, timeout=30)
            workers = {d.pid for d in store.daemons() if d.info.get("worker_of") == proc.pid}
            assert len(workers) == 2 and proc.pid not in workers
            status = subprocess.run(
                [sys.executable, "-m", "flowctl", "--db", db, "status"],
                capture_output=True,
                text=True,
                cwd=ROOT,
            ).stdout
            assert status.count(f"worker of pid {proc.pid}") == 2, status
            assert f"pid {proc.pid} on" in status and "supervising 2 workers" in status
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
        assert result["pid"] in workers  # the step ran in one of the worker processes
    assert published["progress"][0] == {"a": 1}
    assert "step says hello" in "".join(chunk.text for chunk in output)
    assert dead.status is RunStatus.DEAD and dead.error is not None
    assert dead.error["type"] == "SerializationError"
    assert dead_result.status is RunStatus.DEAD and dead_result.error is not None
    assert "not JSON-serialisable" in dead_result.error["message"]
    text = (tmp_path / "daemon.log").read_text()
    assert "workers 2" in text and "Traceback" not in text
    # At exit, where the CPU went: the workers ran everything, the daemon process little.
    split = re.search(r"CPU ([\d.]+) s in this process, ([\d.]+) s in 2 worker process", text)
    assert split is not None, text[-500:]
    assert float(split[2]) > float(split[1])


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


def test_workers_that_cannot_serve_stop_the_daemon_with_one_line_saying_why(
    tmp_path: Path,
) -> None:
    db = tmp_path / "flowctl.db"
    log = tmp_path / "daemon.log"
    proc = logged_daemon(db, log, "--workers", "2")
    try:
        with open_store(db) as store:
            wait_until(lambda: len(store.daemons()) == 3, timeout=30)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        # The daemon or a worker sees the file gone (a worker then exits as unable to
        # serve); the daemon replaces no worker, stops and says why in its last line.
        assert proc.wait(timeout=30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert text.strip().splitlines()[-1] == (
        f"flowctl: database file {db} was deleted while the daemon served it; stopping without"
        " writing to it again: start the daemon again to serve the file now at that path"
    ), text[-800:]
    assert "Traceback" not in text and "starting another" not in text
    assert not db.exists()  # no worker created it again


def test_until_idle_serves_the_runs_an_isolated_suspect_gave_its_key_back_to(
    tmp_path: Path,
) -> None:
    """A suspect (a run whose owner's lease lapsed) runs alone in an isolated worker of the
    supervisor, often after both workers found nothing left and exited. Its ending gives
    its key's slot back, making the run held behind it due: `--until-idle` starts the
    workers again for it rather than exit with it queued (300 runs over 100 keys, 20 of
    them suspects, left 8 to 11 queued before)."""
    db = tmp_path / "keys.db"
    clock = SystemClock()
    with open_store(db) as store:
        for user in ("ann", "bob"):
            for x in range(2):
                ops.start(
                    store,
                    "tests/workers_flows.py:one_per_user",
                    {"user": user, "x": x},
                    clock=clock,
                    cwd=str(ROOT),
                )
        now = clock.now()
        # A daemon elsewhere took one run of each user and was never heard of again: its
        # lease has lapsed, and the user's other run is held behind it.
        taken, _ = store.claim_due("elsewhere/1/1/gone", now, now, 10)
        assert len(taken) == 2
        assert store.count_by_status()[RunStatus.QUEUED] == 2
    proc = logged_daemon(db, tmp_path / "daemon.log", "--until-idle", "--workers", "2")
    assert proc.wait(timeout=120) == 0, (tmp_path / "daemon.log").read_text()[-2000:]
    with open_store(db) as store:
        assert store.count_by_status()[RunStatus.COMPLETED] == 4
