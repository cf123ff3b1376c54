"""The database file under a running daemon: deleted or replaced (the daemon exits non-zero
naming it and writes nothing more), and a full disk (one line, nothing committed lost, the
daemon waits and carries on once there is room).

The full disk is real: a small tmpfs (`mount -t tmpfs -o size=...`) made in the test and
unmounted at teardown, filled with a filler file. It needs root (as here and in CI); where
mounting is refused the tests are skipped, never faked.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.clock import FakeClock, SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.errors import DatabaseGoneError, DiskFullError
from flowctl.store import WAL_BOUND_BYTES, WAL_BOUND_PAGES, NewRun
from flowctl.store.sqlite import SqliteStore as Store
from tests.conftest import ROOT
from tests.helpers import ParkedRound, query, wait_until

Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def flow(tmp_path: Path) -> str:
    path = tmp_path / "flows.py"
    path.write_text(
        "from flowctl import workflow\n\n@workflow\ndef hello(ctx, n: int = 0, pad: str = ''):\n"
        "    return ctx.step('hi', lambda: 'x' * 2000)\n"
    )
    return f"{path}:hello"


def flowctl(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[Spawn]:
    """Real `flowctl daemon` processes logging to daemon-N.log; killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(db: Path) -> subprocess.Popen[bytes]:
        with open(tmp_path / f"daemon-{len(procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--lease", "3s"],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        procs.append(proc)
        return proc

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def registered(db: Path) -> bool:
    return bool(query(db, "SELECT COUNT(*) FROM daemons")[0][0])


def log_of(tmp_path: Path, n: int = 0) -> str:
    return (tmp_path / f"daemon-{n}.log").read_text()


# ---------------------------------------------------------------- the file vanishes


def test_a_daemon_whose_file_is_deleted_exits_non_zero_naming_it(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    db = tmp_path / "f.db"
    Store(db).close()
    proc = spawn_daemon(db)
    wait_until(lambda: registered(db))
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    code = proc.wait(timeout=10)  # WATCH_FILE_EVERY is 1 s: noticed within a few seconds
    assert code == 1
    lines = log_of(tmp_path).strip().splitlines()
    assert lines[-1] == (
        f"flowctl: database file {db} was deleted while the daemon served it; stopping without"
        " writing to it again: start the daemon again to serve the file now at that path"
    )
    assert "Traceback" not in log_of(tmp_path)
    assert not db.exists()  # nothing recreated it


def test_a_daemon_whose_file_is_replaced_exits_and_leaves_the_new_file_alone(
    tmp_path: Path, spawn_daemon: Spawn, flow: str
) -> None:
    db = tmp_path / "f.db"
    Store(db).close()
    proc = spawn_daemon(db)
    wait_until(lambda: registered(db))
    fresh = tmp_path / "restored.db"
    with Store(fresh) as store:
        ops.start(store, flow, {}, clock=SystemClock())
    before = fresh.read_bytes()
    os.replace(fresh, db)  # a restore from a backup, say
    for p in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    assert proc.wait(timeout=10) == 1
    assert f"database file {db} was replaced by another file" in log_of(tmp_path)
    assert db.read_bytes() == before  # the daemon wrote nothing to the file now at the path
    assert query(db, "SELECT status, fence FROM runs") == [("queued", 0)]
    assert query(db, "SELECT COUNT(*) FROM daemons") == [(0,)]


def test_the_loop_body_stops_at_a_vanished_file(tmp_path: Path, flow: str) -> None:
    """In process, on a FakeClock: the check is on the serving loop's own path (tick)."""
    db = tmp_path / "f.db"
    clock = FakeClock(datetime(2026, 3, 29, tzinfo=UTC))
    store = Store(db)
    ops.start(store, flow, {}, clock=clock)
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1))
    assert daemon.tick() == 1
    assert store.file_replaced() is None
    db.unlink()
    clock.advance(timedelta(seconds=1))
    with pytest.raises(DatabaseGoneError, match=f"database file {db} was deleted"):
        daemon.tick()
    store.close()


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB filesystem of its own (tmpfs), unmounted at teardown."""
    where = tmp_path / "small"
    where.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(where)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {e}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the filesystem holding `folder` until `leave` bytes at most are free."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        chunk = b"\0" * 65536
        while True:
            st = os.statvfs(folder)
            room = st.f_bavail * st.f_frsize - leave
            if room <= 0:
                break
            try:
                f.write(chunk[: min(len(chunk), room)])
                f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
    return filler


def counts(db: Path) -> dict[str, int]:
    return dict(query(db, "SELECT status, COUNT(*) FROM runs GROUP BY status"))


def retry_lines(tmp_path: Path) -> list[str]:
    return [ln for ln in log_of(tmp_path).splitlines() if "retrying every" in ln]


def make_room(filler: Path, room: int) -> None:
    """Shrink the filler until `room` bytes are free: one truncate, so a daemon looking at
    the disk meanwhile never sees more room than that (as it could between an unlink and a
    refill)."""
    st = os.statvfs(filler.parent)
    more = room - st.f_bavail * st.f_frsize
    os.truncate(filler, max(0, filler.stat().st_size - more))


def room_lines(tmp_path: Path) -> list[str]:
    return [ln for ln in log_of(tmp_path).splitlines() if "under the 2 MB reserve" in ln]


def test_a_full_disk_is_one_line_and_a_daemon_started_on_it_waits_for_room(
    small_disk: Path, tmp_path: Path, spawn_daemon: Spawn, flow: str
) -> None:
    db = small_disk / "f.db"
    with Store(db) as store:  # in process: a real process per run only costs start-ups
        for i in range(20):
            ops.start(store, flow, {"n": i}, clock=SystemClock())
    assert counts(db) == {"queued": 20}
    filler = fill(small_disk)

    out = flowctl(db, "run", flow, "--detach")
    assert out.returncode == 1
    assert out.stdout == ""
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("flowctl: database or disk is full: ")
    assert f"MB free on {small_disk} (database {db})" in line

    proc = spawn_daemon(db)
    wait_until(lambda: retry_lines(tmp_path))  # it met the full disk ...
    assert proc.poll() is None, log_of(tmp_path)  # ... and waits: it does not exit
    make_room(filler, 3 * 1024 * 1024)  # the 2 MB reserve and a megabyte for the 20 runs
    # every committed run is there and completes; the refused one was never written
    wait_until(lambda: counts(db) == {"completed": 20}, timeout=30)
    assert len(retry_lines(tmp_path)) == 1  # said once, not once per retry
    assert "the database has room again: serving" in log_of(tmp_path)
    assert "Traceback" not in log_of(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert query(db, "PRAGMA integrity_check") == [("ok",)]


def test_a_daemon_short_of_room_starts_nothing_until_there_is_room(
    small_disk: Path, tmp_path: Path, spawn_daemon: Spawn, flow: str
) -> None:
    """Below the reserve the daemon claims no new run and says so once. (The reserve is
    what keeps it out of the state a full disk can leave SQLite in: a WAL that cannot be
    checkpointed because the database would have to grow.)"""
    db = small_disk / "f.db"
    Store(db).close()
    proc = spawn_daemon(db)
    wait_until(lambda: registered(db))
    filler = fill(small_disk, leave=1024 * 1024)  # 1 MB: room to write, under the reserve
    wait_until(lambda: room_lines(tmp_path), timeout=20)  # it looks twice a second
    with Store(db) as store:
        for i in range(10):
            ops.start(store, flow, {"n": i}, clock=SystemClock())
    time.sleep(1)  # time enough to claim them all, were it claiming
    assert counts(db) == {"queued": 10}  # claimed nothing
    said = flowctl(db, "status")
    assert said.returncode == 0, said.stderr
    assert "under the daemon's 2 MB reserve, no new run starts until there is room" in said.stdout
    report = json.loads(flowctl(db, "status", "--json").stdout)
    assert report["short_of_room"] is True and report["free_bytes"] < 2 * 1024 * 1024
    assert proc.poll() is None, log_of(tmp_path)
    make_room(filler, 3 * 1024 * 1024)
    wait_until(lambda: counts(db) == {"completed": 10}, timeout=30)
    # Once per process that claims: the daemon, or each of its worker processes.
    sayers = [re.search(r"WARNING (worker \d+: )?", line).group(1) for line in room_lines(tmp_path)]  # type: ignore[union-attr]
    assert sorted(set(sayers), key=str) == sorted(sayers, key=str), room_lines(tmp_path)
    assert "the database has room again: serving" in log_of(tmp_path)
    assert "Traceback" not in log_of(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_a_serving_daemon_waits_out_a_full_disk_and_loses_nothing(
    small_disk: Path, tmp_path: Path, spawn_daemon: Spawn, flow: str
) -> None:
    db = small_disk / "f.db"
    Store(db).close()
    proc = spawn_daemon(db)
    wait_until(lambda: registered(db))
    with Store(db) as store:  # due in a moment: the disk is full by then
        soon = datetime.now(UTC) + timedelta(milliseconds=300)
        for i in range(10):
            ops.start(store, flow, {"n": i}, clock=SystemClock(), run_at=soon)
    filler = fill(small_disk)
    # the serving loop met it: a write failed, or the reserve check came first
    wait_until(lambda: retry_lines(tmp_path) or room_lines(tmp_path), timeout=20)
    assert proc.poll() is None, log_of(tmp_path)
    make_room(filler, 3 * 1024 * 1024)
    wait_until(lambda: counts(db) == {"completed": 10}, timeout=30)
    # Runs claimed before the disk filled go on and may all end before the daemon's next
    # look at the free space (twice a second) says so: wait for that line, do not race it.
    wait_until(lambda: "the database has room again: serving" in log_of(tmp_path), timeout=10)
    assert "Traceback" not in log_of(tmp_path)
    assert query(db, "SELECT COUNT(*) FROM journal WHERE kind = 'step'") == [(10,)]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert query(db, "PRAGMA integrity_check") == [("ok",)]


def test_a_write_that_fills_the_disk_loses_nothing_committed(small_disk: Path, flow: str) -> None:
    """Write until the disk is full, in process: every run whose create returned is there,
    the one that failed is not there at all, and after a little room is made the store
    writes again (the WAL was checkpointed and truncated after the failure)."""
    db = small_disk / "f.db"
    store = Store(db)
    clock = FakeClock(datetime(2026, 3, 29, tzinfo=UTC))
    fill(small_disk, leave=256 * 1024)
    made: list[str] = []
    failure: Exception | None = None
    for i in range(10_000):
        try:
            made.append(ops.start(store, flow, {"n": i, "pad": "p" * 4000}, clock=clock).run.run_id)
        except Exception as e:  # the first failure is what is checked
            failure = e
            break
    assert failure is not None and str(failure).startswith("database or disk is full: ")
    assert type(failure).__name__ == "DiskFullError"
    assert Path(f"{db}-wal").stat().st_size <= WAL_BOUND_BYTES + 64 * 1024
    store.close()
    with Store(db) as again:
        assert sorted(r.run_id for r in again.list_runs(limit=100_000)) == sorted(made)
        (small_disk / "filler").unlink()
        ops.start(again, flow, {"n": -1}, clock=clock)  # writes work again
        assert len(again.list_runs(limit=100_000)) == len(made) + 1


def test_group_commit_on_a_full_disk_tells_every_writer_of_a_failed_group(
    small_disk: Path,
) -> None:
    """Writers on several threads share one COMMIT; when the disk fills, every writer whose
    changes were in a group that failed gets the error, so a create that returned is there.
    (Before, only the first writer to wake was told: the others returned as if committed.)"""
    db = small_disk / "f.db"
    store = Store(db)
    store.set_group_commit(True)
    filler = fill(small_disk, leave=700 * 1024)
    returned: list[str] = []
    failures: list[str] = []

    def writer(t: int) -> None:
        for i in range(300):
            new = NewRun(
                run_id=f"t{t}-{i}", workflow="w", target="t", kind="python", input={"p": "x" * 1500}
            )
            try:
                store.create_run(new, datetime(2026, 3, 29, tzinfo=UTC))
                returned.append(new.run_id)
            except DiskFullError as e:
                failures.append(str(e))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures and all(f.startswith("database or disk is full: ") for f in failures)
    filler.unlink()
    store.close()
    with Store(db) as again:
        assert {r.run_id for r in again.list_runs(limit=10_000)} == set(returned)


def test_the_batch_runners_writers_of_a_round_whose_commit_fills_the_disk_all_fail(
    small_disk: Path,
) -> None:
    """The batch runner's writers park until their round's COMMIT (tests/helpers.ParkedRound
    drives them as flowctl.daemon.batch does). When that COMMIT finds the disk full, every writer
    of the round raises the one-line DiskFullError, nothing of the round is kept, and the
    next round commits once there is room again."""
    db = small_disk / "f.db"
    store = Store(db)
    now = datetime(2026, 12, 4, tzinfo=UTC)
    for i in range(3):
        store.create_run(
            NewRun(run_id=f"r{i}", workflow="w", target="t", kind="python", input={}), now
        )
    rnd = ParkedRound(store)
    outcomes: dict[str, str] = {}

    def write(rid: str) -> None:
        try:
            store.add_event(rid, "probe", {"pad": "x" * 3000}, now)
            outcomes[rid] = "returned"
        except DiskFullError as e:
            outcomes[rid] = str(e)

    filler = fill(small_disk)
    for rid in ("r0", "r1"):
        rnd.start(write, rid)
    rnd.write_round()
    assert set(outcomes) == {"r0", "r1"}
    assert all(o.startswith("database or disk is full: ") for o in outcomes.values()), outcomes
    filler.unlink()
    rnd.start(write, "r2")
    rnd.write_round()
    assert outcomes["r2"] == "returned"
    rnd.close()
    store.close()
    assert query(db, "SELECT run_id FROM timeline WHERE type = 'probe'") == [("r2",)]


def test_a_rounds_deferred_checkpoints_and_completions_on_a_full_disk_all_fail(
    small_disk: Path, flow: str
) -> None:
    """The round writes its checkpoints and completions together (each kind by one
    statement, flowctl.store.round); when the disk is full every one of their writers
    raises the one-line DiskFullError, none of their rows is kept, and the next round,
    with room again, writes them."""
    from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus

    db = small_disk / "f.db"
    store = Store(db)
    clock = FakeClock(datetime(2026, 12, 5, tzinfo=UTC))
    for i in range(4):
        ops.start(store, flow, {"n": i}, clock=clock)
    now = clock.now()
    claims, _ = store.claim_due("me/1/1/0", now, now + timedelta(minutes=5), 4)
    assert len(claims) == 4
    outcomes: dict[str, object] = {}

    def write(i: int) -> None:
        c = claims[i]
        e = JournalEntry(c.run.run_id, 0, CallKind.STEP, "hi", EntryState.DONE, "x" * 30_000)
        try:
            if i % 2:
                outcomes[c.run.run_id] = store.complete_run(
                    c.lease, "done", now, 0.0, entry=e, links=(None, None)
                )
            else:
                outcomes[c.run.run_id] = store.record_entry(c.lease, e, now, suspicion=False)
        except DiskFullError as err:
            outcomes[c.run.run_id] = str(err)

    rnd = ParkedRound(store)
    filler = fill(small_disk)
    for i in range(4):
        rnd.start(write, i)
    assert outcomes == {}  # queued: waiting for their round
    rnd.write_round()
    assert len(outcomes) == 4
    assert all(str(o).startswith("database or disk is full: ") for o in outcomes.values())
    assert query(db, "SELECT COUNT(*) FROM journal") == [(0,)]
    filler.unlink()
    outcomes.clear()
    for i in range(4):
        rnd.start(write, i)
    rnd.write_round()
    assert outcomes == {c.run.run_id: True for c in claims}
    rnd.close()
    assert {r.status for r in store.list_runs()} == {RunStatus.RUNNING, RunStatus.COMPLETED}
    assert store.count_by_status()[RunStatus.COMPLETED] == 2
    store.close()
    assert query(db, "SELECT COUNT(*) FROM journal") == [(4,)]
    assert query(db, "PRAGMA integrity_check") == [("ok",)]


def test_the_wal_is_kept_small(tmp_path: Path) -> None:
    with Store(tmp_path / "f.db") as store:
        settings = store.pragmas()
    assert settings["wal_autocheckpoint"] == WAL_BOUND_PAGES
    assert settings["journal_size_limit"] == WAL_BOUND_BYTES


def test_a_full_disk_through_the_cli_writes_nothing(
    small_disk: Path, flow: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = small_disk / "f.db"
    Store(db).close()
    before = counts(db)
    filler = fill(small_disk)
    result: Any = CliRunner().invoke(cli.app, ["--db", str(db), "run", flow, "--detach"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("flowctl: database or disk is full: ")
    filler.unlink()  # (a reader needs a little room too, for the WAL's shared memory)
    assert counts(db) == before
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
