"""The notification outbox through the Store protocol, on both backends: an ending writes
its row in the ending's own transaction, one deliverer at a time claims it, and a try's
outcome settles it (delivered, due again, failed for good)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import ParkedRound, open_same

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.notifier import Notifier
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.notify import NotifyConfig
from flowctl.store import Store

FLOWS = """\
from flowctl import NonRetryableError, workflow

@workflow
def fine(ctx):
    return "ok"

@workflow
def doomed(ctx):
    ctx.step("boom", lambda: (_ for _ in ()).throw(NonRetryableError("no way")))

@workflow(notify={"on": ["completed"], "webhook": "https://example.invalid/hook"})
def loud(ctx):
    return "done"

@workflow
def waits(ctx):
    ctx.wait_signal("go")
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def start(store: Store, flows: Path, fn: str, clock: FakeClock) -> str:
    return ops.start(store, f"{flows}:{fn}", {}, clock=clock).run.run_id


def ended_world(store: Store, flows: Path, clock: FakeClock) -> dict[str, str]:
    """A completed, a dead, a cancelled and a waiting run, ended by the daemon and an operator."""
    ids = {fn: start(store, flows, fn, clock) for fn in ("fine", "doomed", "loud", "waits")}
    daemon = Daemon(store, clock, DaemonConfig(concurrency=4))
    for _ in range(3):
        daemon.tick()
    cancelled = start(store, flows, "waits", clock)
    ops.cancel(store, cancelled, clock=clock)
    ids["cancelled"] = cancelled
    return ids


def test_every_ending_writes_one_pending_row_with_the_pinned_override(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    ids = ended_world(store, flows, fake_clock)
    assert store.get_run(ids["waits"]).status is RunStatus.WAITING
    rows = store.due_notifications(fake_clock.now())
    got = {r.run_id: (r.status, r.error_kind, r.tries, r.channels_done) for r in rows}
    assert got == {
        ids["fine"]: ("completed", None, 0, ()),
        ids["doomed"]: ("dead", "non_retryable", 0, ()),
        ids["loud"]: ("completed", None, 0, ()),
        ids["cancelled"]: ("cancelled", "cancelled", 0, ()),
    }
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)  # oldest first
    override = {r.run_id: r.override for r in rows}
    assert override[ids["loud"]] == {"on": ["completed"], "webhook": "https://example.invalid/hook"}
    assert override[ids["fine"]] is None
    assert all(r.created_at == fake_clock.now() for r in rows)
    assert len(store.due_notifications(fake_clock.now(), limit=2)) == 2
    assert store.due_notifications(fake_clock.now() - timedelta(seconds=1)) == []


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "in-a-round"])
def test_completions_no_channel_wants_leave_no_row_but_a_runs_override_does(
    store: Store, flows: Path, fake_clock: FakeClock, batched: bool
) -> None:
    """A store told that no channel wants completions (the daemon's [notify] has none, or
    none `on` completed) writes no outbox row for a completion, which its notifier would
    only drop, except for a run with a notify override of its own; told nothing, it
    writes every one. Both ways a completion is written: alone, and a round's together."""
    quiet = [start(store, flows, "fine", fake_clock) for _ in range(3)]
    loud = start(store, flows, "loud", fake_clock)
    told = start(store, flows, "fine", fake_clock)
    now = fake_clock.now()
    got, _ = store.claim_due("me/1/1/0", now, now + timedelta(seconds=30), 5)
    leases = {c.run.run_id: c.lease for c in got}
    assert set(leases) == {*quiet, loud, told}

    def complete(run_id: str) -> None:
        links = (None, None) if batched else None
        done = store.complete_run(
            leases[run_id], "ok", now, 0.001, entry=checkpoint(run_id), links=links
        )
        assert done

    store.leave_untold(["completed", "dead", "cancelled"])
    if batched:
        runner = ParkedRound(store)
        for run_id in [*quiet, loud]:
            runner.start(complete, run_id)
        runner.write_round()
        runner.close()
    else:
        for run_id in [*quiet, loud]:
            complete(run_id)
    store.leave_untold([])
    complete(told)
    assert all(store.get_run(r).status is RunStatus.COMPLETED for r in leases)
    rows = store.due_notifications(now)
    assert sorted(r.run_id for r in rows) == sorted([loud, told])
    assert {r.run_id: r.override for r in rows}[loud] == {
        "on": ["completed"],
        "webhook": "https://example.invalid/hook",
    }


def checkpoint(run_id: str) -> JournalEntry:
    """A done step at call index 0, the last checkpoint a completion journals with it."""
    return JournalEntry(run_id, 0, CallKind.STEP, "s", EntryState.DONE, 1)


def test_a_claim_is_taken_once_and_released_only_by_its_holder(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    run_id = start(store, flows, "fine", fake_clock)
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    (row,) = store.due_notifications(fake_clock.now())
    now, until = fake_clock.now(), fake_clock.now() + timedelta(seconds=30)
    assert store.claim_notification(row.seq, now, until, "d-1")
    assert not store.claim_notification(row.seq, now, until, "d-2")  # not due any more
    assert store.due_notifications(now) == []
    assert store.notification_claims(now) == [(row.seq, "d-1")]
    assert store.notification_claims(until) == []  # its try's budget ran out: due again
    assert not store.release_notification(row.seq, "d-2", now)
    assert store.release_notification(row.seq, "d-1", now)
    (again,) = store.due_notifications(now)
    assert (again.seq, again.run_id, again.tries) == (row.seq, run_id, 1)
    assert store.notification_claims(now) == []


def test_settling_delivers_retries_or_fails_and_appends_the_events(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    ids = [start(store, flows, "fine", fake_clock) for _ in range(3)]
    Daemon(store, fake_clock, DaemonConfig(concurrency=4)).tick()
    rows = {r.run_id: r for r in store.due_notifications(fake_clock.now())}
    now = fake_clock.now()
    later = now + timedelta(seconds=10)
    for r in rows.values():
        assert store.claim_notification(r.seq, now, now + timedelta(seconds=5), "d-1")
    delivered, retried, failed = (rows[i] for i in ids)
    store.settle_notification(
        delivered.seq,
        delivered.run_id,
        now,
        done=["webhook", "command"],
        error=None,
        retry_at=None,
        events=[("notified", {"channel": "webhook", "try": 1})],
    )
    store.settle_notification(
        retried.seq,
        retried.run_id,
        now,
        done=["command"],
        error="HTTP 500",
        retry_at=later,
        events=[("notify failed", {"error": "HTTP 500", "try": 1})],
    )
    store.settle_notification(
        failed.seq, failed.run_id, now, done=[], error="gone", retry_at=None, events=[]
    )
    assert store.due_notifications(later - timedelta(microseconds=1)) == []
    (due,) = store.due_notifications(later)
    assert (due.seq, due.channels_done, due.tries) == (retried.seq, ("command",), 1)
    assert store.notification_claims(now) == []  # settled rows are held by nobody
    notified = [e.data for e in store.timeline(delivered.run_id) if e.type == "notified"]
    assert notified == [{"channel": "webhook", "try": 1}]
    assert [e.type for e in store.timeline(retried.run_id)][-1] == "notify failed"
    outbox = dict(store.metrics_snapshot((1.0,), (1.0,)).notifications)
    assert outbox == {"delivered": 1, "failed": 1, "pending": 1}


def test_a_delivery_settled_after_its_run_was_pruned_notes_nothing(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    """prune deletes the run's outbox row and timeline itself (PostgreSQL keeps no foreign
    key from them to runs): a deliverer that settles a row of a run pruned meanwhile adds
    no event for a run that is gone, and raises nothing."""
    run_id = start(store, flows, "fine", fake_clock)
    Daemon(store, fake_clock, DaemonConfig(concurrency=4)).tick()
    (row,) = store.due_notifications(fake_clock.now())
    now = fake_clock.now()
    assert store.claim_notification(row.seq, now, now + timedelta(seconds=5), "d-1")
    fake_clock.advance(timedelta(days=1))
    pruned = store.prune_runs([RunStatus.COMPLETED], fake_clock.now(), 10)
    assert [p.run_id for p in pruned] == [run_id]
    store.settle_notification(
        row.seq,
        run_id,
        fake_clock.now(),
        done=["webhook"],
        error=None,
        retry_at=None,
        events=[("notified", {"channel": "webhook", "try": 1})],
    )
    assert store.timeline(run_id) == []
    assert store.due_notifications(fake_clock.now() + timedelta(days=1)) == []


def test_dropped_rows_are_gone(store: Store, flows: Path, fake_clock: FakeClock) -> None:
    for _ in range(3):
        start(store, flows, "fine", fake_clock)
    Daemon(store, fake_clock, DaemonConfig(concurrency=4)).tick()
    rows = store.due_notifications(fake_clock.now())
    store.drop_notifications([rows[0].seq, rows[2].seq])
    store.drop_notifications([])
    assert [r.seq for r in store.due_notifications(fake_clock.now())] == [rows[1].seq]


def test_unwanted_rows_are_dropped_in_bulk_by_status_but_never_a_runs_override(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    ids = ended_world(store, flows, fake_clock)
    now = fake_clock.now()
    assert store.drop_unwanted_notifications([], now, 100) == 0
    assert store.drop_unwanted_notifications(["completed"], now - timedelta(seconds=1), 100) == 0
    assert store.drop_unwanted_notifications(["completed"], now, 100) == 1  # `loud` has its own
    left = {r.run_id for r in store.due_notifications(now)}
    assert left == {ids["doomed"], ids["loud"], ids["cancelled"]}
    assert store.drop_unwanted_notifications(["dead", "cancelled"], now, 1) == 1  # the limit
    assert store.drop_unwanted_notifications(["dead", "cancelled"], now, 100) == 1
    assert {r.run_id for r in store.due_notifications(now)} == {ids["loud"]}


def test_racing_deliverers_on_separate_connections_claim_each_row_once(
    store: Store, flows: Path, fake_clock: FakeClock
) -> None:
    for _ in range(8):
        start(store, flows, "fine", fake_clock)
    Daemon(store, fake_clock, DaemonConfig(concurrency=8)).tick()
    seqs = [r.seq for r in store.due_notifications(fake_clock.now())]
    assert len(seqs) == 8
    others = [open_same(store) for _ in range(3)]
    barrier = threading.Barrier(len(others))
    won: dict[str, list[int]] = {}
    now = fake_clock.now()

    def deliverer(i: int, s: Store) -> None:
        barrier.wait()
        won[f"d-{i}"] = [
            seq
            for seq in seqs
            if s.claim_notification(seq, now, now + timedelta(seconds=30), f"d-{i}")
        ]

    threads = [threading.Thread(target=deliverer, args=(i, s)) for i, s in enumerate(others)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in others:
        s.close()
    claimed = sorted(seq for got in won.values() for seq in got)
    assert claimed == sorted(seqs)  # every row claimed, none twice
    holders = dict(store.notification_claims(now))
    assert all(holders[seq] == owner for owner, got in won.items() for seq in got)


def test_the_notifier_delivers_to_a_command_once_and_records_it(
    store: Store, flows: Path, tmp_path: Path, fake_clock: FakeClock
) -> None:
    out = tmp_path / "told.log"
    command = ("sh", "-c", f'echo "$FLOWCTL_RUN_ID $FLOWCTL_EVENT" >> {out}')
    config = NotifyConfig(on=frozenset({"dead"}), command=command)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=2))
    doomed = start(store, flows, "doomed", fake_clock)
    start(store, flows, "fine", fake_clock)  # completed: nobody wants it, its row is dropped
    daemon.tick()
    notifier = Notifier(store, fake_clock, config, daemon.owner)
    assert notifier.deliver_due() == 1
    assert notifier.deliver_due() == 0
    assert out.read_text().splitlines() == [f"{doomed} dead"]
    assert store.due_notifications(fake_clock.now() + timedelta(days=1)) == []
    told = [e.data for e in store.timeline(doomed) if e.type == "notified"]
    assert told == [{"channel": "command", "event": "dead", "try": 1}]
