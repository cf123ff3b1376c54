"""Encryption at rest (issue 42): key files, values sealed on both stores, reading needs
the key (one line without it, one line with a wrong one), nothing of a value in clear in
the database or its WAL, rotation while a daemon runs, copy and backup.

Real processes (`python -m flowctl`, a real daemon); the raw files and rows are read as an
independent observer."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from flowctl.crypto.cipher import load_keyring
from flowctl.crypto.keyfile import KeyFileError, new_key_file, read_key
from flowctl.store import open_store
from flowctl.store.values import KeyNeededError
from tests.helpers import ROOT, query, wait_until

FLOW = """
import flowctl


def boom(text):
    raise ValueError("failed on " + text)


@flowctl.workflow("sealed")
def sealed(ctx, secret: str):
    ctx.step("echo", lambda: secret + "/step")
    try:
        ctx.step("boom", boom, secret)
    except Exception:
        pass
    ctx.step("say", lambda: print("printed " + secret, flush=True))
    ctx.publish("progress", secret + "/published")
    got = ctx.wait_signal("go")
    return {"result": secret, "signal": got}
"""


def flowctl(
    db: Path | str, *args: str, key: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_KEY_FILE"}
    if key is not None:
        env["FLOWCTL_KEY_FILE"] = str(key)
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        timeout=60,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"flowctl {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done


def daemon(db: Path | str, log: Path, key: Path | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_KEY_FILE"}
    if key is not None:
        env["FLOWCTL_KEY_FILE"] = str(key)
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "flowctl", "--db", str(db), "daemon", "--workers", "2"],
            cwd=str(ROOT),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def raw_files(db: Path) -> bytes:
    """The database file and its WAL (and shm), as bytes on disk."""
    return b"".join(
        p.read_bytes() for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()
    )


def status(db: Path | str, run_id: str) -> str:
    return str(query(db, "SELECT status FROM runs WHERE run_id = ?", (run_id,))[0][0])


def start_sealed(db: Path | str, flow: Path, key: Path, secret: str) -> str:
    out = flowctl(
        db, "run", f"{flow}:sealed", "-i", f"secret={secret}", "--detach", "--json", key=key
    )
    return str(json.loads(out.stdout)["id"])


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "sealed_flow.py"
    path.write_text(FLOW)
    return path


# -- key files -------------------------------------------------------------------------


def test_keys_new_writes_a_private_256_bit_key_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "k"
    done = flowctl(tmp_path / "f.db", "keys", "new", str(path), "--json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_bytes()) == 32
    before = path.read_bytes()
    again = flowctl(tmp_path / "f.db", "keys", "new", str(path), check=False)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "already exists" in again.stderr
    assert path.read_bytes() == before
    assert read_key(path).kid in done.stdout
    assert not (tmp_path / "f.db").exists()  # nothing else written


@pytest.mark.parametrize(
    ("content", "mode", "said"),
    [(b"x" * 31, 0o600, "holds 31 bytes"), (bytes(range(32)), 0o644, "mode 644")],
    ids=["short", "readable-by-others"],  # fixed ids: every xdist worker collects the same
)
def test_a_bad_key_file_is_one_line_and_nothing_is_written(
    tmp_path: Path, flow: Path, content: bytes, mode: int, said: str
) -> None:
    key = tmp_path / "bad"
    key.write_bytes(content)
    key.chmod(mode)
    db = tmp_path / "f.db"
    done = flowctl(db, "run", f"{flow}:sealed", "-i", "secret=x", key=key, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and said in done.stderr
    assert not db.exists()
    with pytest.raises(KeyFileError):
        read_key(key)


# -- sealed values, SQLite, a real daemon ------------------------------------------------


def test_no_value_is_ever_written_in_clear_and_reading_needs_the_key(
    tmp_path: Path, flow: Path
) -> None:
    key, other = new_key_file(tmp_path / "k1"), new_key_file(tmp_path / "k2")
    db = tmp_path / "f.db"
    marker = f"MARK{uuid.uuid4().hex}"
    run_id = start_sealed(db, flow, Path(key.path), marker)
    proc = daemon(db, tmp_path / "daemon.log", Path(key.path))
    try:
        wait_until(lambda: status(db, run_id) == "waiting", timeout=30)
        data = f'{{"by": "{marker}/signal"}}'
        flowctl(db, "signal", run_id, "go", "--data", data, key=Path(key.path))
        wait_until(lambda: status(db, run_id) == "completed", timeout=30)
        assert marker.encode() not in raw_files(db)  # the WAL while the daemon holds it
    finally:
        stop(proc)
    assert marker.encode() not in raw_files(db)
    # every kind of value is an envelope naming the key
    sealed = [
        *query(db, "SELECT input FROM runs"),
        *query(db, "SELECT result FROM runs"),
        *query(db, "SELECT value FROM journal WHERE value IS NOT NULL"),
        *query(db, "SELECT payload FROM signals"),
        *query(db, "SELECT value FROM published"),
        *query(db, "SELECT text FROM output"),
    ]
    assert len(sealed) >= 7
    assert all(str(v).startswith('{"$enc":"v1","kid":"' + key.kid) for (v,) in sealed)

    shown = flowctl(db, "show", run_id, "--json", key=Path(key.path)).stdout
    assert f"{marker}/step" in shown and f"failed on {marker}" in shown
    assert f"{marker}/published" in shown and f"{marker}/signal" in shown
    assert f"printed {marker}" in flowctl(db, "logs", run_id, key=Path(key.path)).stdout

    for args in (["show", run_id], ["logs", run_id], ["daemon"]):
        without = flowctl(db, *args, check=False)
        assert without.returncode == 1
        assert without.stderr.count("\n") == 1
        assert f"key {key.kid} is needed" in without.stderr and "no key" in without.stderr
        wrong = flowctl(db, *args, key=Path(other.path), check=False)
        assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1
        assert key.kid in wrong.stderr and other.kid in wrong.stderr
    for args in (["ls"], ["status"], ["why", run_id]):
        assert run_id[:8] in flowctl(db, *args).stdout or args == ["status"]
    assert marker not in flowctl(db, "ls", "--json").stdout


def test_a_value_moved_to_another_column_does_not_decrypt(tmp_path: Path, flow: Path) -> None:
    """The column is bound to the ciphertext: a sealed input copied over a run's result
    (a forged completion) is refused, not shown as the result."""
    key = new_key_file(tmp_path / "k")
    db = tmp_path / "f.db"
    run_id = start_sealed(db, flow, Path(key.path), "abc")
    with open_store(db, keys=load_keyring(key.path)) as store:
        store.db.transact(
            lambda tx: tx.execute("UPDATE runs SET result = input WHERE run_id = ?", [run_id])
        )
    done = flowctl(db, "show", run_id, key=Path(key.path), check=False)
    assert done.returncode == 1 and "does not decrypt" in done.stderr


def test_a_tampered_value_does_not_decrypt(tmp_path: Path, flow: Path) -> None:
    key = new_key_file(tmp_path / "k")
    db = tmp_path / "f.db"
    run_id = start_sealed(db, flow, Path(key.path), "abc")
    (text,) = query(db, "SELECT input FROM runs")[0]
    tampered = text.replace('"c":"', '"c":"AAAA', 1)
    with open_store(db, keys=load_keyring(key.path)) as store:
        store.db.transact(
            lambda tx: tx.execute("UPDATE runs SET input = ? WHERE run_id = ?", [tampered, run_id])
        )
    done = flowctl(db, "show", run_id, key=Path(key.path), check=False)
    assert done.returncode == 1 and "does not decrypt" in done.stderr


# -- PostgreSQL: the same envelopes in jsonb and text columns -----------------------------


def test_values_are_sealed_on_postgres(tmp_path: Path, flow: Path, pg_url: str) -> None:
    key = new_key_file(tmp_path / "k")
    marker = f"MARK{uuid.uuid4().hex}"
    run_id = start_sealed(pg_url, flow, Path(key.path), marker)
    proc = daemon(pg_url, tmp_path / "daemon.log", Path(key.path))
    try:
        wait_until(lambda: status(pg_url, run_id) == "waiting", timeout=30)
        flowctl(pg_url, "signal", run_id, "go", "--data", f'"{marker}"', key=Path(key.path))
        wait_until(lambda: status(pg_url, run_id) == "completed", timeout=30)
    finally:
        stop(proc)
    dumped = [
        *query(pg_url, "SELECT CAST(input AS TEXT), CAST(result AS TEXT) FROM runs"),
        *query(pg_url, "SELECT CAST(value AS TEXT) FROM journal"),
        *query(pg_url, "SELECT CAST(payload AS TEXT) FROM signals"),
        *query(pg_url, "SELECT CAST(value AS TEXT) FROM published"),
        *query(pg_url, "SELECT text FROM output"),
    ]
    assert dumped and not any(marker in str(v) for row in dumped for v in row)
    shown = flowctl(pg_url, "show", run_id, "--json", key=Path(key.path)).stdout
    assert f"{marker}/published" in shown and f"failed on {marker}" in shown
    without = flowctl(pg_url, "show", run_id, check=False)
    assert without.returncode == 1 and f"key {key.kid} is needed" in without.stderr
    with open_store(pg_url, keys=load_keyring(key.path)) as store:
        assert store.get_run(run_id).result == {"result": marker, "signal": marker}


# -- rotation, copy, backup --------------------------------------------------------------


def test_rotate_while_a_daemon_runs_then_the_old_key_is_not_needed(
    tmp_path: Path, flow: Path
) -> None:
    old, new = new_key_file(tmp_path / "old"), new_key_file(tmp_path / "new")
    db = tmp_path / "f.db"
    runs = [start_sealed(db, flow, Path(old.path), f"before{i}") for i in range(30)]
    proc = daemon(db, tmp_path / "daemon.log", Path(old.path))  # holds the old key only
    try:
        wait_until(lambda: all(status(db, r) == "waiting" for r in runs[:5]), timeout=60)
        done = flowctl(db, "keys", "rotate", new.path, "--json", key=Path(old.path))
        assert f'"key_id": "{new.kid}"' in done.stdout
        # the daemon adopted the new key: what it writes now opens with the new key alone
        for r in runs:
            wait_until(lambda r=r: status(db, r) == "waiting", timeout=60)
            flowctl(db, "signal", r, "go", "--data", '"after"', key=Path(new.path))
        after = start_sealed(db, flow, Path(new.path), "after-rotation")
        flowctl(db, "signal", after, "go", "--data", '"x"', key=Path(new.path))
        wait_until(lambda: all(status(db, r) == "completed" for r in [*runs, after]), timeout=60)
    finally:
        stop(proc)
    kids = {
        str(v)[: len('{"$enc":"v1","kid":"') + 16]
        for sql in (
            "SELECT input FROM runs",
            "SELECT result FROM runs",
            "SELECT error FROM runs WHERE error IS NOT NULL",
            "SELECT value FROM journal WHERE value IS NOT NULL",
            "SELECT payload FROM signals",
            "SELECT value FROM published",
            "SELECT text FROM output",
        )
        for (v,) in query(db, sql)
    }
    assert kids == {'{"$enc":"v1","kid":"' + new.kid}
    assert query(db, "SELECT value FROM meta WHERE key = 'key_id'") == [(new.kid,)]
    assert query(db, "SELECT value FROM meta WHERE key = 'key_next'") == []
    shown = flowctl(db, "show", runs[0], "--json", key=Path(new.path)).stdout
    assert "before0/published" in shown and '"signal": "after"' in shown
    stale = flowctl(db, "show", runs[0], key=Path(old.path), check=False)
    assert stale.returncode == 1 and f"key {new.kid} is needed" in stale.stderr


def test_rotate_on_postgres(tmp_path: Path, pg_url: str) -> None:
    from datetime import UTC, datetime

    from flowctl.clock import SystemClock
    from flowctl.ops.keys import rotate
    from flowctl.store import NewRun

    old, new = new_key_file(tmp_path / "old"), new_key_file(tmp_path / "new")
    with open_store(pg_url, keys=load_keyring(old.path)) as store:
        for i in range(7):
            store.create_run(
                NewRun(f"r{i}", "wf", "x.py:wf", "python", {"secret": f"pg-{i}"}),
                datetime.now(UTC),
            )
        done = rotate(store, new, SystemClock(), batch=3, settle=0.0)
    assert done.kid == new.kid and done.resealed == 7
    texts = [str(v) for (v,) in query(pg_url, "SELECT CAST(input AS TEXT) FROM runs")]
    assert len(texts) == 7 and all(new.kid in t and old.kid not in t for t in texts)
    with open_store(pg_url, keys=load_keyring(new.path)) as store:
        assert store.get_run("r6").input == {"secret": "pg-6"}
    with pytest.raises(KeyNeededError):
        open_store(pg_url, keys=load_keyring(old.path))


def test_an_interrupted_rotation_resumes_and_a_late_opener_adopts_the_new_key(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime

    from flowctl.clock import SystemClock
    from flowctl.ops.keys import rotate
    from flowctl.store import NewRun
    from flowctl.store.rekey import SEALED

    old, new = new_key_file(tmp_path / "old"), new_key_file(tmp_path / "new")
    db = tmp_path / "f.db"
    with open_store(db, keys=load_keyring(old.path)) as store:
        for i in range(10):
            store.create_run(
                NewRun(f"r{i}", "wf", "x.py:wf", "python", {"i": i}), datetime.now(UTC)
            )
        store.begin_rotation(new.secret)
        store.reseal_batch(SEALED[0], None, 4)  # then the rotation dies: 4 of 10 inputs done
    kids = [str(v)[20:36] for (v,) in query(db, "SELECT input FROM runs ORDER BY run_id")]
    assert kids == [new.kid] * 4 + [old.kid] * 6
    # a process that holds the old key only, opening now, writes with the new one
    with open_store(db, keys=load_keyring(old.path)) as late:
        late.create_run(NewRun("late", "wf", "x.py:wf", "python", {"i": 99}), datetime.now(UTC))
    (late_text,) = query(db, "SELECT input FROM runs WHERE run_id = 'late'")[0]
    assert new.kid in late_text
    with open_store(db, keys=load_keyring(old.path)) as store:  # the rotation run again
        done = rotate(store, new, SystemClock(), settle=0.0)
    assert done.resealed == 6
    with open_store(db, keys=load_keyring(new.path)) as store:
        assert [store.get_run(f"r{i}").input for i in range(10)] == [{"i": i} for i in range(10)]
    assert query(db, "SELECT COUNT(*) FROM meta WHERE key = 'key_next'") == [(0,)]


def test_a_process_that_slept_through_a_rotation_refuses_to_write_with_the_old_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    from flowctl.clock import SystemClock
    from flowctl.ops.keys import rotate
    from flowctl.store import NewRun, core

    monkeypatch.setattr(core, "KEY_CHECK_EVERY", 0.0)  # look before every write
    old, new = new_key_file(tmp_path / "old"), new_key_file(tmp_path / "new")
    db = tmp_path / "f.db"
    stale = open_store(db, keys=load_keyring(old.path))
    try:
        with open_store(db, keys=load_keyring(old.path)) as store:
            rotate(store, new, SystemClock(), settle=0.0)
        with pytest.raises(KeyNeededError, match=new.kid):
            stale.create_run(NewRun("r", "wf", "x.py:wf", "python", {}), datetime.now(UTC))
    finally:
        stale.close()
    assert query(db, "SELECT COUNT(*) FROM runs") == [(0,)]


def test_rotate_encrypts_a_database_written_in_clear_and_resumes(
    tmp_path: Path, flow: Path
) -> None:
    db = tmp_path / "f.db"
    out = flowctl(db, "run", f"{flow}:sealed", "-i", "secret=clear-text", "--detach", "--json")
    run_id = str(json.loads(out.stdout)["id"])
    assert b"clear-text" in raw_files(db)
    key = new_key_file(tmp_path / "k")
    first = flowctl(db, "keys", "rotate", key.path, "--json")
    assert '"resealed": 1' in first.stdout
    again = flowctl(db, "keys", "rotate", key.path, "--json", key=Path(key.path))
    assert '"resealed": 0' in again.stdout  # resumed: nothing left to do
    flowctl(db, "vacuum", key=Path(key.path))
    assert b"clear-text" not in raw_files(db)
    assert "clear-text" in flowctl(db, "show", run_id, "--json", key=Path(key.path)).stdout


def test_copy_and_backup_keep_values_sealed_and_readable_with_the_key(
    tmp_path: Path, flow: Path
) -> None:
    key = new_key_file(tmp_path / "k")
    db = tmp_path / "f.db"
    marker = f"MARK{uuid.uuid4().hex}"
    run_id = start_sealed(db, flow, Path(key.path), marker)
    flowctl(db, "backup", str(tmp_path / "b.db"))  # no key needed
    flowctl(db, "copy", str(db), str(tmp_path / "c.db"))
    for copy in (tmp_path / "b.db", tmp_path / "c.db"):
        assert marker.encode() not in raw_files(copy)
        assert marker in flowctl(copy, "show", run_id, "--json", key=Path(key.path)).stdout
        assert flowctl(copy, "show", run_id, check=False).returncode == 1
    with pytest.raises(KeyNeededError):
        open_store(tmp_path / "c.db")


def test_a_schedules_input_is_sealed_and_its_runs_get_it(tmp_path: Path, flow: Path) -> None:
    key = new_key_file(tmp_path / "k")
    db = tmp_path / "f.db"
    add = ["schedule", "add", "nightly", "--cron", "0 9 * * *", f"{flow}:sealed"]
    flowctl(db, *add, "-i", "secret=scheduled-secret", key=Path(key.path))
    (text,) = query(db, "SELECT input FROM schedules")[0]
    assert text.startswith('{"$enc":"v1","kid":"' + key.kid)
    assert b"scheduled-secret" not in raw_files(db)
    shown = flowctl(db, "schedule", "show", "nightly", "--json", key=Path(key.path)).stdout
    assert "scheduled-secret" in shown
    flowctl(db, "schedule", "trigger", "nightly", key=Path(key.path))
    (run_id,) = query(db, "SELECT run_id FROM runs")[0]
    assert "scheduled-secret" in flowctl(db, "show", run_id, "--json", key=Path(key.path)).stdout


# -- the HTTP API and the TUI read with the key; key_file in flowctl.toml -----------------


def test_the_http_api_decrypts_with_the_key_and_refuses_without(tmp_path: Path, flow: Path) -> None:
    from tests.serve_helpers import Api, port_of, start_serve

    key = new_key_file(tmp_path / "k")
    db = tmp_path / "f.db"
    run_id = start_sealed(db, flow, Path(key.path), "over-http")
    proc, log = start_serve(tmp_path, db, env={"FLOWCTL_KEY_FILE": key.path})
    try:
        got = Api(port_of(proc, log)).call("GET", f"/runs/{run_id}")
        assert got.status == 200 and got.json()["run"]["input"] == {"secret": "over-http"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    refused, log = start_serve(tmp_path, db, env={"FLOWCTL_KEY_FILE": ""})
    assert refused.wait(timeout=30) == 1
    assert f"key {key.kid} is needed" in log.read_text()


def test_the_tui_detail_decrypts_with_the_key(tmp_path: Path, flow: Path) -> None:
    import asyncio

    from flowctl.clock import SystemClock
    from flowctl.tui import FlowctlApp
    from tests.test_tui import detail_text, settle

    key = new_key_file(tmp_path / "k")
    db = tmp_path / "f.db"
    run_id = start_sealed(db, flow, Path(key.path), "in-the-tui")

    async def scenario() -> str:
        with open_store(db, keys=load_keyring(key.path)) as store:
            app = FlowctlApp(store=store, clock=SystemClock())
            async with app.run_test(size=(120, 36)) as pilot:
                await pilot.press("8")  # every run
                await settle(pilot)
                return detail_text(app)

    text = asyncio.run(scenario())
    assert run_id in text and "in-the-tui" in text
    done = flowctl(db, "tui", check=False)
    assert done.returncode == 1 and f"key {key.kid} is needed" in done.stderr


def test_key_file_in_flowctl_toml_is_relative_to_it(tmp_path: Path, flow: Path) -> None:
    key = new_key_file(tmp_path / "k")
    (tmp_path / "flowctl.toml").write_text('db = "f.db"\nkey_file = "k"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWCTL_KEY_FILE", "FLOWCTL_DB")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "flowctl",
            "run",
            f"{flow}:sealed",
            "-i",
            "secret=toml-key",
            "--detach",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    (text,) = query(tmp_path / "f.db", "SELECT input FROM runs")[0]
    assert text.startswith('{"$enc":"v1","kid":"' + key.kid)
