"""A reader's data_version moves when another process writes what a reader shows besides
runs, on both stores: a daemon starting and stopping (the TUI's header), step output, a
published value and a timeline note (its detail pane). SQLite's moves on any commit; the
PostgreSQL store's by a NOTIFY, which these writes send too (schema version 6)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from helpers import wait_until

from flowctl.store import NewRun, Store, open_store
from tests.conftest import ROOT

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
OWNER = "host-b/2/2/bbbb"

# Another process: opens the database, then makes one write per line it reads, answering
# "ok" once it is committed.
WRITER = """
import sys
from datetime import datetime, timedelta, UTC
from flowctl.store import Lease, open_store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
OWNER = "host-b/2/2/bbbb"
store = open_store(sys.argv[1])
lease = Lease("r1", int(sys.argv[2]), sys.argv[3])
writes = {
    "register": lambda: store.register_daemon(OWNER, "host-b", 2, None, T0, {}),
    "unregister": lambda: store.unregister_daemon(OWNER, T0),
    "output": lambda: store.append_output("r1", 0, "s0", T0, [("stdout", "hello\\n")]),
    "publish": lambda: store.publish(lease, "progress", "1/3", T0),
    "note": lambda: store.add_event("r1", "note", {"by": "test"}, T0),
}
print("ready", flush=True)
for line in sys.stdin:
    writes[line.strip()]()
    print("ok", flush=True)
store.close()
"""


@pytest.fixture
def reader(db: str) -> Iterator[Store]:
    store = open_store(db)
    yield store
    store.close()


def test_another_processs_writes_move_the_readers_data_version(db: str, reader: Store) -> None:
    reader.create_run(NewRun("r1", "wf", "wf.py:wf", "python", {}), T0)
    (claim,), _ = reader.claim_due("host-a/1/1/aaaa", T0, T0 + timedelta(seconds=15), 1)
    lease = claim.lease
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, db, str(lease.fence), lease.owner],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    ) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        try:
            assert writer.stdout.readline() == "ready\n"
            for write in ("register", "output", "publish", "note", "unregister"):
                before = reader.data_version()
                writer.stdin.write(write + "\n")
                writer.stdin.flush()
                assert writer.stdout.readline() == "ok\n", write
                wait_until(lambda b=before: reader.data_version() != b, timeout=5)
            writer.stdin.close()
            assert writer.wait(timeout=30) == 0
        finally:
            if writer.poll() is None:
                writer.kill()
    # What was written is what a reader then shows.
    assert [c.text for c in reader.output("r1")] == ["hello\n"]
    assert reader.published("r1")["progress"][0] == "1/3"
    assert "note" in [e.type for e in reader.timeline("r1")]
    assert reader.daemons() == []
