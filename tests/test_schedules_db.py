"""Schedules end to end below the CLI: the store's fire transaction, the Scheduler, and the
daemon firing on a FakeClock. No test sleeps for real time (except the one @crash test).

Fire times were worked out by hand (see tests/test_schedule.py for the zone rules): Paris
springs forward 2026-03-29 02:00 -> 03:00 (01:00 UTC) and falls back 2026-10-25 03:00 ->
02:00 (01:00 UTC); New York 2026-03-08 02:00 -> 03:00 (07:00 UTC) and 2026-11-01 02:00 ->
01:00 (06:00 UTC).
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.ops import schedules as schedule_ops
from flowctl.schedule.calendar import ScheduleSpec, jitter_offset
from flowctl.schedule.firing import Scheduler, fire_key
from flowctl.store import MIGRATIONS, FirePlan, NewRun
from flowctl.store import schedules as store_module
from flowctl.store.sqlite import SqliteStore as Store
from tests.helpers import wait_until

FLOWS = """
from flowctl import workflow


@workflow
def quick(ctx, n: int = 0):
    return {"n": n}


@workflow
def slow(ctx):
    ctx.sleep("1h")
    return "done"
"""

PING = """name: ping
steps:
  - id: pong
    run: [echo, pong]
"""


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


@pytest.fixture
def quick(flows: Path) -> str:
    return f"{flows}:quick"


@pytest.fixture
def slow(flows: Path) -> str:
    return f"{flows}:slow"


def add(
    store: Store, clock: FakeClock, name: str, target: str, **options: Any
) -> schedule_ops.ScheduleInfo:
    return schedule_ops.add_schedule(
        store, name, target, options.pop("input", None), clock=clock, **options
    )


def runs_of(store: Store, name: str) -> list[Any]:
    runs = store.list_runs(limit=10_000)
    return sorted((r for r in runs if r.schedule == name), key=lambda r: r.scheduled_at)


def history(store: Store, name: str) -> list[str]:
    return [e.action for e in store.schedule_history(name, 10_000)]


def step_until(daemon: Daemon, clock: FakeClock, end: datetime, step: timedelta) -> None:
    """Tick the daemon at every `step` up to `end`, as a running daemon would wake."""
    while clock.now() < end:
        clock.advance(min(step, end - clock.now()))
        daemon.tick()


# ---------------------------------------------------------------- firing exactly once


def test_daemon_fires_a_due_schedule_exactly_once(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC")  # now 00:59 UTC
    daemon.tick()
    assert runs_of(store, "hourly") == []
    fake_clock.advance(timedelta(minutes=1))
    daemon.tick()
    daemon.tick()  # same instant again: nothing new
    (run,) = runs_of(store, "hourly")
    assert run.status is RunStatus.COMPLETED
    assert run.scheduled_at == utc(2026, 3, 29, 1)
    assert run.key == "schedule:hourly:2026-03-29T01:00:00.000000+00:00"
    assert history(store, "hourly") == ["fired"]
    row = store.get_schedule("hourly")
    assert row.last_fire_at == utc(2026, 3, 29, 1)
    assert row.next_fire_at == utc(2026, 3, 29, 2)


def test_the_run_records_its_fire_time_apart_from_its_start(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC")
    fake_clock.advance(timedelta(minutes=1, seconds=30))  # noticed 30 s late: not missed
    daemon.tick()
    (run,) = runs_of(store, "hourly")
    assert run.scheduled_at == utc(2026, 3, 29, 1)
    assert run.started_at == utc(2026, 3, 29, 1, 0, 30)
    assert run.to_json()["scheduled_at"] == "2026-03-29T01:00:00.000000Z"


def test_every_is_anchored_at_creation(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    info = add(store, fake_clock, "beat", quick, every="15m")
    assert info.row.next_fire_at == fake_clock.now() + timedelta(minutes=15)
    step_until(daemon, fake_clock, fake_clock.now() + timedelta(hours=1), timedelta(minutes=5))
    starts = [r.scheduled_at for r in runs_of(store, "beat")]
    assert starts == [utc(2026, 3, 29, 0, 59) + k * timedelta(minutes=15) for k in (1, 2, 3, 4)]


def test_firing_twice_with_the_same_fire_time_creates_one_run(
    store: Store, fake_clock: FakeClock, quick: str
) -> None:
    """A second daemon (or a retry) working from the same read: the revision check refuses
    it; and even past that check, the idempotency key refuses a second run."""
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC")
    fake_clock.advance(timedelta(minutes=1))
    row = store.get_schedule("hourly")
    first = Scheduler(store, fake_clock).fire_due(row, fake_clock.now())
    second = Scheduler(store, fake_clock).fire_due(row, fake_clock.now())  # stale read
    assert first is not None and first[0].created
    assert second is None
    # Bypass the revision check: the key still holds.
    fresh = store.get_schedule("hourly")
    (run,) = runs_of(store, "hourly")
    plan = FirePlan(run.scheduled_at, "fired", run=_copy_run(run))
    again = store.fire_schedule(
        "hourly",
        fresh.revision,
        [plan],
        overlap="allow",
        last_fire_at=fresh.last_fire_at,
        next_fire_at=fresh.next_fire_at,
        now=fake_clock.now(),
    )
    assert again is not None and again[0].action == "duplicate" and not again[0].created
    assert len(runs_of(store, "hourly")) == 1
    assert history(store, "hourly") == ["fired"]


def _copy_run(run: Any) -> NewRun:
    return NewRun(
        run_id="another-id",
        workflow=run.workflow,
        target=run.target,
        kind=run.kind,
        input=run.input,
        key=run.key,
        schedule=run.schedule,
        scheduled_at=run.scheduled_at,
    )


def test_a_crash_inside_the_fire_transaction_neither_fires_nor_loses_the_fire(
    store: Store, fake_clock: FakeClock, quick: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Die after the run row is inserted but before the fire is recorded: the whole
    transaction rolls back; the next tick (a restarted daemon) fires it exactly once."""
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC")
    fake_clock.advance(timedelta(minutes=1))

    def crash(*args: Any) -> None:
        raise RuntimeError("killed mid-fire")

    # The fire transaction appends the history row (written once, for both backends).
    monkeypatch.setattr(store_module, "_add_history", crash)
    retry_at = Scheduler(store, fake_clock).tick()  # logs the failure, never raises
    assert retry_at == fake_clock.now() + timedelta(seconds=1)
    assert runs_of(store, "hourly") == []
    assert store.get_schedule("hourly").last_fire_at is None
    monkeypatch.undo()
    fake_clock.advance(timedelta(seconds=1))
    restarted = Scheduler(store, fake_clock)
    restarted.tick()
    restarted.tick()
    (run,) = runs_of(store, "hourly")
    assert run.scheduled_at == utc(2026, 3, 29, 1)
    assert history(store, "hourly") == ["fired"]


def test_a_stale_revision_writes_nothing(store: Store, fake_clock: FakeClock, quick: str) -> None:
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC")
    row = store.get_schedule("hourly")
    schedule_ops.pause_schedule(store, "hourly", clock=fake_clock)
    out = store.fire_schedule(
        "hourly",
        row.revision,
        [FirePlan(utc(2026, 3, 29, 1), "skipped-missed")],
        overlap="skip",
        last_fire_at=utc(2026, 3, 29, 1),
        next_fire_at=utc(2026, 3, 29, 2),
        now=fake_clock.now(),
    )
    assert out is None
    assert history(store, "hourly") == []
    assert store.get_schedule("hourly").last_fire_at is None


# ---------------------------------------------------------------- missed fires


@pytest.mark.parametrize(
    ("missed", "expected_runs", "expected_skipped"),
    [("skip", 0, 72), ("latest", 1, 71), ("all", 72, 0)],
)
def test_missed_policies_after_three_days_down(
    store: Store,
    fake_clock: FakeClock,
    daemon: Daemon,
    quick: str,
    missed: str,
    expected_runs: int,
    expected_skipped: int,
) -> None:
    add(
        store,
        fake_clock,
        "hourly",
        quick,
        cron="0 * * * *",
        tz="UTC",
        missed=missed,
        overlap="allow",
    )
    fake_clock.advance(timedelta(days=3))  # the daemon was down: 72 hourly fires passed
    daemon.tick()
    daemon.tick()
    runs = runs_of(store, "hourly")
    assert len(runs) == expected_runs
    assert all(r.status is RunStatus.COMPLETED for r in runs)
    actions = history(store, "hourly")
    assert actions.count("skipped-missed") == expected_skipped
    if missed == "latest":
        assert runs[0].scheduled_at == utc(2026, 4, 1, 0)
    if missed == "all":
        assert [r.scheduled_at for r in runs][:2] == [utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]
    row = store.get_schedule("hourly")
    assert row.last_fire_at == utc(2026, 4, 1, 0)
    assert row.next_fire_at == utc(2026, 4, 1, 1)
    fake_clock.advance(timedelta(minutes=1))  # 01:00: back to normal, on-time fires
    daemon.tick()
    assert len(runs_of(store, "hourly")) == expected_runs + 1


def test_missed_all_is_bounded_by_max_missed(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    add(
        store,
        fake_clock,
        "hourly",
        quick,
        cron="0 * * * *",
        tz="UTC",
        missed="all",
        max_missed=10,
        overlap="allow",
    )
    fake_clock.advance(timedelta(days=3))
    daemon.tick()
    runs = runs_of(store, "hourly")
    assert len(runs) == 10
    assert runs[-1].scheduled_at == utc(2026, 4, 1, 0)  # the most recent ten
    events = store.schedule_history("hourly", 1000)
    older = next(e.detail for e in events if e.fire_at is None)
    assert older is not None and older.startswith("older missed fires")


def test_missed_all_with_overlap_skip_runs_one(
    store: Store, fake_clock: FakeClock, quick: str
) -> None:
    """Documented interaction: with the default overlap=skip, the catch-up fires overlap the
    first one (still queued), so they are skipped; pair missed=all with allow or queue."""
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC", missed="all")
    fake_clock.advance(timedelta(hours=3))
    Scheduler(store, fake_clock).tick()
    assert len(runs_of(store, "hourly")) == 1
    assert history(store, "hourly") == ["fired", "skipped-overlap", "skipped-overlap"]


# ---------------------------------------------------------------- overlap


def test_overlap_allow_runs_side_by_side(
    store: Store, fake_clock: FakeClock, daemon: Daemon, slow: str
) -> None:
    add(store, fake_clock, "s", slow, every="15m", overlap="allow")
    step_until(daemon, fake_clock, fake_clock.now() + timedelta(minutes=45), timedelta(minutes=15))
    runs = runs_of(store, "s")
    assert [r.status for r in runs] == [RunStatus.SLEEPING] * 3
    assert history(store, "s") == ["fired"] * 3


def test_overlap_skip_records_the_skip(
    store: Store, fake_clock: FakeClock, daemon: Daemon, slow: str
) -> None:
    add(store, fake_clock, "s", slow, every="15m", overlap="skip")
    step_until(daemon, fake_clock, fake_clock.now() + timedelta(minutes=45), timedelta(minutes=15))
    (run,) = runs_of(store, "s")
    assert run.status is RunStatus.SLEEPING
    events = store.schedule_history("s", 100)
    assert [e.action for e in events] == ["fired", "skipped-overlap", "skipped-overlap"]
    assert events[1].detail == f"run {run.run_id} is still sleeping"
    # once the first run ends, the next fire runs again
    step_until(daemon, fake_clock, fake_clock.now() + timedelta(minutes=45), timedelta(minutes=15))
    assert [r.status for r in runs_of(store, "s")] == [RunStatus.COMPLETED, RunStatus.SLEEPING]


def test_overlap_queue_holds_runs_and_starts_them_one_after_another(
    store: Store, fake_clock: FakeClock, daemon: Daemon, slow: str
) -> None:
    start = fake_clock.now()
    add(store, fake_clock, "s", slow, every="15m", overlap="queue")
    step_until(daemon, fake_clock, start + timedelta(minutes=45), timedelta(minutes=15))
    a, b, c = runs_of(store, "s")
    assert a.status is RunStatus.SLEEPING
    assert (b.status, b.run_at, c.status, c.run_at) == (
        RunStatus.QUEUED,
        None,
        RunStatus.QUEUED,
        None,
    )
    assert history(store, "s") == ["fired", "queued-overlap", "queued-overlap"]
    assert [e.type for e in store.timeline(b.run_id)][-1] == "held"
    detail = ops.show_run(store, b.run_id, clock=fake_clock)
    assert ops.why(detail, fake_clock.now()) == (
        "queued behind the active run of schedule 's' (overlap=queue)"
    )
    # a sleeps until start+1h15; its end releases b (oldest first), which starts at once
    step_until(daemon, fake_clock, start + timedelta(hours=1, minutes=15), timedelta(minutes=15))
    runs = {r.run_id: r for r in runs_of(store, "s")}
    assert runs[a.run_id].status is RunStatus.COMPLETED
    assert runs[b.run_id].status is RunStatus.SLEEPING
    assert runs[b.run_id].started_at == start + timedelta(hours=1, minutes=15)
    assert runs[c.run_id].status is RunStatus.QUEUED and runs[c.run_id].run_at is None
    released = [e for e in store.timeline(b.run_id) if e.type == "released"]
    assert released[0].data == {"schedule": "s", "after": a.run_id}
    active = [r for r in runs.values() if r.status in (RunStatus.SLEEPING, RunStatus.RUNNING)]
    assert len(active) == 1  # never two at once


def test_cancelling_the_running_run_releases_the_next_queued_one(
    store: Store, fake_clock: FakeClock, daemon: Daemon, slow: str
) -> None:
    add(store, fake_clock, "s", slow, every="15m", overlap="queue")
    step_until(daemon, fake_clock, fake_clock.now() + timedelta(minutes=30), timedelta(minutes=15))
    a, b = runs_of(store, "s")
    ops.cancel(store, a.run_id, clock=fake_clock)
    assert store.get_run(b.run_id).run_at == fake_clock.now()
    daemon.tick()
    assert store.get_run(b.run_id).status is RunStatus.SLEEPING


# ---------------------------------------------------------------- jitter


def test_jitter_delays_the_start_but_not_the_key(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    info = add(store, fake_clock, "j", quick, cron="0 * * * *", tz="UTC", jitter="10m")
    assert info.spec is not None
    fire = utc(2026, 3, 29, 1)
    offset = jitter_offset(info.spec, "j", fire)
    assert timedelta(0) < offset < timedelta(minutes=10)
    fake_clock.advance(timedelta(minutes=1))
    daemon.tick()
    (run,) = runs_of(store, "j")
    assert run.key == fire_key("j", fire) == "schedule:j:2026-03-29T01:00:00.000000+00:00"
    assert run.scheduled_at == fire
    assert run.run_at == fire + offset
    assert run.status is RunStatus.QUEUED  # not before its jittered start
    fake_clock.set(fire + offset)
    daemon.tick()
    assert store.get_run(run.run_id).status is RunStatus.COMPLETED


# ---------------------------------------------------------------- DST through the daemon


@pytest.mark.parametrize(
    ("tz", "cron", "start", "end", "policy", "expected"),
    [
        # Paris spring forward: 02:30 does not exist on 2026-03-29
        (
            "Europe/Paris",
            "30 2 * * *",
            utc(2026, 3, 28, 23),
            utc(2026, 3, 30, 1),
            {},
            [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)],
        ),
        (
            "Europe/Paris",
            "30 2 * * *",
            utc(2026, 3, 28, 23),
            utc(2026, 3, 30, 1),
            {"gap": "skip"},
            [utc(2026, 3, 30, 0, 30)],
        ),
        # Paris fall back: 02:30 happens twice on 2026-10-25 (00:30 and 01:30 UTC)
        (
            "Europe/Paris",
            "30 2 * * *",
            utc(2026, 10, 24, 22),
            utc(2026, 10, 25, 3),
            {},
            [utc(2026, 10, 25, 0, 30)],
        ),
        (
            "Europe/Paris",
            "30 2 * * *",
            utc(2026, 10, 24, 22),
            utc(2026, 10, 25, 3),
            {"fold": "last"},
            [utc(2026, 10, 25, 1, 30)],
        ),
        (
            "Europe/Paris",
            "30 2 * * *",
            utc(2026, 10, 24, 22),
            utc(2026, 10, 25, 3),
            {"fold": "both"},
            [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)],
        ),
        # New York spring forward: 02:30 -> 03:00 EDT (07:00 UTC) on 2026-03-08
        (
            "America/New_York",
            "30 2 * * *",
            utc(2026, 3, 8, 4),
            utc(2026, 3, 9, 7),
            {},
            [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)],
        ),
        # New York fall back: 01:30 EDT (05:30 UTC) and 01:30 EST (06:30 UTC) on 2026-11-01
        (
            "America/New_York",
            "30 1 * * *",
            utc(2026, 11, 1, 3),
            utc(2026, 11, 1, 8),
            {},
            [utc(2026, 11, 1, 5, 30)],
        ),
        (
            "America/New_York",
            "30 1 * * *",
            utc(2026, 11, 1, 3),
            utc(2026, 11, 1, 8),
            {"fold": "both"},
            [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)],
        ),
        # an hourly cron measures elapsed time: the repeated hour fires twice, the skipped once
        (
            "Europe/Paris",
            "0 * * * *",
            utc(2026, 10, 24, 23, 30),
            utc(2026, 10, 25, 2, 30),
            {},
            [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)],
        ),
    ],
)
def test_dst_fires_through_the_daemon(
    tmp_path: Path,
    quick: str,
    tz: str,
    cron: str,
    start: datetime,
    end: datetime,
    policy: dict[str, str],
    expected: list[datetime],
) -> None:
    clock = FakeClock(start)
    with Store(tmp_path / "dst.db") as store:
        daemon = Daemon(store, clock, DaemonConfig(concurrency=2))
        add(store, clock, "dst", quick, cron=cron, tz=tz, **policy)
        step_until(daemon, clock, end, timedelta(minutes=10))
        runs = runs_of(store, "dst")
        assert [r.scheduled_at for r in runs] == expected
        assert all(r.status is RunStatus.COMPLETED for r in runs)
        # each run started on its fire tick (steps of 10 min): never a fire missed or doubled
        assert all(r.started_at - r.scheduled_at < timedelta(minutes=10) for r in runs)


# ---------------------------------------------------------------- clock and pause


def test_a_clock_jumping_backwards_refires_nothing(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC", missed="all")
    fake_clock.advance(timedelta(minutes=1))  # 01:00
    daemon.tick()
    assert len(runs_of(store, "hourly")) == 1
    fake_clock.set(utc(2026, 3, 28, 22), monotonic_too=False)  # NTP steps back 3 hours
    daemon.tick()
    assert store.get_schedule("hourly").next_fire_at == utc(2026, 3, 29, 2)
    step_until(daemon, fake_clock, utc(2026, 3, 29, 1, 30), timedelta(minutes=10))
    assert len(runs_of(store, "hourly")) == 1  # 23:00, 00:00 and 01:00 again: nothing
    step_until(daemon, fake_clock, utc(2026, 3, 29, 2), timedelta(minutes=10))
    assert [r.scheduled_at for r in runs_of(store, "hourly")] == [
        utc(2026, 3, 29, 1),
        utc(2026, 3, 29, 2),
    ]


def test_pause_and_resume_never_backfill(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    add(
        store,
        fake_clock,
        "hourly",
        quick,
        cron="0 * * * *",
        tz="UTC",
        missed="all",
        overlap="allow",
    )
    paused = schedule_ops.pause_schedule(store, "hourly", clock=fake_clock)
    assert paused.row.paused and paused.row.next_fire_at is None
    again = schedule_ops.pause_schedule(store, "hourly", clock=fake_clock)  # idempotent
    assert again.row == store.get_schedule("hourly") == paused.row  # nothing written
    step_until(daemon, fake_clock, utc(2026, 3, 29, 3, 30), timedelta(minutes=30))
    assert runs_of(store, "hourly") == []
    resumed = schedule_ops.resume_schedule(store, "hourly", clock=fake_clock)
    assert resumed.row.next_fire_at == utc(2026, 3, 29, 4)
    fake_clock.advance(timedelta(minutes=1))
    assert schedule_ops.resume_schedule(store, "hourly", clock=fake_clock).row == resumed.row
    step_until(daemon, fake_clock, utc(2026, 3, 29, 4), timedelta(minutes=30))
    assert [r.scheduled_at for r in runs_of(store, "hourly")] == [utc(2026, 3, 29, 4)]


def test_trigger_fires_now_once_per_trigger_without_moving_the_calendar(
    store: Store, fake_clock: FakeClock, daemon: Daemon, quick: str
) -> None:
    add(store, fake_clock, "hourly", quick, cron="0 * * * *", tz="UTC", overlap="allow")
    before = store.get_schedule("hourly")
    first = schedule_ops.trigger_schedule(store, "hourly", clock=fake_clock)
    same = schedule_ops.trigger_schedule(store, "hourly", clock=fake_clock)  # a retried trigger
    assert first.outcome.created and first.run is not None
    assert not same.outcome.created and same.outcome.run_id == first.run.run_id
    # the key keeps its +00:00 spelling (firing._key_instant), whatever --json prints
    assert (
        first.run.key
        == f"schedule:hourly:manual:{fake_clock.now().isoformat(timespec='microseconds')}"
    )
    assert first.run.scheduled_at == fake_clock.now()
    fake_clock.advance(timedelta(seconds=5))
    schedule_ops.trigger_schedule(store, "hourly", clock=fake_clock)
    daemon.tick()
    assert [r.status for r in runs_of(store, "hourly")] == [RunStatus.COMPLETED] * 2
    assert history(store, "hourly") == ["manual", "manual"]
    after = store.get_schedule("hourly")
    assert (after.last_fire_at, after.next_fire_at) == (before.last_fire_at, before.next_fire_at)


def test_trigger_follows_overlap_skip(
    store: Store, fake_clock: FakeClock, daemon: Daemon, slow: str
) -> None:
    add(store, fake_clock, "s", slow, cron="0 0 1 1 *", tz="UTC")
    schedule_ops.trigger_schedule(store, "s", clock=fake_clock)
    daemon.tick()
    fake_clock.advance(timedelta(seconds=1))
    second = schedule_ops.trigger_schedule(store, "s", clock=fake_clock)
    assert second.run is None and second.outcome.action == "skipped-overlap"
    assert "still sleeping" in (second.outcome.detail or "")


# ---------------------------------------------------------------- failures stay local


def test_a_workflow_that_fails_to_load_is_recorded_and_the_daemon_moves_on(
    store: Store, fake_clock: FakeClock, daemon: Daemon, tmp_path: Path, quick: str
) -> None:
    path = tmp_path / "ping.yaml"
    path.write_text(PING)
    add(store, fake_clock, "broken", str(path), cron="0 * * * *", tz="UTC")
    add(store, fake_clock, "fine", quick, cron="0 * * * *", tz="UTC")
    path.unlink()
    fake_clock.advance(timedelta(minutes=1))
    daemon.tick()  # does not raise
    (event,) = store.schedule_history("broken", 10)
    assert event.action == "error" and "does not exist" in (event.detail or "")
    assert store.get_schedule("broken").next_fire_at == utc(2026, 3, 29, 2)
    assert len(runs_of(store, "fine")) == 1  # the other schedule fired as usual
    path.write_text(PING)
    fake_clock.advance(timedelta(hours=1))
    daemon.tick()
    (run,) = runs_of(store, "broken")
    assert run.status is RunStatus.COMPLETED
    assert history(store, "broken") == ["error", "fired"]


def test_run_forever_wakes_for_schedule_fires(
    store: Store, fake_clock: FakeClock, quick: str
) -> None:
    """The real loop: its wait includes the next fire, and the runs it fires (its own writes,
    invisible to data_version) are claimed at once."""
    add(store, fake_clock, "beat", quick, every="15m")
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2, lease=15, heartbeat=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        for fires in (1, 2):
            fake_clock.advance(timedelta(minutes=15))
            wait_until(
                lambda n=fires: (
                    [r.status for r in runs_of(store, "beat")] == [RunStatus.COMPLETED] * n
                ),
                timeout=10,
            )
    finally:
        daemon.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_migration_2_upgrades_a_version_1_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    import sqlite_utils

    MIGRATIONS[0](sqlite_utils.Database(conn))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Store(path) as s:
        assert s.list_schedules() == []
        assert s.next_schedule_fire() is None


def test_stored_spec_round_trips(store: Store, fake_clock: FakeClock, quick: str) -> None:
    info = add(
        store, fake_clock, "x", quick, cron="@daily", tz="Europe/Paris", fold="both", jitter="1m"
    )
    assert ScheduleSpec.from_json(store.get_schedule("x").spec) == info.spec


# ---------------------------------------------------------------- declared schedules


def _yaml(name: str, schedule: str) -> str:
    return f"name: {name}\n{schedule}steps:\n  - id: pong\n    run: [echo, pong]\n"


def test_yaml_schedules_sync_add_update_remove(
    store: Store, fake_clock: FakeClock, tmp_path: Path, quick: str
) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "ping.yaml").write_text(_yaml("ping", "schedule:\n  every: 15m\n"))
    (folder / "multi.yaml").write_text(
        _yaml(
            "multi",
            "schedule:\n  - cron: '0 9 * * *'\n    tz: Europe/Paris\n"
            "  - {name: multi-night, cron: '0 22 * * *', tz: UTC, overlap: queue}\n",
        )
    )
    add(store, fake_clock, "by-hand", quick, cron="0 * * * *", tz="UTC")

    def sync() -> schedule_ops.SyncReport:
        return schedule_ops.sync_schedules(store, clock=fake_clock, workflows_dir=folder)

    report = sync()
    assert sorted(report.added) == ["multi-1", "multi-night", "ping"]
    ping = store.get_schedule("ping")
    assert (ping.source, ping.origin) == ("yaml", str((folder / "ping.yaml").resolve()))
    assert ping.next_fire_at == fake_clock.now() + timedelta(minutes=15)
    assert sync().unchanged == ["multi-1", "multi-night", "ping"]
    # a changed input keeps the every anchor; a changed rule redefines
    fake_clock.advance(timedelta(minutes=7))
    (folder / "ping.yaml").write_text(
        _yaml(
            "ping",
            "input: {n: {type: int, default: 0}}\nschedule:\n  every: 15m\n  input: {n: 2}\n",
        )
    )
    assert sync().updated == ["ping"]
    assert store.get_schedule("ping").next_fire_at == utc(2026, 3, 29, 1, 14)
    (folder / "multi.yaml").write_text(
        _yaml("multi", "schedule:\n  cron: '0 10 * * *'\n  tz: UTC\n")
    )
    report = sync()
    assert (report.added, report.removed) == (["multi"], ["multi-1", "multi-night"])
    (folder / "multi.yaml").unlink()
    assert sync().removed == ["multi"]
    assert sorted(r.name for r in store.list_schedules()) == ["by-hand", "ping"]  # cli untouched


def test_sync_is_all_or_nothing(store: Store, fake_clock: FakeClock, tmp_path: Path) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "good.yaml").write_text(_yaml("good", "schedule:\n  every: 1h\n"))
    (folder / "bad.yaml").write_text(_yaml("bad", "schedule:\n  cron: '0 25 * * *'\n"))
    with pytest.raises(schedule_ops.ValidationError) as err:
        schedule_ops.sync_schedules(store, clock=fake_clock, workflows_dir=folder)
    assert (
        "bad.yaml:3:9: schedule.cron: invalid cron expression '0 25 * * *'" in err.value.problems[0]
    )
    assert store.list_schedules() == []


def test_sync_refuses_a_name_added_by_hand(
    store: Store, fake_clock: FakeClock, tmp_path: Path, quick: str
) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "ping.yaml").write_text(_yaml("ping", "schedule:\n  every: 1h\n"))
    add(store, fake_clock, "ping", quick, every="2h")
    with pytest.raises(schedule_ops.ValidationError, match="was added with `flowctl schedule add`"):
        schedule_ops.sync_schedules(store, clock=fake_clock, workflows_dir=folder)
    assert store.get_schedule("ping").source == "cli"


def test_declared_schedules_cannot_be_replaced_or_removed_from_the_cli(
    store: Store, fake_clock: FakeClock, tmp_path: Path, quick: str
) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "ping.yaml").write_text(_yaml("ping", "schedule:\n  every: 1h\n"))
    schedule_ops.sync_schedules(store, clock=fake_clock, workflows_dir=folder)
    with pytest.raises(schedule_ops.ScheduleError, match=r"declared in .*ping\.yaml"):
        schedule_ops.remove_schedule(store, "ping")
    with pytest.raises(schedule_ops.ScheduleError, match="declared in"):
        add(store, fake_clock, "ping", quick, every="1h", replace=True)
    schedule_ops.pause_schedule(store, "ping", clock=fake_clock)  # pausing one is fine
    schedule_ops.sync_schedules(store, clock=fake_clock, workflows_dir=folder)
    assert store.get_schedule("ping").paused  # and a sync keeps it paused
