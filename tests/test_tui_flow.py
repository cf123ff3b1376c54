"""The TUI shows a run held by flow control as held, with the reason in its detail
(issue 37, item 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from flowctl.clock import FakeClock
from flowctl.store import NewRun
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.tui import FlowctlApp, RunTable
from tests.test_tui import detail_text, listed, pilot_test, settle

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
KEY = '["per-user", "user", "zed"]'


@pilot_test
async def test_a_held_run_is_listed_as_held_with_its_key_in_the_detail(tmp_path: Path) -> None:
    clock = FakeClock(T0 + timedelta(seconds=5))
    with Store(tmp_path / "t.db") as store:
        for i, rid in enumerate(("first", "second")):
            new = NewRun(
                rid, "per-user", "w.yaml", "yaml", {"user": "zed"}, flow_key=KEY, flow_limit=1
            )
            store.create_run(new, T0 + timedelta(seconds=i))
        claims, _ = store.claim_due("h/1/1/a", clock.now(), clock.now() + timedelta(seconds=60), 10)
        assert [c.run.run_id for c in claims] == ["first"]
        app = FlowctlApp(store=store, clock=clock)
        async with app.run_test(size=(140, 36)) as pilot:
            await pilot.press("8")
            await settle(pilot)
            assert listed(app) == ["second", "first"]
            table = app.query_one("#table", RunTable)
            assert table.get_cell("second", "status").plain == "queued (held)"
            assert table.get_cell("first", "status").plain == "running"
            text = detail_text(app)
            assert "held: concurrency 1 per user, key 'zed'" in text
