"""The PostgreSQL test server itself: fresh databases per test, a throwaway cluster the
tests start themselves when no server URL is given, one summary line when there is no
server at all, and CI never skipping."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import wait_until
from tests.pg import (
    BIN_ENV,
    DIR_ENV,
    DIR_PREFIX,
    URL_ENV,
    fresh_database,
    server_binaries,
    server_url,
    unavailable,
)


def _tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        ).fetchall()
    return [r[0] for r in rows]


def test_each_fresh_database_is_empty_separate_and_dropped_afterwards(pg_url: str) -> None:
    import psycopg

    assert _tables(pg_url) == []
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE mine (x int)")
    with fresh_database() as other:
        assert other != pg_url
        assert _tables(other) == []
    assert _tables(pg_url) == ["mine"]
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(other).close()


def _pytest(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=100,
    )


def _outcome(env: dict[str, str]) -> str:
    proc = _pytest(env, "-p", "no:xdist", f"{__file__}::{FRESH}")
    return proc.stdout.strip().splitlines()[-1]


FRESH = "test_each_fresh_database_is_empty_separate_and_dropped_afterwards"
# Without a server URL, a cluster folder or server programs: what a machine without
# PostgreSQL looks like to the tests.
NOTHING = {URL_ENV: None, DIR_ENV: None, "CI": None, BIN_ENV: "/nonexistent/postgresql/bin"}


def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in changes.items():
        env.pop(key, None)
        if value is not None:
            env[key] = value
    return env


def test_without_a_server_the_tests_skip_locally_but_fail_under_ci() -> None:
    server_url()  # only meaningful where the real server runs them: skip / fail like them
    assert "1 skipped" in _outcome(_env(**NOTHING))
    assert "1 error" in _outcome(_env(**{**NOTHING, "CI": "true"}))  # the fixture fails
    assert "1 passed" in _outcome(_env(**{**NOTHING, URL_ENV: server_url(), "CI": "true"}))


def test_the_skipped_postgresql_tests_are_summarised_in_one_line() -> None:
    server_url()  # as above
    proc = _pytest(_env(**NOTHING), "-p", "no:xdist", "tests/test_pg_urls.py")
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, proc.stdout
    count = int(skipped[0].split("[", 1)[1].split("]", 1)[0])
    assert count >= 3 and f"{count} skipped" in proc.stdout.splitlines()[-1]
    assert "tests/pg.py: no PostgreSQL server for the tests: install" in skipped[0]
    assert "apt-get install postgresql" in skipped[0]


def _postmasters(under: str) -> dict[int, int]:
    """The PostgreSQL servers whose data folder is under `under`: pid -> owner uid. A
    process the server has just forked shows the server's command line until it sets its
    own title: one whose parent is such a server is its child, not another server."""
    found: dict[int, tuple[int, int]] = {}  # pid -> (parent pid, uid)
    for entry in os.listdir("/proc"):
        try:
            argv = Path("/proc", entry, "cmdline").read_bytes().split(b"\0")
            status = Path("/proc", entry, "status").read_text()
        except OSError:  # not a process, or it just ended
            continue
        server = argv[0].endswith(b"/postgres") and b"-D" in argv  # not initdb, pg_ctl
        if server and argv[argv.index(b"-D") + 1].startswith(under.encode()):
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            found[int(entry)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]))
    return {pid: uid for pid, (parent, uid) in found.items() if parent not in found}


def _leave_no_server(tmp: str) -> None:
    """A failed test still stops the servers it caused (SIGQUIT: immediate shutdown)."""
    for pid in _postmasters(tmp):
        os.kill(pid, signal.SIGQUIT)
    shutil.rmtree(tmp, ignore_errors=True)


def test_without_a_url_the_session_starts_one_cluster_for_all_workers_and_stops_it() -> None:
    """The README's test command on a fresh machine with the server programs installed:
    two xdist workers share one throwaway cluster, gone when the session ends."""
    if server_binaries() is None:
        unavailable("PostgreSQL's server programs are not installed (apt-get install postgresql)")
    tmp = tempfile.mkdtemp(prefix="fx", dir="/tmp")  # short: the server's socket lives there
    os.chmod(tmp, 0o711)
    try:
        env = _env(**{URL_ENV: None, DIR_ENV: None, BIN_ENV: None, "TMPDIR": tmp})
        tests = [f"{__file__}::{FRESH}", "tests/test_pg_urls.py::" + SECOND]
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", *tests],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env,
        )
        seen: dict[int, int] = {}
        while proc.poll() is None:
            seen |= _postmasters(tmp)
            time.sleep(0.05)  # sampling the process table, not waiting for a condition
        out = proc.communicate(timeout=10)[0]
        assert proc.returncode == 0, out
        assert "[gw0]" in out and "[gw1]" in out and "2 passed" in out, out
        assert len(seen) == 1, seen  # one cluster for both workers
        if os.getuid() == 0:  # initdb refuses root: the server runs as postgres
            assert set(seen.values()) == {pwd.getpwnam("postgres").pw_uid}
        assert _postmasters(tmp) == {}  # stopped when the session ended
        assert [p for p in os.listdir(tmp) if p.startswith(DIR_PREFIX)] == []  # removed
    finally:
        _leave_no_server(tmp)


SECOND = "test_a_database_that_does_not_exist_is_one_line_naming_it"


@pytest.mark.crash
def test_a_cluster_left_by_a_killed_session_is_stopped_by_the_next_one() -> None:
    if server_binaries() is None:
        unavailable("PostgreSQL's server programs are not installed (apt-get install postgresql)")
    tmp = tempfile.mkdtemp(prefix="fx", dir="/tmp")
    os.chmod(tmp, 0o711)
    try:
        env = _env(**{URL_ENV: None, DIR_ENV: None, BIN_ENV: None, "TMPDIR": tmp})
        killed = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             "tests/test_pg_urls.py"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
        )  # fmt: skip
        try:
            wait_until(lambda: _postmasters(tmp), timeout=90)
        finally:
            killed.kill()  # SIGKILL: its session never ends, its cluster stays
            killed.wait()
        assert _postmasters(tmp) != {}
        later = _pytest(env, "-p", "no:xdist", "--collect-only", f"{__file__}::{FRESH}")
        assert later.returncode == 0, later.stdout
        assert _postmasters(tmp) == {}
        assert [p for p in os.listdir(tmp) if p.startswith(DIR_PREFIX)] == []
    finally:
        _leave_no_server(tmp)
