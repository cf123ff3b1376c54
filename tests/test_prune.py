"""Retention: `flowctl prune`, `[retention]` applied by the daemon, and `flowctl vacuum`.

Runs are made on a FakeClock eight months before the real now, so `--older-than 30d`
(measured from the real clock of the CLI) covers them; a run finished now does not.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.retention import prune
from flowctl.model import RunStatus
from flowctl.store import Store
from tests.helpers import db_of, execute, query
from tests.inproc import run_main

FLOWS = """
from flowctl import workflow


@workflow
def done(ctx, n=0):
    ctx.step("one", lambda: print("printed", n) or n)
    ctx.publish("progress", n)
    return n


@workflow
def waits(ctx):
    ctx.wait_signal("go")


@workflow
def boom(ctx):
    from flowctl.errors import NonRetryableError

    ctx.step("fail", lambda: (_ for _ in ()).throw(NonRetryableError("no")))
"""


def counts(db: str, run_id: str) -> dict[str, int]:
    return {
        t: query(db, f"SELECT COUNT(*) FROM {t} WHERE run_id = ?", (run_id,))[0][0]
        for t in ("runs", "journal", "timeline", "signals", "published", "output")
    }


@pytest.fixture
def world(tmp_path: Path, store: Store, fake_clock: FakeClock) -> dict[str, str]:
    """One run of each fate, all finished (or not) eight months ago on the fake clock."""
    (tmp_path / "flows.py").write_text(FLOWS)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))

    def start(fn: str, **inp: object) -> str:
        run = ops.start(store, str(tmp_path / "flows.py") + f":{fn}", dict(inp), clock=fake_clock)
        return run.run.run_id

    ids = {
        "completed": start("done", n=1),
        "dead": start("boom"),
        "cancelled": start("waits"),
        "waiting": start("waits"),
    }
    daemon.tick()
    ops.send_signal(store, ids["cancelled"], "other", None, clock=fake_clock)
    ops.cancel(store, ids["cancelled"], clock=fake_clock)
    daemon.tick()
    assert {k: store.get_run(v).status for k, v in ids.items()} == {
        "completed": RunStatus.COMPLETED,
        "dead": RunStatus.DEAD,
        "cancelled": RunStatus.CANCELLED,
        "waiting": RunStatus.WAITING,
    }
    return ids


def test_prune_deletes_old_completed_and_cancelled_runs_with_everything_they_recorded(
    monkeypatch: pytest.MonkeyPatch, store: Store, world: dict[str, str]
) -> None:
    before = {k: counts(db_of(store), v) for k, v in world.items()}
    assert before["completed"]["journal"] == 1
    assert before["completed"]["output"] == 1 and before["completed"]["published"] == 1
    assert before["cancelled"]["signals"] == 1
    out = run_main(monkeypatch, "--db", db_of(store), "prune", "--older-than", "30d")
    assert out.returncode == 0, out.stderr
    assert "deleted 2 run(s) (completed, cancelled)" in out.stdout
    for gone in ("completed", "cancelled"):
        assert set(counts(db_of(store), world[gone]).values()) == {0}
    for kept in ("dead", "waiting"):  # dead runs are the operator's; unfinished never go
        assert counts(db_of(store), world[kept]) == before[kept]


def test_dead_runs_go_only_when_asked_and_unfinished_runs_never(
    monkeypatch: pytest.MonkeyPatch, store: Store, world: dict[str, str]
) -> None:
    out = run_main(
        monkeypatch, "--db", db_of(store), "prune", "--older-than", "1d", "--status", "dead"
    )
    assert out.returncode == 0, out.stderr
    assert counts(db_of(store), world["dead"])["runs"] == 0
    assert counts(db_of(store), world["completed"])["runs"] == 1
    bad = run_main(
        monkeypatch, "--db", db_of(store), "prune", "--older-than", "1d", "--status", "waiting"
    )
    assert bad.returncode == 2
    assert "never pruned" in bad.stderr
    assert counts(db_of(store), world["waiting"])["runs"] == 1


def test_a_run_finished_recently_stays(
    monkeypatch: pytest.MonkeyPatch, store: Store, world: dict[str, str]
) -> None:
    execute(db_of(store), "UPDATE runs SET finished_at = finished_at + ?", (240 * 86400 * 10**6,))
    out = run_main(monkeypatch, "--db", db_of(store), "prune", "--older-than", "30d", "--json")
    assert json.loads(out.stdout)["count"] == 0
    assert counts(db_of(store), world["completed"])["runs"] == 1


def test_dry_run_lists_and_deletes_nothing(
    monkeypatch: pytest.MonkeyPatch, store: Store, world: dict[str, str]
) -> None:
    before = query(db_of(store), "SELECT COUNT(*) FROM runs")
    out = run_main(
        monkeypatch, "--db", db_of(store), "prune", "--older-than", "30d", "--dry-run", "--json"
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["dry_run"] is True and report["count"] == 2
    assert report["statuses"] == ["completed", "cancelled"]
    assert {r["run_id"] for r in report["runs"]} == {world["completed"], world["cancelled"]}
    assert {r["status"] for r in report["runs"]} == {"completed", "cancelled"}
    assert query(db_of(store), "SELECT COUNT(*) FROM runs") == before
    text = run_main(monkeypatch, "--db", db_of(store), "prune", "--older-than", "30d", "--dry-run")
    assert world["completed"] in text.stdout and "would delete 2 run(s)" in text.stdout


def test_older_than_0s_prunes_every_finished_run_and_nothing_unfinished(
    monkeypatch: pytest.MonkeyPatch, store: Store, world: dict[str, str], tmp_path: Path
) -> None:
    # It was refused ("must be above 0"), so "everything finished" needed a made-up cutoff.
    now = SystemClock()
    fresh = ops.start(store, f"{tmp_path / 'flows.py'}:done", {}, clock=now).run.run_id
    Daemon(store, now, DaemonConfig(concurrency=1)).tick()
    assert store.get_run(fresh).status is RunStatus.COMPLETED  # finished a moment ago
    hour = run_main(monkeypatch, "--db", db_of(store), "prune", "--older-than", "1h", "--dry-run")
    assert "would delete 2 run(s)" in hour.stdout and fresh not in hour.stdout, hour.stderr
    out = run_main(
        monkeypatch,
        "--db",
        db_of(store),
        "prune",
        "--older-than",
        "0s",
        "-s",
        "completed",
        "-s",
        "cancelled",
        "-s",
        "dead",
    )
    assert out.returncode == 0, out.stderr
    assert "deleted 4 run(s) (completed, cancelled, dead)" in out.stdout
    left = query(db_of(store), "SELECT run_id FROM runs ORDER BY run_id")
    assert left == [(world["waiting"],)]


@pytest.mark.parametrize("bad", ["soon", "-3d"])
def test_a_bad_cutoff_is_exit_2_and_deletes_nothing(
    monkeypatch: pytest.MonkeyPatch, store: Store, world: dict[str, str], bad: str
) -> None:
    out = run_main(monkeypatch, "--db", db_of(store), "prune", "--older-than", bad)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert query(db_of(store), "SELECT COUNT(*) FROM runs") == [(4,)]


def test_prune_works_in_bounded_batches(
    store: Store, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """120 finished runs go in three transactions of at most 50 runs each (the batch is a
    parameter: a bound of 500 is the same code, without 1,200 runs to make first)."""
    (tmp_path / "flows.py").write_text(FLOWS)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1, claim_batch=64))
    for i in range(120):
        ops.start(store, str(tmp_path / "flows.py") + ":done", {"n": i}, clock=fake_clock)
    while daemon.tick():
        pass
    fake_clock.advance(timedelta(days=40))
    commits = store.commit_stats().commits
    gone = prune(store, [RunStatus.COMPLETED], fake_clock.now() - timedelta(days=30), batch=50)
    assert len(gone) == 120
    assert store.commit_stats().commits - commits == 3
    assert store.count_by_status() == {} or sum(store.count_by_status().values()) == 0


def test_the_daemon_applies_retention_once_an_hour(
    store: Store, fake_clock: FakeClock, tmp_path: Path
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    target = str(tmp_path / "flows.py") + ":done"
    config = DaemonConfig(concurrency=1, retention={RunStatus.COMPLETED: timedelta(days=30)})
    daemon = Daemon(store, fake_clock, config)
    first = ops.start(store, target, {"n": 1}, clock=fake_clock).run.run_id
    daemon.tick()
    fake_clock.advance(timedelta(days=31))
    daemon.tick()  # the first pass of this daemon applies retention
    assert query(db_of(store), "SELECT COUNT(*) FROM runs WHERE run_id = ?", (first,)) == [(0,)]
    second = ops.start(store, target, {"n": 2}, clock=fake_clock).run.run_id
    daemon.tick()
    execute(db_of(store), "UPDATE runs SET finished_at = finished_at - ?", (40 * 86400 * 10**6,))
    fake_clock.advance(timedelta(minutes=59))
    daemon.tick()
    assert store.get_run(second).status is RunStatus.COMPLETED  # not yet: within the hour
    fake_clock.advance(timedelta(minutes=2))
    daemon.tick()
    assert query(db_of(store), "SELECT COUNT(*) FROM runs WHERE run_id = ?", (second,)) == [(0,)]


def test_retention_in_flowctl_toml_is_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flowctl.toml").write_text('[retention]\nrunning = "30d"\n')
    out = run_main(monkeypatch, "ls")
    assert out.returncode == 2
    assert "retention.running" in out.stderr
    (tmp_path / "flowctl.toml").write_text('[retention]\ncompleted = "soon"\n')
    assert run_main(monkeypatch, "ls").returncode == 2


def test_vacuum_gives_the_space_back(
    monkeypatch: pytest.MonkeyPatch,
    store: Store,
    fake_clock: FakeClock,
    tmp_path: Path,
    db_path: Path,  # SQLite only: it measures the file's size (PG's VACUUM keeps its files)
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=1))
    for i in range(300):
        ops.start(
            store,
            str(tmp_path / "flows.py") + ":done",
            {"n": "x" * 2000 + str(i)},
            clock=fake_clock,
        )
    while daemon.tick():
        pass
    db = db_path
    out = run_main(monkeypatch, "--db", str(db), "prune", "--older-than", "30d")
    assert "deleted 300 run(s)" in out.stdout
    vac = run_main(monkeypatch, "--db", str(db), "vacuum", "--json")
    assert vac.returncode == 0, vac.stderr
    sizes = json.loads(vac.stdout)
    assert sizes["after_bytes"] < sizes["before_bytes"] / 2
    assert db.stat().st_size == sizes["after_bytes"]
