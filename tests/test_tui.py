"""The TUI, driven by Textual's pilot: what each view lists, what each action writes, live
updates from another connection, and snapshots of the main screens.

Behaviour tests build their database the way a user would (ops.start + Daemon.tick on a
FakeClock) and assert on the store after each key press. Snapshot tests build theirs from
store transitions with fixed run ids, a fixed worker name and a synthetic traceback, so
the SVGs do not depend on temporary paths or the host.
"""

from __future__ import annotations

import asyncio
import functools
import textwrap
from collections.abc import Callable, Coroutine, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import open_same
from textual.css.query import NoMatches
from textual.filter import Monochrome
from textual.pilot import Pilot
from textual.widgets import Input
from textual.worker import WorkerCancelled

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.ops import schedules as schedule_ops
from flowctl.store import Lease, NewRun
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.tui import FlowctlApp, RunTable, SignalScreen

pytestmark = pytest.mark.tui


def pilot_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async pilot scenario as a plain test (no pytest-asyncio needed)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return run


FLOWS = textwrap.dedent(
    """
    from flowctl import workflow


    def fetch(user):
        return {"user": user}


    def boom(user):
        raise RuntimeError(f"upstream returned 503 for {user}\\nretry later")


    @workflow("nap")
    def nap(ctx, user: str = "u", hours: int = 48):
        ctx.step("fetch", fetch, user)
        ctx.sleep(hours * 3600)
        return "rested"


    @workflow("approve")
    def approve(ctx, user: str = "u"):
        ctx.step("fetch", fetch, user)
        return ctx.wait_signal("approved")


    @workflow("fail", max_attempts=1)
    def fail(ctx, user: str = "u"):
        ctx.step("fetch", fetch, user)
        ctx.step("boom", boom, user)


    @workflow("quick")
    def quick(ctx, user: str = "u"):
        return ctx.step("fetch", fetch, user)
    """
)


@pytest.fixture
def flows(flows_dir: Path) -> Path:
    path = flows_dir / "flows.py"
    path.write_text(FLOWS)
    return path


class Seeded:
    """A database with runs in every status, and their ids by status."""

    def __init__(self, store: Store, clock: FakeClock, flows: Path) -> None:
        self.store = store
        self.clock = clock
        self.flows = flows
        self.ids: dict[str, list[str]] = {}

    def start(self, name: str, **kwargs: Any) -> str:
        inputs = kwargs.pop("input", {"user": "ana"})
        started = ops.start(
            self.store,
            f"{self.flows}:{name}",
            inputs,
            clock=self.clock,
            cwd=str(self.flows.parent),
            **kwargs,
        )
        return started.run.run_id


@pytest.fixture
def seeded(store: Store, fake_clock: FakeClock, flows: Path) -> Seeded:
    s = Seeded(store, fake_clock, flows)
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=8, lease=15, heartbeat=1))
    late = s.start("nap", input={"user": "bea", "hours": 48})
    soon = s.start("nap", input={"user": "cid", "hours": 2})
    waiting = s.start("approve")
    dead = s.start("fail", input={"user": "dan"})
    done = s.start("quick")
    doomed = s.start("quick")  # cancelled before it runs
    ops.cancel(store, doomed, clock=fake_clock)
    daemon.tick()
    queued = s.start("quick", run_at=fake_clock.now() + timedelta(hours=5))
    running = s.start("quick", input={"user": "eve"})
    claims, _ = store.claim_due(
        "daemon-1", fake_clock.now(), fake_clock.now() + timedelta(seconds=15), 1, run_id=running
    )
    assert claims
    s.ids = {
        "running": [running],
        "sleeping": [soon, late],  # sorted by wake time
        "waiting": [waiting],
        "queued": [queued],
        "dead": [dead],
        "completed": [done],
        "cancelled": [doomed],
    }
    for status, ids in s.ids.items():
        for run_id in ids:
            assert store.get_run(run_id).status == status, (run_id, status)
    return s


TURNS = 200  # event-loop turns that let every queued message and idle handler run


async def settle(pilot: Pilot[None]) -> None:
    """Run the app to a fixed point: every thread worker finished and everything it caused
    handled (a page load triggers a detail load; a DataTable measures its columns when its
    queue is empty). Counted in event-loop turns, not wall-clock time: Textual's pause()
    guesses idleness from CPU time, which a loaded machine fools, and a snapshot taken
    mid-way shows columns not yet measured."""
    app = pilot.app
    for _ in range(50):
        busy = [w for w in app.workers if not w.is_finished]
        for worker in busy:
            try:
                await worker.wait()
            except WorkerCancelled:
                pass  # superseded by a newer query (exclusive workers); its answer is dropped
        for _ in range(TURNS):
            await asyncio.sleep(0)
        if not busy and all(w.is_finished for w in app.workers):
            break
    else:
        raise AssertionError(f"the app did not settle: workers {list(app.workers)}")
    await pilot.pause()  # flush the screen's pending layout and repaint


async def until(pilot: Pilot[None], done: Callable[[], bool], what: str) -> None:
    """Wait for something a real timer does (the 1 s tick, the 0.5 s poll, the search
    debounce), polling and settling; a loaded machine makes timers late, never wrong."""
    for _ in range(400):
        await settle(pilot)
        if done():
            return
        await pilot.pause(0.05)
    try:
        shown = f" (the table lists {listed(pilot.app)})"  # type: ignore[arg-type]
    except NoMatches:
        shown = ""
    raise AssertionError(f"not reached: {what}{shown}")


def detail_text(app: FlowctlApp) -> str:
    """The detail pane's text with wrapping undone, so assertions ignore the pane width."""
    return " ".join(str(app.query_one("#detail-text").render()).split())


def listed(app: FlowctlApp) -> list[str]:
    """The run ids the table shows, top to bottom."""
    return [str(row.key.value) for row in app.query_one("#table", RunTable).ordered_rows]


VIEW_KEYS = {
    "1": "running",
    "2": "sleeping",
    "3": "waiting",
    "4": "queued",
    "5": "dead",
    "6": "completed",
}


@pilot_test
async def test_each_view_lists_its_runs_in_order(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        for key, status in VIEW_KEYS.items():
            await pilot.press(key)
            await settle(pilot)
            assert app.view == status
            assert listed(app) == seeded.ids[status], status
        await pilot.press("8")
        await settle(pilot)
        assert sorted(listed(app)) == sorted(i for ids in seeded.ids.values() for i in ids)
        bar = app.query_one("#views")
        assert "Sleeping 2" in str(bar.render())
        assert "Dead 1" in str(bar.render())


@pilot_test
async def test_sleeping_view_counts_down_from_the_clock(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await settle(pilot)
        table = app.query_one("#table", RunTable)
        soon, late = seeded.ids["sleeping"]
        assert table.get_cell(soon, "wakes_in").plain == "2h00m"
        assert table.get_cell(late, "wakes_in").plain == "2d00h"
        version = seeded.store.data_version()
        seeded.clock.advance(timedelta(minutes=90))
        await until(  # one countdown tick, from the clock alone
            pilot, lambda: table.get_cell(soon, "wakes_in").plain == "30m00s", "the tick"
        )
        assert table.get_cell(late, "wakes_in").plain == "1d22h"
        assert seeded.store.data_version() == version


@pilot_test
async def test_dead_run_detail_shows_the_whole_error(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        dead_id = listed(app)[0]
        assert dead_id == seeded.ids["dead"][0]
        cell = app.query_one("#table", RunTable).get_cell(dead_id, "error").plain
        assert cell == "RuntimeError: upstream returned 503 for dan"
        text = detail_text(app)
        assert "retry later" in text  # the full message, not only its first line
        assert "Traceback" in text and "in boom" in text
        assert "attempts exhausted (1/1)" in text
        assert "#1 step boom error" in text
        assert "dead-lettered" in text


@pilot_test
async def test_cancel_asks_then_cancels(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    late = seeded.ids["sleeping"][1]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("down", "c")
        await settle(pilot)
        await pilot.press("1", "q", "n")  # main-screen keys are inert in a dialog
        assert app.view == "sleeping" and app.is_running
        await settle(pilot)
        assert seeded.store.get_run(late).status is RunStatus.SLEEPING
        await pilot.press("c")
        await settle(pilot)  # the dialog is up before it is answered
        await pilot.press("y")
        await settle(pilot)
        assert listed(app) == [seeded.ids["sleeping"][0]]  # the list refreshed after our write
    assert seeded.store.get_run(late).status is RunStatus.CANCELLED


@pilot_test
async def test_cancel_of_a_running_run_is_a_request(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    running = seeded.ids["running"][0]
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
    run = seeded.store.get_run(running)
    assert run.status is RunStatus.RUNNING and run.cancel_requested


@pilot_test
async def test_redrive_requeues_a_dead_run(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    dead = seeded.ids["dead"][0]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        assert listed(app) == []
    run = seeded.store.get_run(dead)
    assert run.status is RunStatus.QUEUED and run.attempt == 1
    assert seeded.store.timeline(dead)[-1].type == "redriven"


@pilot_test
async def test_wake_now_makes_a_sleeper_due_and_records_it(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    soon = seeded.ids["sleeping"][0]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("w")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
    run = seeded.store.get_run(soon)
    assert run.run_at == seeded.clock.now()
    event = seeded.store.timeline(soon)[-1]
    assert event.type == "woken by operator"
    assert event.data["was_due"] is not None  # the recorded deadline is kept for history


@pilot_test
async def test_signal_form_refuses_bad_input_inline_then_sends(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    waiting = seeded.ids["waiting"][0]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("3")
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        assert isinstance(app.screen, SignalScreen)
        error = app.screen.query_one("#signal-error")

        await pilot.press(*"_internal", "enter")
        await settle(pilot)
        assert "reserved" in str(error.render())
        assert isinstance(app.screen, SignalScreen)

        app.screen.query_one("#signal-name", Input).value = "approved"
        await pilot.press("tab", *"{oops", "enter")
        await settle(pilot)
        assert "payload is not valid JSON" in str(error.render())
        assert seeded.store.pending_signals(waiting) == []

        app.screen.query_one("#signal-payload", Input).value = '{"by": "ana"}'
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, SignalScreen)
    [(name, payload, _sent)] = seeded.store.pending_signals(waiting)
    assert (name, payload) == ("approved", {"by": "ana"})
    assert seeded.store.get_run(waiting).run_at == seeded.clock.now()  # due now, as the CLI does


@pilot_test
async def test_refused_actions_and_failed_actions_are_notifications(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    notes: list[tuple[str, str]] = []
    real_notify = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        notes.append((message, kwargs.get("severity", "information")))
        real_notify(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("r")  # a sleeping run cannot be redriven: refused before any modal
        await settle(pilot)
        assert notes[-1][1] == "warning" and "only dead or cancelled" in notes[-1][0]
        assert app.screen is app.screen_stack[0]

        await pilot.press("c")  # ask, then the run ends elsewhere before we confirm
        await settle(pilot)
        with open_same(seeded.store) as other:
            ops.cancel(other, seeded.ids["sleeping"][0], clock=seeded.clock)
        await pilot.press("y")
        await settle(pilot)
        assert notes[-1][1] == "error" and "already cancelled" in notes[-1][0]


@pilot_test
async def test_copy_run_id(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        assert app.clipboard == seeded.ids["dead"][0]


@pilot_test
async def test_live_update_sees_a_run_added_by_another_connection(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    other = open_same(seeded.store)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("4")
            await settle(pilot)
            assert listed(app) == seeded.ids["queued"]
            new = ops.start(
                other, f"{seeded.flows}:quick", {"user": "zoe"}, clock=seeded.clock
            ).run.run_id
            await until(pilot, lambda: new in listed(app), "the 0.5 s data_version poll")
            assert "Queue 2" in str(app.query_one("#views").render()).replace("Queued", "Queue")
    finally:
        other.close()


@pilot_test
async def test_search_and_workflow_filter(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("8")
        await settle(pilot)
        await pilot.press("slash", *"eve")  # input text, applied once typing pauses
        await until(pilot, lambda: app.search == "eve", "the search debounce")
        # Only `running` has "eve" in its input; a random run id may hold it too (e, v:
        # Crockford digits), about one seeded database in 300, and is found as well.
        found = {r for ids in seeded.ids.values() for r in ids if "eve" in r}
        found |= set(seeded.ids["running"])
        await until(pilot, lambda: set(listed(app)) == found, "the searched list")
        await pilot.press("enter")
        assert app.search == "eve"
        await pilot.press("escape")  # clears the search
        await until(pilot, lambda: app.search is None, "the search cleared")
        sleeper = seeded.ids["sleeping"][1]
        await pilot.press("slash", *sleeper[:12], "enter")  # run id
        await until(pilot, lambda: listed(app) == [sleeper], "the run found by its id")
        await pilot.press("escape")
        await settle(pilot)

        await pilot.press("f")
        await settle(pilot)
        options = app.screen.query_one("#workflows")
        names = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert names == ["", "approve", "fail", "nap", "quick"]
        await pilot.press("down", "down", "down", "enter")  # nap
        await until(pilot, lambda: app.workflow == "nap", "the workflow filter")
        await until(
            pilot,
            lambda: sorted(listed(app)) == sorted(seeded.ids["sleeping"]),
            "the filtered list",
        )
        await until(pilot, lambda: "All 2" in str(app.query_one("#views").render()), "the count")


@pilot_test
async def test_pages_load_on_demand(store: Store, fake_clock: FakeClock) -> None:
    for i in range(250):
        store.create_run(
            NewRun(f"r_{i:04d}", "bulk", "bulk.py:bulk", "python", {"i": i}), fake_clock.now()
        )
    app = FlowctlApp(store=store, clock=fake_clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("4")
        await settle(pilot)
        assert len(listed(app)) == 200  # one page, never every row
        assert "200 of 250" in str(app.query_one("#list").border_subtitle)
        await pilot.press("G")  # the end of the page asks for the next one
        await settle(pilot)
        assert len(listed(app)) == 250


@pilot_test
async def test_schedules_view_without_schedules_says_so(seeded: Seeded) -> None:
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        assert "no schedules" in str(app.query_one("#empty").render())
        assert detail_text(app) == "no schedules"
        assert "7 Schedules 0  8" in str(app.query_one("#views").render())


@pilot_test
async def test_schedules_view_lists_schedules(seeded: Seeded) -> None:
    schedule_ops.add_schedule(
        seeded.store,
        "nightly",
        f"{seeded.flows}:quick",
        {"user": "ops"},
        clock=seeded.clock,
        cron="0 9 * * MON-FRI",
        tz="Europe/Paris",
    )
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("7")
        await settle(pilot)
        table = app.query_one("#table", RunTable)
        assert table.get_cell("s0", "name").plain == "nightly"
        assert "0 9 * * MON-FRI" in table.get_cell("s0", "rule").plain
        assert "Schedules 1" in str(app.query_one("#views").render())
        assert "nightly" in detail_text(app)


@pilot_test
async def test_no_color_is_respected(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.no_color
        assert any(isinstance(f, Monochrome) for f in app.get_line_filters())


# ---------------------------------------------------------------------------
# Snapshots: fixed ids, a fixed worker name, a frozen clock


TRACEBACK = """\
Traceback (most recent call last):
  File "workflows/billing.py", line 41, in renew
    charge = ctx.step("charge", charge_card, account)
  File "workflows/billing.py", line 18, in charge_card
    raise PaymentDeclined(f"card declined for account {account}: insufficient funds")
billing.PaymentDeclined: card declined for account acct_42: insufficient funds
"""


def _new(run_id: str, workflow: str, user: str, **kwargs: Any) -> NewRun:
    return NewRun(
        run_id, workflow, f"workflows/{workflow}.py:{workflow}", "python", {"user": user}, **kwargs
    )


def _claim(store: Store, clock: FakeClock, run_id: str) -> Lease:
    claims, _ = store.claim_due(
        "worker-1", clock.now(), clock.now() + timedelta(seconds=15), 1, run_id=run_id
    )
    return claims[0].lease


def _step(
    store: Store, clock: FakeClock, run_id: str, lease: Lease, index: int, name: str, value: Any
) -> None:
    entry = JournalEntry(
        run_id, index, CallKind.STEP, name, EntryState.DONE, value, tries=1, duration=0.25
    )
    store.record_entry(lease, entry, clock.now())


def _sleep(store: Store, clock: FakeClock, run_id: str, hours: float) -> None:
    lease = _claim(store, clock, run_id)
    _step(store, clock, run_id, lease, 0, "send_welcome", {"sent": True})
    wake = clock.now() + timedelta(hours=hours)
    entry = JournalEntry(run_id, 1, CallKind.SLEEP, "sleep", EntryState.PENDING, None, wake_at=wake)
    event = ("sleep started", {"index": 1, "wake_at": wake.isoformat(timespec="microseconds")})
    store.suspend_run(lease, RunStatus.SLEEPING, wake, clock.now(), 0.5, entry, event)


SHOWN_PATH = "/home/ana/project/.flowctl/flowctl.db"  # the header's path, fixed for the SVGs


@pytest.fixture
def snapshot_store(store: Store, fake_clock: FakeClock) -> Iterator[Store]:
    """Two sleepers, one waiting, one dead with a traceback, one completed; all ids fixed."""
    clock = fake_clock
    for run_id, user in (("r_sleep_1", "ana"), ("r_sleep_2", "bea"), ("r_sleep_3", "cid")):
        store.create_run(_new(run_id, "followup", user), clock.now())
    store.create_run(_new("r_wait_1", "approval", "dan"), clock.now())
    store.create_run(_new("r_dead_1", "billing", "acct_42", max_attempts=1), clock.now())
    store.create_run(_new("r_done_1", "report", "eve"), clock.now())
    clock.advance(timedelta(minutes=3))
    _sleep(store, clock, "r_sleep_1", 51.5)
    _sleep(store, clock, "r_sleep_2", 0.75)
    _sleep(store, clock, "r_sleep_3", 24 * 30)

    lease = _claim(store, clock, "r_wait_1")
    _step(store, clock, "r_wait_1", lease, 0, "request", {"ticket": 7})
    entry = JournalEntry("r_wait_1", 1, CallKind.SIGNAL, "approved", EntryState.PENDING, None)
    store.suspend_run(
        lease,
        RunStatus.WAITING,
        None,
        clock.now(),
        0.1,
        entry,
        ("waiting for signal", {"name": "approved", "index": 1}),
    )

    lease = _claim(store, clock, "r_dead_1")
    _step(store, clock, "r_dead_1", lease, 0, "load_account", {"account": "acct_42"})
    error = {
        "type": "PaymentDeclined",
        "message": "card declined for account acct_42: insufficient funds\nprovider code 51",
        "traceback": TRACEBACK,
    }
    failed = JournalEntry(
        "r_dead_1", 1, CallKind.STEP, "charge", EntryState.ERROR, error, tries=1, duration=1.5
    )
    store.record_entry(lease, failed, clock.now())
    clock.advance(timedelta(seconds=2))
    store.fail_attempt(lease, {**error, "kind": "raised"}, clock.now(), 2.0, None)

    lease = _claim(store, clock, "r_done_1")
    _step(store, clock, "r_done_1", lease, 0, "render", {"pages": 3})
    store.complete_run(lease, {"pages": 3}, clock.now(), 0.4)
    clock.advance(timedelta(minutes=10))
    yield store


async def _loaded(pilot: Pilot[None]) -> None:
    await settle(pilot)


def test_snapshot_sleeping_view(
    snap_compare: Any, snapshot_store: Store, fake_clock: FakeClock
) -> None:
    """Sleeping runs sorted by wake time, countdowns from the frozen clock, the first selected."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("2")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_snapshot_dead_run_detail(
    snap_compare: Any, snapshot_store: Store, fake_clock: FakeClock
) -> None:
    """A dead run opened full-screen: the whole error, the traceback, checkpoints, timeline."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("5")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_snapshot_dead_view_at_80x24(
    snap_compare: Any, snapshot_store: Store, fake_clock: FakeClock
) -> None:
    """The smallest supported terminal: short tab labels, list above detail."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("5")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_snapshot_signal_form(
    snap_compare: Any, snapshot_store: Store, fake_clock: FakeClock
) -> None:
    """The signal form over the Waiting view, with a reserved name refused inline."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("3")
        await settle(pilot)
        await pilot.press("s", *"_approved", "enter")
        await settle(pilot)
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False  # a blinking cursor would make the SVG depend on timing

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_snapshot_cancel_confirmation(
    snap_compare: Any, snapshot_store: Store, fake_clock: FakeClock
) -> None:
    """The confirmation asked before a cancel writes anything."""
    app = FlowctlApp(store=snapshot_store, clock=fake_clock, shown_path=SHOWN_PATH)

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_auto_view_opens_on_the_first_view_with_runs(tmp_path: Path, db: str) -> None:
    from flowctl.clock import FakeClock
    from flowctl.store import open_store
    from flowctl.testing import WorkflowEnvironment

    (tmp_path / "nap.py").write_text("def nap(ctx):\n    ctx.sleep('1h')\n")
    with WorkflowEnvironment(db=db, cwd=tmp_path) as env:
        env.start("nap.py:nap")
        store = open_store(env.db)
        assert FlowctlApp(store=store, clock=FakeClock(), view="auto").view == "sleeping"
        assert FlowctlApp(store=store, clock=FakeClock()).view == "running"
        store.close()
