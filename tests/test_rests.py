"""Short sleeps and step retries waited out in memory (issue 40: flowctl.daemon.rests,
flowctl.store.resting, flowctl.runtime.timed).

The daemon's batch runner keeps a handler whose run sleeps or waits to retry for up to
REST_MAX on its stack: the pending call is journaled and the run let go first (durable,
as a park), then taken back at the wake, with no claim and no replay. What a user sees is
checked from the database and from the bodies' own effects (a line per handler start and
per step body, in a file): the handler starts once, each body runs as often as it should,
the timeline says what happened; a cancel asked meanwhile ends the run before its next
step; a daemon that stops or is killed meanwhile leaves the run for the next one, which
goes on from the journal with no step run twice and no suspect.

Resting greenlets wait on real time (the system clock): these runs sleep 100 ms to 1 s.
Each test runs on a SQLite file and on PostgreSQL (the `db` fixture).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import ParkedRound, logged_daemon, query, wait_until

from flowctl import ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig, rests
from flowctl.daemon.rests import REST_MARGIN, REST_MAX
from flowctl.model import EntryState, JournalEntry, RunStatus, to_us
from flowctl.store import Lease, Store, open_store

# The wait of a handed-over run (handed_over): long enough that the second daemon takes it
# back well before its wake on a slow, loaded host (0.1 s on SQLite, 0.4 s on PostgreSQL
# measured; with 1.9 s, the most REST_MAX allows, a slower host would miss the early path
# these tests are about), so REST_MAX is raised above it for them.
HANDOVER_WAIT = 6.0


FLOWS = """
import os

from flowctl import RetryPolicy, step, workflow


def note(effects, what):
    with open(effects, "a") as f:
        f.write(what + "\\n")


def add(effects, n, what):
    note(effects, what)
    return n + 1


@workflow
def nap(ctx, effects, n=0, seconds=0.1):
    note(effects, f"start {ctx.run_id}")
    a = ctx.step("one", add, effects, n, f"one {ctx.run_id}")
    ctx.sleep(seconds)
    return ctx.step("two", add, effects, a, f"two {ctx.run_id}")


@step(retry=RetryPolicy.make(max_attempts=3, backoff="100ms", jitter=0))
def fail_once(effects, marker):
    note(effects, f"try {marker}")
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return "ok"
    raise RuntimeError("first try fails")


@workflow
def retried(ctx, effects, marker):
    note(effects, f"start {ctx.run_id}")
    return ctx.step("flaky", fail_once, effects, marker)


@step(retry=RetryPolicy.make(max_attempts=3, backoff="HANDOVER_WAITs", jitter=0))
def fail_once_slowly(effects, marker):
    return fail_once(effects, marker)


@workflow
def slow_retry(ctx, effects, marker):
    note(effects, f"start {ctx.run_id}")
    return ctx.step("flaky", fail_once_slowly, effects, marker)
""".replace("HANDOVER_WAIT", f"{HANDOVER_WAIT:g}")  # slow_retry's backoff


@pytest.fixture
def flows(tmp_path: Path) -> str:
    path = tmp_path / "rest_flows.py"
    path.write_text(FLOWS)
    return str(path)


@contextmanager
def serving_daemon(db: str) -> Iterator[Daemon]:
    """A daemon on the system clock serving `db` (with its batch runner) for the block."""
    daemon = Daemon(open_store(db), SystemClock(), DaemonConfig(concurrency=8, heartbeat=0.2))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        assert daemon.serving.wait(10)
        yield daemon
    finally:
        daemon.stop(drain=False)
        thread.join(10)
        daemon.store.close()
    assert not thread.is_alive()


@pytest.fixture
def serving(db: str) -> Iterator[Daemon]:
    """A daemon serving with its batch runner (where runs rest), for the test."""
    with serving_daemon(db) as daemon:
        yield daemon


def start(db: str, target: str, inputs: list[dict[str, object]]) -> list[str]:
    with open_store(db) as s:
        return [ops.start(s, target, i, clock=SystemClock()).run.run_id for i in inputs]


def status(db: str, run_id: str) -> RunStatus:
    with open_store(db) as s:
        return s.get_run(run_id).status


def events(db: str, run_id: str) -> list[str]:
    rows = query(db, "SELECT type FROM timeline WHERE run_id = ? ORDER BY seq", (run_id,))
    return [str(r[0]) for r in rows]


def lines(effects: Path) -> list[str]:
    return effects.read_text().splitlines() if effects.exists() else []


def test_a_short_sleep_rests_in_memory_its_handler_started_once(
    db: str, tmp_path: Path, flows: str, serving: Daemon
) -> None:
    effects = tmp_path / "effects"
    ids = start(db, f"{flows}:nap", [{"effects": str(effects), "n": i} for i in range(6)])
    wait_until(lambda: all(status(db, r) is RunStatus.COMPLETED for r in ids), timeout=20)
    seen = lines(effects)
    with open_store(db) as s:
        for i, rid in enumerate(ids):
            run = s.get_run(rid)
            assert run.result == i + 2
            # No replay: the handler started once and each body ran once.
            assert [seen.count(f"{w} {rid}") for w in ("start", "one", "two")] == [1, 1, 1]
            # Taken back by its own handler: a second fence, with the wake in the timeline
            # (no claim, so no second `claimed` event).
            assert run.fence == 2
            kinds = events(db, rid)
            assert kinds == ["claimed", "sleep started", "woke", "completed"]
            [woke] = [e.data for e in s.timeline(rid) if e.type == "woke"]
            assert (woke["fence"], woke["attempt"], woke["from"]) == (2, 1, "sleeping")
            sleep = s.journal(rid)[1]
            assert (sleep.kind, sleep.state) == ("sleep", EntryState.DONE)
            assert sleep.resolved_at is not None and sleep.wake_at is not None
            assert sleep.resolved_at >= sleep.wake_at  # never woken early
    late = query(db, "SELECT data FROM timeline WHERE type = 'woke'")
    assert len(late) == 6


class RoundWatch(threading.Event):
    """The daemon loop's wake, counting the batch runner's wakes in rounds whose own claim
    took runs (the runner calls its claim, then maybe this, once per round)."""

    def __init__(self) -> None:
        super().__init__()
        self.took = False  # what the runner's claim in its latest round did
        self.needless = 0

    def set(self) -> None:
        if threading.current_thread().name == "flowctl-runner" and self.took:
            self.needless += 1
        super().set()


def test_slots_freed_by_rests_are_refilled_by_the_rounds_claim_without_waking_the_loop(
    db: str, tmp_path: Path, flows: str
) -> None:
    """40 naps through 8 slots: each rest frees its slot, and the claim at the end of that
    round takes the next queued runs in the same transaction. The runner then does not wake
    the daemon's loop: it would only look again for what was just claimed. Before, every
    round of rests woke it, at least 4 times here (32 queued runs, 8 slots)."""
    n, effects = 40, tmp_path / "effects"
    daemon = Daemon(open_store(db), SystemClock(), DaemonConfig(concurrency=8, heartbeat=0.2))
    watch = daemon.life.wake = RoundWatch()
    claim_in_round = daemon.claim_in_round
    rounds: list[bool] = []

    def watched(writes: bool) -> bool:
        watch.took = claim_in_round(writes)
        rounds.append(watch.took)
        return watch.took

    daemon.claim_in_round = watched  # type: ignore[method-assign]
    ids = start(
        db, f"{flows}:nap", [{"effects": str(effects), "n": i, "seconds": 0.3} for i in range(n)]
    )
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    try:
        wait_until(lambda: all(status(db, r) is RunStatus.COMPLETED for r in ids), timeout=30)
    finally:
        daemon.stop(drain=False)
        thread.join(10)
        daemon.store.close()
    assert len(lines(effects)) == 3 * n  # no replay: every run rested
    assert rounds.count(True) >= 1  # rounds whose claim took queued runs
    assert watch.needless == 0


def test_a_failed_try_is_retried_in_memory_after_its_backoff(
    db: str, tmp_path: Path, flows: str, serving: Daemon
) -> None:
    effects = tmp_path / "effects"
    inputs = [{"effects": str(effects), "marker": str(tmp_path / f"m{i}")} for i in range(4)]
    ids = start(db, f"{flows}:retried", inputs)
    wait_until(lambda: all(status(db, r) is RunStatus.COMPLETED for r in ids), timeout=20)
    seen = lines(effects)
    with open_store(db) as s:
        for rid, given in zip(ids, inputs, strict=True):
            assert s.get_run(rid).result == "ok"
            assert seen.count(f"start {rid}") == 1  # the handler went on, not replayed
            assert seen.count(f"try {given['marker']}") == 2
            step = s.journal(rid)[0]
            assert (step.state, step.tries) == (EntryState.DONE, 2)
            kinds = events(db, rid)
            assert kinds[1:] == ["step retry scheduled", "woke", "completed"]


def test_a_sleep_longer_than_a_rest_parks_the_run_as_before(
    db: str, tmp_path: Path, flows: str, serving: Daemon
) -> None:
    effects = tmp_path / "effects"
    [rid] = start(db, f"{flows}:nap", [{"effects": str(effects), "seconds": REST_MAX + 30}])
    wait_until(lambda: status(db, rid) is RunStatus.SLEEPING, timeout=20)
    with open_store(db) as s:
        run = s.get_run(rid)
        assert run.lease_owner is None and run.run_at is not None
        assert s.journal(rid)[1].state is EntryState.PENDING


def resting_nap(db: str, tmp_path: Path, flows: str) -> tuple[str, Path]:
    """A run of `nap` (one second), once it rests in its sleep; and its effects file."""
    effects = tmp_path / "effects"
    [rid] = start(db, f"{flows}:nap", [{"effects": str(effects), "seconds": 1.0}])
    wait_until(lambda: "sleep started" in events(db, rid), timeout=20)
    return rid, effects


def test_a_cancel_asked_while_resting_ends_the_run_before_its_next_step(
    db: str, tmp_path: Path, flows: str, serving: Daemon
) -> None:
    rid, effects = resting_nap(db, tmp_path, flows)
    with open_store(db) as s:
        resting = s.get_run(rid)
        # It rests: still running, let go (no owner), due to others only after its wake.
        assert resting.status is RunStatus.RUNNING and resting.lease_owner is None
        why = ops.why_run(s, rid, clock=SystemClock())
        assert why.reason == "resting" and "waits in memory for its sleep" in why.message
        ops.cancel(s, rid, clock=SystemClock(), reason="changed my mind")
    wait_until(lambda: status(db, rid) is RunStatus.CANCELLED, timeout=20)
    assert f"two {rid}" not in lines(effects)
    assert lines(effects).count(f"start {rid}") == 1


def test_a_pause_asked_while_resting_parks_the_run_at_its_next_call_and_resume_ends_it(
    db: str, tmp_path: Path, flows: str, serving: Daemon
) -> None:
    rid, effects = resting_nap(db, tmp_path, flows)
    with open_store(db) as s:
        ops.pause(s, rid, clock=SystemClock())
    wait_until(lambda: status(db, rid) is RunStatus.PAUSED, timeout=20)
    assert f"two {rid}" not in lines(effects)  # parked before the step after the sleep
    with open_store(db) as s:
        assert s.journal(rid)[1].state is EntryState.DONE  # the sleep itself is over
        ops.resume(s, rid, clock=SystemClock())
    wait_until(lambda: status(db, rid) is RunStatus.COMPLETED, timeout=20)
    seen = lines(effects)
    assert [seen.count(f"{w} {rid}") for w in ("one", "two")] == [1, 1]


def test_a_drained_daemon_leaves_resting_runs_to_the_next_without_a_suspect(
    db: str, tmp_path: Path, flows: str
) -> None:
    effects = tmp_path / "effects"
    first = Daemon(open_store(db), SystemClock(), DaemonConfig(concurrency=8, heartbeat=0.2))
    thread = threading.Thread(target=first.run_forever, daemon=True)
    thread.start()
    inputs = [{"effects": str(effects), "n": i, "seconds": 0.3} for i in range(4)]
    ids = start(db, f"{flows}:nap", inputs)
    wait_until(lambda: all("sleep started" in events(db, r) for r in ids), timeout=20)
    first.stop(drain=True)
    thread.join(10)
    first.store.close()
    assert not thread.is_alive()
    assert all(status(db, r) is RunStatus.RUNNING for r in ids)  # resting, let go
    assert all(events(db, r)[-1] == "released" for r in ids)  # handed back: due now
    with serving_daemon(db):
        wait_until(lambda: all(status(db, r) is RunStatus.COMPLETED for r in ids), 20)
    seen = lines(effects)
    for rid in ids:
        assert seen.count(f"one {rid}") == 1 and seen.count(f"two {rid}") == 1
        assert seen.count(f"start {rid}") == 2  # replayed once in the second daemon
        kinds = events(db, rid)
        assert "reclaimed" in kinds and "suspect" not in kinds


def handed_over(
    db: str,
    target: str,
    inputs: list[dict[str, object]],
    resting: str,
    monkeypatch: pytest.MonkeyPatch,
) -> list[str]:
    """Runs of `target` rest in a first daemon (each has its `resting` event), which is
    drained while a second already serves: the second takes them back at once, before
    their wakes (HANDOVER_WAIT after their rests), and ends them."""
    monkeypatch.setattr(rests, "REST_MAX", HANDOVER_WAIT + 1)
    with serving_daemon(db) as first:
        ids = start(db, target, inputs)
        wait_until(lambda: all(resting in events(db, r) for r in ids), timeout=20)
        with serving_daemon(db):  # resting runs are nobody's until their margin: idle
            first.stop(drain=True)
            wait_until(lambda: all(status(db, r) is RunStatus.COMPLETED for r in ids), 20)
    return ids


def test_a_sleep_replayed_before_its_wake_rests_through_what_is_left_of_it(
    db: str, tmp_path: Path, flows: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that replays a run before its sleep's wake waits out what is left in
    memory (`sleep resumed`): the run is replayed once there, not parked, claimed at the
    wake and replayed again; the sleep keeps the time it was journaled, which `why` says."""
    effects = tmp_path / "effects"
    inputs = [{"effects": str(effects), "n": i, "seconds": HANDOVER_WAIT} for i in range(4)]
    ids = handed_over(db, f"{flows}:nap", inputs, "sleep started", monkeypatch)
    seen = lines(effects)
    for rid in ids:
        assert [seen.count(f"{w} {rid}") for w in ("start", "one", "two")] == [2, 1, 1]
        kinds = events(db, rid)
        assert "sleep resumed" in kinds and "suspect" not in kinds
        with open_store(db) as s:
            sleep = s.journal(rid)[1]
        [(began,)] = query(
            db, "SELECT at FROM timeline WHERE run_id = ? AND type = 'sleep started'", (rid,)
        )
        assert sleep.state is EntryState.DONE and sleep.recorded_at is not None
        assert to_us(sleep.recorded_at) == began  # journaled with its first rest, kept since
        assert sleep.resolved_at is not None and sleep.wake_at is not None
        assert sleep.resolved_at >= sleep.wake_at  # never woken early


def test_a_retry_replayed_before_its_time_rests_through_the_rest_of_its_backoff(
    db: str, tmp_path: Path, flows: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first try fails and its backoff (HANDOVER_WAIT) rests in a daemon that is
    drained; the next replays the run before the retry time and waits out what is left of
    the backoff in memory: one handler start there, and the second try once, after it."""
    effects = tmp_path / "effects"
    inputs = [{"effects": str(effects), "marker": str(tmp_path / f"m{i}")} for i in range(3)]
    ids = handed_over(db, f"{flows}:slow_retry", inputs, "step retry scheduled", monkeypatch)
    seen = lines(effects)
    for i, rid in enumerate(ids):
        assert seen.count(f"start {rid}") == 2  # once in each daemon
        assert seen.count(f"try {tmp_path / f'm{i}'}") == 2  # the failed try, then its retry
        with open_store(db) as s:
            tried = s.journal(rid)[0]
            assert tried.state is EntryState.DONE and tried.value == "ok"
        kinds = events(db, rid)
        assert "suspect" not in kinds and kinds[-1] == "completed"
        # Its rest in the second daemon says when the retry is due again.
        assert kinds.count("step retry scheduled") == 2
        woke = query(db, "SELECT data FROM timeline WHERE run_id = ? AND type = 'woke'", (rid,))
        assert woke and all(json.loads(d)["late_ms"] >= 0 for (d,) in woke)  # not before


def test_runs_resting_in_a_killed_daemon_go_on_in_the_next_with_no_step_twice(
    db: str, tmp_path: Path, flows: str
) -> None:
    """SIGKILL of a real `flowctl daemon` while its runs rest: the next daemon, on the same
    host, finds it gone and takes each at once (not when the 15 s lease it let go would
    have ended), replays it from the journal (its first step not run again) and ends it;
    nobody died *in* a resting run, so none is a suspect."""
    effects = tmp_path / "effects"
    proc = logged_daemon(db, tmp_path / "d1.log", "--workers", "1")
    try:
        inputs = [{"effects": str(effects), "n": i, "seconds": 1.0} for i in range(8)]
        ids = start(db, f"{flows}:nap", inputs)
        wait_until(lambda: all("sleep started" in events(db, r) for r in ids), timeout=30)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert all(f"two {r}" not in lines(effects) for r in ids)
    proc = logged_daemon(db, tmp_path / "d2.log", "--workers", "1")
    try:
        done = lambda: all(status(db, r) is RunStatus.COMPLETED for r in ids)  # noqa: E731
        wait_until(done, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    seen = lines(effects)
    for rid in ids:
        assert [seen.count(f"{w} {rid}") for w in ("one", "two")] == [1, 1]
        kinds = events(db, rid)
        assert "suspect" not in kinds and kinds[-1] == "completed"
        # Replayed once in the second daemon: if that was before its wake, it rested
        # there through what was left of its sleep (`sleep resumed`), not parked.
        assert seen.count(f"start {rid}") == 2
        at = dict(
            query(db, "SELECT type, MIN(at) FROM timeline WHERE run_id = ? GROUP BY type", (rid,))
        )
        assert at["reclaimed"] < at["claimed"] + 15_000_000  # before the lease's end


def naps(s: Store, flows: str, clock: FakeClock, n: int) -> list[str]:
    """`n` runs of `nap` started on the fake clock, for the store's side of a rest."""
    started = [
        ops.start(s, f"{flows}:nap", {"effects": "x", "n": i}, clock=clock) for i in range(n)
    ]
    return [one.run.run_id for one in started]


def rest(s: Store, lease: Lease, now: datetime) -> tuple[datetime, datetime]:
    """The run of `lease` rests, at `now`, in its sleep of 1 s: (its wake, its margin)."""
    wake = now + timedelta(seconds=1)
    margin = wake + timedelta(seconds=REST_MARGIN)
    sleep = JournalEntry(lease.run_id, 1, "sleep", "sleep", EntryState.PENDING, None, wake_at=wake)
    assert s.rest_run(lease, sleep, margin, now, 0.01, ("sleep started", {}))
    return wake, margin


def test_the_runs_resting_in_a_daemon_found_dead_are_due_at_once(
    db: str, fake_clock: FakeClock, flows: str
) -> None:
    """A rest gives its lease up, and names the daemon it rests in: that daemon is among
    the owners the reaper checks, and once it is found dead its resting runs are due now
    (handed back: no suspect), not when the lease they let go would have ended. A run
    resting in another daemon is left alone; a resumed run is held by its lease again."""
    with open_store(db) as s:
        ids = naps(s, flows, fake_clock, 3)
        now = fake_clock.now()
        leases = []
        for owner in ("dead", "alive", "back"):
            [claim], _ = s.claim_due(owner, now, now + timedelta(seconds=15), 1)
            wake, _ = rest(s, claim.lease, now)
            leases.append(claim.lease)
        assert sorted(s.running_owners()) == ["alive", "back", "dead"]
        assert s.resume_run(leases[2], RunStatus.SLEEPING, wake, wake, wake, 1) is not None
        rested_by = "SELECT rested_by FROM runs WHERE run_id = ?"
        assert [r[0] for r in query(db, rested_by, (ids[2],))] == [None]  # resumed
        assert s.claim_due("b", wake, wake + timedelta(seconds=15), 8)[0] == []
        assert s.expire_owner("dead", wake) == 1
        [taken], _ = s.claim_due("b", wake, wake + timedelta(seconds=15), 8)
        assert taken.run.run_id == leases[0].run_id == ids[0]
        assert not taken.run.suspect and taken.run.reclaims == 0
        assert sorted(s.running_owners()) == ["alive", "b", "back"]


@pytest.mark.parametrize("lease", [15.0, 1.5], ids=["lease-after-margin", "lease-before"])
def test_a_resting_run_is_nobodys_until_its_margin_and_a_stale_resume_writes_nothing(
    db: str, fake_clock: FakeClock, flows: str, lease: float
) -> None:
    """The store's side, on a fake clock: no claim takes a resting run before the later of
    its margin and the end of the lease it let go (that end kept as it was: the rest moves
    no index entry); then another claimer does, and the handler's late resume is refused."""
    with open_store(db) as s:
        [rid] = naps(s, flows, fake_clock, 1)
        now = fake_clock.now()
        [claim], _ = s.claim_due("a", now, now + timedelta(seconds=lease), 1)
        wake, margin = rest(s, claim.lease, now)
        due = max(margin, now + timedelta(seconds=lease))
        assert s.get_run(rid).run_at == due
        for at in (wake, due - timedelta(microseconds=1)):
            assert s.claim_due("b", at, at + timedelta(seconds=15), 8)[0] == []
        [taken], _ = s.claim_due("b", due, due + timedelta(seconds=15), 8)
        assert taken.lease.fence == 2 and taken.run.reclaims == 0 and not taken.run.suspect
        late = s.resume_run(claim.lease, RunStatus.SLEEPING, wake, due, due, 1, keep_from=due)
        assert late is None
        assert s.get_run(rid).lease_owner == "b"


@pytest.mark.parametrize("left", [7.5, 14.5], ids=["kept", "new"])
def test_a_resumed_run_keeps_the_lease_it_let_go_while_enough_of_it_is_left(
    db: str, fake_clock: FakeClock, flows: str, left: float
) -> None:
    """At the wake the handler takes its run back with the lease it let go when that ends
    at or after `keep_from` (its run_at unchanged, lease_until the same), else with a new
    one until `lease_until`; a new fence either way, alone or in a round's batch."""
    with open_store(db) as s:
        ids = naps(s, flows, fake_clock, 3)
        now = fake_clock.now()
        end = now + timedelta(seconds=15)
        claims, _ = s.claim_due("a", now, end, 3)
        for c in claims:
            wake, _ = rest(s, c.lease, now)
        keep_from = wake + timedelta(seconds=left)
        new_end = wake + timedelta(seconds=15)
        first = s.resume_run(
            claims[0].lease, RunStatus.SLEEPING, wake, wake, new_end, 1, keep_from=keep_from
        )
        rounds = ParkedRound(s)
        try:
            got: list[object] = []
            for c in claims[1:]:
                rounds.start(
                    lambda c=c: got.append(
                        s.resume_run(
                            c.lease, RunStatus.SLEEPING, wake, wake, new_end, 1, keep_from=keep_from
                        )
                    )
                )
            rounds.write_round()
        finally:
            rounds.close()
        assert first is not None and all(r is not None for r in got)
        expected = end if left <= 14 else new_end
        for rid in ids:
            run = s.get_run(rid)
            assert (run.lease_owner, run.fence) == ("a", 2)
            assert run.run_at == run.lease_until == expected
