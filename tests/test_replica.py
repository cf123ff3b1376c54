"""A continuous Litestream replica (issue 42): `flowctl replicate` beside a daemon, every
process killed with SIGKILL mid-work, `flowctl restore` to a new path, the restored file
whole and holding every run, and a daemon on it finishing the work.

Real processes and the real `litestream` binary (the [replica] extra, in [dev]): never
skipped, in CI or not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flowctl.client import Client
from flowctl.errors import UsageError
from flowctl.replica.binary import litestream_binary
from flowctl.replica.destination import replica_url
from flowctl.replica.litestream import child_env
from tests.helpers import ROOT, query, wait_until

FLOW = """
import flowctl


@flowctl.workflow("drill")
def drill(ctx, n: int):
    total = 0
    for i in range(4):
        total += ctx.step(f"s{i}", lambda i=i: i * n)
        ctx.sleep("300ms")
    ctx.wait_signal("finish")  # sent only to the restored file: no run ends before the kill
    return total
"""
RUNS = 20


def spawn(db: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`flowctl --db DB ARGS` in a process group of its own (killed whole)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "flowctl", "--db", str(db), *args],
            cwd=str(ROOT),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def flowctl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowctl", *args],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_the_litestream_binary_is_installed() -> None:
    assert os.access(litestream_binary(), os.X_OK)


def test_destinations() -> None:
    assert replica_url("/srv/rep") == "file:///srv/rep"
    assert replica_url("file:///srv/rep") == "file:///srv/rep"
    assert replica_url("s3://bucket/db?endpoint=http://minio:9000") == (
        "s3://bucket/db?endpoint=http://minio:9000"
    )
    for bad in ("", "ftp://x/y", "file://host/x", "s3:///nobucket"):
        with pytest.raises(UsageError):
            replica_url(bad)
    with pytest.raises(UsageError) as said:
        replica_url("s3://AKIDEXAMPLE:hush-hush@bucket/db")
    assert "hush-hush" not in str(said.value) and "AWS_SECRET_ACCESS_KEY" in str(said.value)


def test_litestream_gets_a_ca_bundle_it_can_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Litestream 0.5 cannot start an S3 client while AWS_CA_BUNDLE is set: the bundle
    goes to it as SSL_CERT_FILE instead (the HTTPS test in test_replica_s3.py proves it)."""
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/my-ca.pem")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "from-the-environment")
    env = child_env("s3://bucket/db?endpoint=https://minio.internal:9000")
    assert "AWS_CA_BUNDLE" not in env and env["SSL_CERT_FILE"] == "/etc/my-ca.pem"
    assert env["AWS_SECRET_ACCESS_KEY"] == "from-the-environment"
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/mine.pem")
    assert child_env("s3://bucket/db")["SSL_CERT_FILE"] == "/etc/ssl/mine.pem"
    assert child_env("file:///srv/rep")["AWS_CA_BUNDLE"] == "/etc/my-ca.pem"


def test_restore_refuses_an_existing_path_and_writes_nothing(tmp_path: Path) -> None:
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"mine")
    done = flowctl("restore", str(tmp_path / "rep"), str(taken))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "exists" in done.stderr and taken.read_bytes() == b"mine"
    gone = flowctl("restore", f"file://{tmp_path}/none", str(tmp_path / "new.db"))
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1
    assert not (tmp_path / "new.db").exists()


@pytest.mark.crash
def test_sigkill_everything_then_restore_and_finish_the_work(tmp_path: Path) -> None:
    rep = tmp_path / "replica"
    drill(tmp_path, f"file://{rep}", lambda: (rep / "ltx").is_dir())


def drill(tmp_path: Path, dest: str, shipped: Callable[[], bool]) -> None:
    """RUNS runs queued; `flowctl replicate DEST` beside a daemon until the replica holds
    checkpoints of every run (`shipped`, then a restore that works); both killed with
    SIGKILL; the restored file whole, holding every run, and a daemon on it finishing them."""
    flow = tmp_path / "drill.py"
    flow.write_text(FLOW)
    db, restored = tmp_path / "f.db", tmp_path / "restored.db"
    lines = "".join(json.dumps({"n": n}) + "\n" for n in range(1, RUNS + 1))
    queued = flowctl(
        "--db", str(db), "run", f"{flow}:drill", "--detach", "--input-file", "-", stdin=lines
    )
    assert queued.returncode == 0, queued.stderr
    ids = {r[0] for r in query(db, "SELECT run_id FROM runs")}
    assert len(ids) == RUNS
    replica = spawn(db, tmp_path / "replica.log", "replicate", dest, "--sync-interval", "200ms")
    daemon = spawn(db, tmp_path / "daemon.log", "daemon", "--workers", "2")
    try:
        # mid-work: some runs have checkpoints, none is finished
        wait_until(lambda: query(db, "SELECT COUNT(*) FROM journal")[0][0] >= RUNS, timeout=60)
        wait_until(shipped, timeout=30)
        wait_until(
            lambda: flowctl("restore", dest, str(tmp_path / "probe.db")).returncode == 0,
            timeout=30,
        )
    finally:
        kill_group(daemon)
        kill_group(replica)
    done = flowctl("restore", dest, str(restored), "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["integrity"] == "ok" and said["runs"] == RUNS
    assert query(restored, "PRAGMA integrity_check") == [("ok",)]
    assert {r[0] for r in query(restored, "SELECT run_id FROM runs")} == ids
    unfinished = query(restored, "SELECT COUNT(*) FROM runs WHERE status <> 'completed'")[0][0]
    assert unfinished == RUNS  # restored mid-work: none could end before its signal
    finish(tmp_path, restored)


def finish(tmp_path: Path, restored: Path) -> None:
    """A daemon on the restored file completes every run (each told to, by the signal its
    last call waits for), each with its right result."""
    with Client(restored) as client:
        for (run_id,) in query(restored, "SELECT run_id FROM runs"):
            client.signal(run_id, "finish")
    finisher = spawn(restored, tmp_path / "finisher.log", "daemon")
    try:
        wait_until(
            lambda: (
                query(restored, "SELECT COUNT(*) FROM runs WHERE status = 'completed'")[0][0]
                == RUNS
            ),
            timeout=120,
        )
    finally:
        os.killpg(finisher.pid, signal.SIGTERM)
        finisher.wait(timeout=30)
    results = dict(query(restored, "SELECT run_id, result FROM runs"))
    expected = {json.dumps(6 * n) for n in range(1, RUNS + 1)}  # (0+1+2+3) * n
    assert set(results.values()) == expected
