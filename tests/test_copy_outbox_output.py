"""`flowctl copy` moves what both stores now hold beyond the runs' rows: a run's pinned
source (SQLite keeps it once per definition hash, in a table of its own), its step output,
and the notification outbox, so a YAML sleeper copied to the fleet still has its
definition, `logs` still shows what ran, and an ending not yet told is told there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import Store, open_store
from flowctl.store.copy import copy_rows

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
NAP = "name: nap\nsteps:\n  - run: [echo, before the nap]\n  - sleep: 1h\n  - run: [echo, after]\n"


def facts(store: Store, ids: list[str]) -> dict[str, object]:
    far = T0 + timedelta(days=365)
    return {
        "sources": [store.run_source(i) for i in ids],
        "output": [[(c.seq, c.step, c.stream, c.text) for c in store.output(i)] for i in ids],
        "outbox": [(n.seq, n.run_id, n.status, n.tries) for n in store.due_notifications(far)],
    }


def test_sources_output_and_the_outbox_go_to_postgresql_and_back(
    tmp_path: Path, pg_url: str
) -> None:
    clock = FakeClock(T0)
    nap = tmp_path / "nap.yaml"
    nap.write_text(NAP)
    src, pg, back = (
        open_store(tmp_path / "one.db"),
        open_store(pg_url),
        open_store(tmp_path / "b.db"),
    )
    try:
        sleeper = ops.start(src, str(nap), {}, clock=clock).run.run_id
        other = ops.start(src, str(nap), {}, clock=clock).run.run_id  # the same definition
        Daemon(src, clock, DaemonConfig(concurrency=2)).tick()
        ops.cancel(src, other, clock=clock)  # an ending in the outbox, not yet told
        ids = [sleeper, other]
        before = facts(src, ids)
        assert before["sources"][0][0] == NAP and before["output"][0]
        assert [o[1:3] for o in before["outbox"]] == [(other, "cancelled")]
        copy_rows(src, pg, ops.plan_copy(src, pg, clock=clock))
        assert facts(pg, ids) == before
        copy_rows(pg, back, ops.plan_copy(pg, back, clock=clock))
        assert facts(back, ids) == before
        nap.unlink()  # the fleet runs the pinned definition, not the file
        clock.advance(timedelta(hours=1))
        Daemon(pg, clock, DaemonConfig(concurrency=1)).tick()
        assert pg.get_run(sleeper).status is RunStatus.COMPLETED
        assert [c.text for c in pg.output(sleeper)][-1].strip() == "after"
        pg.append_output(sleeper, 9, "late", clock.now(), [("stdout", "x\n")])
        assert pg.output(sleeper)[-1].seq > before["output"][0][-1][0]  # new ids after copied
    finally:
        for s in (src, pg, back):
            s.close()
