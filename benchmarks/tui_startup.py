"""How long `flowctl tui` takes to show its first page on a database with 100,000 runs.

    .venv/bin/python benchmarks/tui_startup.py [--db /tmp/flowctl-100k.db] [--runs 100000]

The database is seeded once (about 30 s) through the Store's own transitions, so the
rows look like a real daemon's: queued, running (leased), sleeping (pending sleep
checkpoint), waiting (pending signal), dead (with an error), completed. Later runs reuse
the file. The figure printed is wall time from process start, Textual import included,
to the first page of runs applied to the table, headless; then each view's switch
time, and the page query alone (what every live refresh costs).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bytecode  # noqa: E402

from flowctl.clock import FakeClock  # noqa: E402
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus  # noqa: E402
from flowctl.store import NewRun  # noqa: E402
from flowctl.store.sqlite import SqliteStore as Store  # noqa: E402

NOW = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)
MIX = (  # share of runs per final status
    (RunStatus.SLEEPING, 0.40),
    (RunStatus.COMPLETED, 0.30),
    (RunStatus.WAITING, 0.10),
    (RunStatus.DEAD, 0.10),
    (RunStatus.RUNNING, 0.05),
    (RunStatus.QUEUED, 0.05),
)


def seed(path: Path, n: int) -> None:
    store = Store(path, durability="normal")
    rng = random.Random(7)
    start = time.perf_counter()
    plan: list[RunStatus] = []
    for status, share in MIX:
        plan += [status] * int(n * share)
    plan += [RunStatus.QUEUED] * (n - len(plan))
    rng.shuffle(plan)
    for i, status in enumerate(plan):
        store.create_run(
            NewRun(
                run_id=f"r_{i:07d}",
                workflow=rng.choice(["billing", "followup", "report", "sync", "onboarding"]),
                target="workflows/bench.py:bench",
                kind="python",
                input={"user": f"u{i}", "plan": rng.choice(["free", "pro", "team"])},
                max_attempts=1 if status is RunStatus.DEAD else 3,
                # queued runs are due later, so the claim below takes every other run
                run_at=NOW + timedelta(minutes=rng.randint(1, 600))
                if status is RunStatus.QUEUED
                else None,
            ),
            NOW - timedelta(seconds=n - i),
        )
    print(f"seeded {n:,} queued runs in {time.perf_counter() - start:.1f}s")
    claims, _ = store.claim_due("bench-worker", NOW, NOW + timedelta(days=1), n)
    for claim in claims:
        i = int(claim.run.run_id[2:])
        status = plan[i]
        rid, lease = claim.run.run_id, claim.lease
        step = JournalEntry(rid, 0, CallKind.STEP, "fetch", EntryState.DONE, {"ok": True}, tries=1)
        if status is RunStatus.RUNNING:
            continue  # leave it claimed, with its lease
        store.record_entry(lease, step, NOW)
        if status is RunStatus.SLEEPING:
            wake = NOW + timedelta(minutes=rng.randint(1, 60 * 24 * 30))
            entry = JournalEntry(rid, 1, CallKind.SLEEP, "sleep", EntryState.PENDING, wake_at=wake)
            store.suspend_run(lease, status, wake, NOW, 0.1, entry, ("sleep started", {"index": 1}))
        elif status is RunStatus.WAITING:
            entry = JournalEntry(rid, 1, CallKind.SIGNAL, "approved", EntryState.PENDING)
            store.suspend_run(
                lease, status, None, NOW, 0.1, entry, ("waiting for signal", {"index": 1})
            )
        elif status is RunStatus.DEAD:
            error = {"type": "RuntimeError", "message": f"upstream 503 for u{i}", "kind": "raised"}
            store.fail_attempt(lease, error, NOW, 0.2, None)
        elif status is RunStatus.COMPLETED:
            store.complete_run(lease, {"ok": True}, NOW, 0.2)
    print(f"seeded the statuses in {time.perf_counter() - start:.1f}s: {store.count_by_status()}")
    store.close()


def measure(path: Path) -> None:
    from typing import Any

    from flowctl.tui import FlowctlApp
    from flowctl.tui.views import VIEWS, PageQuery, Row, load_page

    store = Store(path)
    clock = FakeClock(NOW)
    shown: list[float] = []  # when each current page reached the table

    class Timed(FlowctlApp):
        def _show_rows(self, rows: list[Row]) -> None:
            super()._show_rows(rows)
            shown.append(time.perf_counter())

        def _show_schedules(self, schedules: list[dict[str, Any]] | None) -> None:
            super()._show_schedules(schedules)
            shown.append(time.perf_counter())

    app = Timed(store=store, clock=clock)

    async def drive() -> None:
        async with app.run_test(size=(120, 36), headless=True) as pilot:
            while not shown:
                await pilot.pause(0.005)
            first = shown[-1] - T0
            print(f"first page on screen {first * 1000:.0f} ms after process start")
            print(f"  ({bytecode.describe()})")
            for view in VIEWS[1:]:
                before = time.perf_counter()
                count = len(shown)
                await pilot.press(view.number)
                while len(shown) == count:
                    await pilot.pause(0.005)
                took = (shown[-1] - before) * 1000
                print(f"  switch to {view.title:<10} {took:6.0f} ms, {len(app._rows)} rows listed")

    asyncio.run(drive())
    print("page query alone (the cost of one live refresh):")
    for view in VIEWS:
        for search in (None, "u4242"):
            start = time.perf_counter()
            page = load_page(store, PageQuery(view.key, None, search, 200))
            took = (time.perf_counter() - start) * 1000
            label = f"search {search!r}" if search else "no search"
            print(f"  {view.title:<10} {label:<16} {took:6.1f} ms ({len(page.rows)} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="/tmp/flowctl-100k.db")
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args()
    path = Path(args.db)
    if not path.exists():
        seed(path, args.runs)
        print("run again to measure start-up on a warm page cache as a user would")
    measure(path)


if __name__ == "__main__":
    main()
