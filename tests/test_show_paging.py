"""`flowctl show` of a long run pages its checkpoints and timeline (issue 14, item 5): the
newest N of each, a line saying how many were left out and how to see them, the same page
with its totals in `--json`, the TUI detail pane and the HTTP run detail; and what is left
out is never read from the store (every journal and timeline read is LIMITed)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.limits import SHOW_STEPS
from flowctl.model import EntryState
from flowctl.store import Store
from flowctl.store.sqlite import SqliteStore
from flowctl.tui import FlowctlApp
from flowctl.tui.render import DETAIL_STEPS, render_detail
from tests.inproc import run_main
from tests.serve_helpers import Api, port_of, start_serve
from tests.test_tui import detail_text, listed, pilot_test, settle

STEPS = 260  # more than a page of the CLI (50) and of the TUI detail (200)
NOTES = 240  # timeline events added to the run's own few, for the same reason

FLOWS = f"""\
from flowctl import workflow

@workflow
def long(ctx, n: int = {STEPS}):
    for i in range(n):
        ctx.step(f"s{{i}}", lambda i=i: i)
    ctx.sleep("1h")
    return n
"""


@pytest.fixture
def long_run(tmp_path: Path) -> tuple[Path, str]:
    """A sleeping run with STEPS step checkpoints and a sleep (STEPS + 1 checkpoints), and
    more than NOTES timeline events."""
    (tmp_path / "flows.py").write_text(FLOWS)
    db = tmp_path / "f.db"
    clock = FakeClock()
    with SqliteStore(db) as store:
        run = ops.start(store, f"{tmp_path / 'flows.py'}:long", {}, clock=clock).run
        Daemon(store, clock, DaemonConfig(concurrency=1)).tick()
        assert store.get_run(run.run_id).status == "sleeping"
        for i in range(NOTES):
            store.add_event(run.run_id, "note", {"n": i}, clock.now())
    return db, run.run_id


def checkpoint_lines(out: str) -> list[int]:
    return [int(m) for m in re.findall(r"^  #(\d+)\s", out, re.M)]


def test_show_prints_the_newest_page_and_says_what_it_left_out(
    monkeypatch: pytest.MonkeyPatch, long_run: tuple[Path, str]
) -> None:
    db, rid = long_run
    total = STEPS + 1
    out = run_main(monkeypatch, "--db", str(db), "show", rid)
    assert out.returncode == 0, out.stderr
    assert checkpoint_lines(out.stdout) == list(range(total - SHOW_STEPS, total))
    left = total - SHOW_STEPS
    assert (
        f"  … {left} earlier checkpoints not shown (flowctl show {rid} --skip {SHOW_STEPS}"
        " for the page before, --steps N for more, --all for all)"
    ) in out.stdout
    assert "earlier timeline events not shown" in out.stdout
    assert "newer" not in out.stdout


def test_show_pages_back_with_skip_and_shows_everything_with_all(
    monkeypatch: pytest.MonkeyPatch, long_run: tuple[Path, str]
) -> None:
    db, rid = long_run
    total = STEPS + 1
    out = run_main(monkeypatch, "--db", str(db), "show", rid, "--steps", "10", "--skip", "25")
    assert out.returncode == 0, out.stderr
    assert checkpoint_lines(out.stdout) == list(range(total - 35, total - 25))
    assert f"  … {total - 35} earlier checkpoints not shown" in out.stdout
    assert (
        f"  … 25 newer checkpoints not shown (flowctl show {rid} --skip 15 for the page after)"
        in out.stdout
    )
    every = run_main(monkeypatch, "--db", str(db), "show", rid, "--all")
    assert checkpoint_lines(every.stdout) == list(range(total))
    assert "not shown" not in every.stdout


def test_show_json_holds_the_same_page_with_its_totals(
    monkeypatch: pytest.MonkeyPatch, long_run: tuple[Path, str]
) -> None:
    db, rid = long_run
    total = STEPS + 1
    conn = sqlite3.connect(db)
    (events,) = conn.execute("SELECT COUNT(*) FROM timeline WHERE run_id = ?", [rid]).fetchone()
    conn.close()
    events += 1  # its plain `created` event is implied, not stored (migration 18)
    paged = json.loads(run_main(monkeypatch, "--db", str(db), "show", rid, "--json").stdout)
    assert [c["index"] for c in paged["checkpoints"]] == list(range(total - SHOW_STEPS, total))
    assert paged["checkpoints_total"] == total
    assert paged["timeline_total"] == events > SHOW_STEPS
    assert len(paged["timeline"]) == SHOW_STEPS
    assert paged["page"] == {"steps": SHOW_STEPS, "skip": 0}
    every = json.loads(
        run_main(monkeypatch, "--db", str(db), "show", rid, "--json", "--all").stdout
    )
    assert [c["index"] for c in every["checkpoints"]] == list(range(total))
    assert len(every["timeline"]) == events
    assert every["timeline"][-SHOW_STEPS:] == paged["timeline"]  # the page is the newest
    assert every["page"] == {"steps": None, "skip": 0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "--steps must be between 1 and 1,000,000, got 0"),
        (["--skip", "-1"], "--skip must be between 0 and 1,000,000, got -1"),
    ],
)
def test_a_bad_page_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, long_run: tuple[Path, str], args: list[str], message: str
) -> None:
    db, rid = long_run
    out = run_main(monkeypatch, "--db", str(db), "show", rid, *args)
    assert out.returncode == 2
    assert out.stderr.strip() == f"flowctl: {message}"
    assert out.stdout == ""


def unbounded_reads(statements: list[str]) -> list[str]:
    """Reads of a run's journal or timeline rows that no LIMIT bounds (a COUNT is an index
    walk that returns one row, so it is not a read of the rows)."""
    return [
        s
        for s in statements
        if re.search(r"\bFROM (journal|timeline)\b", s)
        and s.lstrip().upper().startswith("SELECT")
        and " LIMIT " not in s.upper()
        and "COUNT(*)" not in s.upper()
    ]


def test_show_reads_only_the_page_from_the_store(
    monkeypatch: pytest.MonkeyPatch, long_run: tuple[Path, str], statements: list[str]
) -> None:
    db, rid = long_run
    for args in ([], ["--json"], ["--steps", "5", "--skip", "7"]):
        assert run_main(monkeypatch, "--db", str(db), "show", rid, *args).returncode == 0
        assert run_main(monkeypatch, "--db", str(db), "why", rid).returncode == 0
    assert any(re.search(r"FROM journal\b.* LIMIT", s) for s in statements)
    assert unbounded_reads(statements) == []


def test_the_tui_detail_reads_and_shows_its_page(
    long_run: tuple[Path, str], statements: list[str]
) -> None:
    db, rid = long_run
    total = STEPS + 1
    with SqliteStore(db) as store:
        detail = ops.show_run(store, rid, clock=FakeClock(), steps=DETAIL_STEPS)
    assert unbounded_reads(statements) == []
    assert len(detail.checkpoints) == DETAIL_STEPS
    assert detail.checkpoints_total == total
    text = render_detail(detail, FakeClock().now(), width=100).plain
    assert f"Checkpoints ({total})" in text
    assert f"… {total - DETAIL_STEPS} earlier checkpoints not shown" in text
    assert "earlier events not shown" in text


@pilot_test
async def test_the_tui_detail_pane_of_a_long_run_reads_a_page(
    long_run: tuple[Path, str], statements: list[str]
) -> None:
    db, rid = long_run
    total = STEPS + 1
    with SqliteStore(db) as store:
        app = FlowctlApp(store=store, clock=FakeClock())
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("2")  # Sleeping: the long run is the one listed, its detail opens
            await settle(pilot)
            assert listed(app) == [rid]
            text = detail_text(app)
    assert f"Checkpoints ({total})" in text
    assert f"… {total - DETAIL_STEPS} earlier checkpoints not shown" in text
    assert unbounded_reads(statements) == []


def test_the_http_run_detail_is_a_page(long_run: tuple[Path, str]) -> None:
    db, rid = long_run
    total = STEPS + 1
    proc, log = start_serve(db.parent, db)
    try:
        api = Api(port_of(proc, log))
        body = api.call("GET", f"/runs/{rid}").json()
        assert [c["index"] for c in body["checkpoints"]] == list(range(total - SHOW_STEPS, total))
        assert body["checkpoints_total"] == total
        body = api.call("GET", f"/runs/{rid}?steps=3&skip=2").json()
        assert [c["index"] for c in body["checkpoints"]] == [total - 5, total - 4, total - 3]
        assert body["page"] == {"steps": 3, "skip": 2}
        bad = api.call("GET", f"/runs/{rid}?steps=0")
        assert bad.status == 400
        assert bad.json() == {"error": "steps must be an integer from 1 to 1000000, got 0"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in log.read_text()


def test_both_stores_page_the_journal_and_the_timeline_the_same_way(
    store: Store, tmp_path: Path, fake_clock: FakeClock
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS.replace(f"n: int = {STEPS}", "n: int = 12"))
    run = ops.start(store, f"{tmp_path / 'flows.py'}:long", {}, clock=fake_clock).run
    Daemon(store, fake_clock, DaemonConfig(concurrency=1)).tick()
    for i in range(10):
        store.add_event(run.run_id, "note", {"n": i}, fake_clock.now())
    page, total = store.journal_page(run.run_id, 4, 3)
    assert ([e.call_index for e in page], total) == ([6, 7, 8, 9], 13)
    every, _ = store.journal_page(run.run_id, None)
    assert [e.call_index for e in every] == list(range(13))
    assert list(store.journal(run.run_id).values()) == every
    events, n_events = store.timeline_page(run.run_id, 3, 1)
    assert n_events == 13 and [e.data for e in events] == [{"n": 6}, {"n": 7}, {"n": 8}]
    assert store.timeline_page(run.run_id, None)[0] == store.timeline(run.run_id)
    last = store.last_entry(run.run_id, [EntryState.PENDING])
    assert last is not None and (last.call_index, last.kind) == (12, "sleep")
    done = store.last_entry(run.run_id, [EntryState.DONE, EntryState.ERROR])
    assert done is not None and done.call_index == 11
    assert store.last_entry(run.run_id, [EntryState.RETRYING]) is None
