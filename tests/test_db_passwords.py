"""No command prints a database password (issue 38 item 4): every command of the CLI, the
daemon's log, the HTTP API and the TUI header name a PostgreSQL database by its URL with the
password as *** (flowctl.config.mask_password, the one place that hides it), and so does
every error about a server that cannot be reached or a URL that cannot be parsed.

The commands are enumerated from the Typer app itself, so a new command fails
`test_every_command_is_run_with_a_password_in_its_url` until it is added to COMMANDS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pytest
from typer.main import get_command

from flowctl import cli
from flowctl.cli.lazy import build_all
from flowctl.config import mask_password
from flowctl.store import open_store
from flowctl.tui.app import FlowctlApp, HeaderLine
from tests.conftest import ROOT
from tests.inproc import run_main
from tests.pg import unavailable
from tests.serve_helpers import TOKEN, Api, port_of, start_serve
from tests.test_tui import pilot_test, settle

FLOW = textwrap.dedent(
    """
    from flowctl import workflow


    def add(a, b):
        print("adding", a, b)
        return a + b


    @workflow("total")
    def total(ctx, a: int = 1):
        return ctx.step("add", add, a, 2)
    """
)
PING = "name: ping\nsteps:\n  - id: pong\n    run: [echo, pong]\n"

# Every command with harmless arguments, in an order that gives each something to act on:
# {run} is a completed run, {other} a pending one, {tmp} the test's folder. `daemon` and
# `serve` run as real processes (test_the_daemon_log_and_the_http_api_mask_it).
COMMANDS: list[list[str]] = [
    ["init"],
    ["workflows"],
    ["validate", "flows/ping.yaml"],
    ["run", "flows/work.py:total", "-i", "a=5"],
    ["ls"],
    ["show", "{run}"],
    ["why", "{run}"],
    ["wait", "{run}"],
    ["logs", "{run}"],
    ["signal", "{run}", "go"],
    ["cancel", "{run}"],
    ["redrive", "{run}"],
    ["fork", "{run}", "--from", "0"],
    ["rerun", "{run}"],
    ["pause", "{other}"],
    ["resume", "{other}"],
    ["wake", "{other}"],
    ["schedule", "add", "nightly", "flows/work.py:total", "--every", "1h"],
    ["schedule", "ls"],
    ["schedule", "show", "nightly"],
    ["schedule", "pause", "nightly"],
    ["schedule", "resume", "nightly"],
    ["schedule", "trigger", "nightly"],
    ["schedule", "explain", "0 9 * * *"],
    ["schedule", "sync"],
    ["schedule", "rm", "nightly"],
    ["limits", "set", "api", "--rate", "10/1m"],
    ["limits", "ls"],
    ["limits", "rm", "api"],
    ["keys", "new", "{tmp}/k.key"],
    ["replicate", "file://{tmp}/replica"],  # refused: SQLite only, saying which database
    ["restore", "file://{tmp}/replica", "{tmp}/restored.db"],
    ["agenda"],
    ["status"],
    ["tui"],
    ["check"],
    ["copy", "{url}", "{tmp}/copy.db"],
    ["prune", "--older-than", "1d"],
    ["vacuum"],
    ["backup", "{tmp}/backup.db"],
    ["daemon", "stop"],
    ["keys", "rotate", "{tmp}/k.key"],  # last: the values are sealed from then on
]
IN_PROCESSES = ["daemon", "serve"]


def _command_names() -> set[str]:
    """Every command of the app, groups' commands as `group command`."""
    root = build_all(get_command(cli.app))

    def walk(command: Any, prefix: list[str]) -> list[str]:
        if hasattr(command, "commands"):  # a group (Typer's own click, or click's)
            return [n for name, c in command.commands.items() for n in walk(c, [*prefix, name])]
        return [" ".join(prefix)]

    return set(walk(root, []))


def _named(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[0] in ("schedule", "limits", "keys") else argv[0]


@pytest.fixture
def secret_url(pg_url: str) -> str:
    """A fresh database's URL with the password spelled out in it, and one that no output
    contains by chance (`.ci/pg-cluster` and the tests' own cluster make a random one)."""
    password = unquote(urlsplit(pg_url).password or "")
    if len(password) < 12:
        unavailable(
            f"the test server's password {password!r} is too short to search output for;"
            " use a server from .ci/pg-cluster (or unset FLOWCTL_TEST_PG_URL: the tests start one)"
        )
    return pg_url


def _leaks(url: str, text: str) -> list[str]:
    """The forms of `url`'s password found in `text`."""
    raw = urlsplit(url).netloc.rpartition("@")[0].partition(":")[2]
    return [form for form in {raw, unquote(raw)} if form and form in text]


def _project(tmp_path: Path) -> Path:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "work.py").write_text(FLOW)
    (flows / "ping.yaml").write_text(PING)
    return tmp_path


def _run_ids(monkeypatch: pytest.MonkeyPatch, url: str) -> list[str]:
    listed = run_main(monkeypatch, "--db", url, "ls", "--json")
    return [r["id"] for r in json.loads(listed.stdout)]


def _daemon_until_idle(url: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", url, "daemon", "--until-idle"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_every_command_is_run_with_a_password_in_its_url(
    secret_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert {_named(argv) for argv in COMMANDS} | set(IN_PROCESSES) == _command_names()
    monkeypatch.chdir(_project(tmp_path))
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    places = {"run": "", "other": "", "url": secret_url, "tmp": str(tmp_path)}
    said: dict[str, str] = {}
    for argv in COMMANDS:
        if argv[0] == "ls" and not places["run"]:
            logged = _daemon_until_idle(secret_url, tmp_path)  # the run just started completes
            assert not _leaks(secret_url, logged), logged
            places["run"] = _run_ids(monkeypatch, secret_url)[0]
        if argv[0] == "pause" and not places["other"]:
            places["other"] = _run_ids(monkeypatch, secret_url)[0]  # the rerun: pending
        args = [a.format(**places) for a in argv]
        ran = run_main(monkeypatch, "--db", secret_url, *args)
        said[" ".join(argv)] = ran.stdout + ran.stderr
        assert not _leaks(secret_url, ran.stdout + ran.stderr), (args, ran)
    # The output did name the database, masked, where it names it.
    assert "vacuumed postgresql://" in said["vacuum"] and ":***@" in said["vacuum"]
    assert ":***@" in said["status"] and ":***@" in said["copy {url} {tmp}/copy.db"]
    assert f"no daemon is running on {mask_password(secret_url)}" in said["daemon stop"]


def test_the_daemon_log_and_the_http_api_mask_it(secret_url: str, tmp_path: Path) -> None:
    project = _project(tmp_path)
    logged = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", secret_url, "daemon", "--until-idle",
         "--log-level", "info"],
        capture_output=True, text=True, cwd=project, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert f"on {mask_password(secret_url)}" in logged.stderr + logged.stdout
    assert not _leaks(secret_url, logged.stderr + logged.stdout)
    proc, log = start_serve(project, secret_url)
    try:
        api = Api(port_of(proc, log))
        replies = [
            api.call("GET", "/healthz"),
            api.call("GET", "/runs"),
            api.call("GET", "/runs/nosuch"),
            api.call("POST", "/runs", {"workflow": "flows/work.py:total"}),
        ]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bodies = " ".join(r.body.decode() for r in replies) + log.read_text()
    assert replies[0].status == 200 and TOKEN not in bodies
    assert not _leaks(secret_url, bodies), bodies


@pytest.mark.tui
@pilot_test
async def test_the_tui_header_names_the_url_without_its_password(secret_url: str) -> None:
    from flowctl.clock import SystemClock

    with open_store(secret_url) as store:
        app = FlowctlApp(store=store, clock=SystemClock())
        async with app.run_test(size=(200, 24)) as pilot:
            await settle(pilot)
            header = app.query_one(HeaderLine).render().plain
    assert mask_password(secret_url) in header
    assert not _leaks(secret_url, header)


# Unreachable servers and URLs libpq cannot parse, each with its password as it decodes.
UNREACHABLE = [
    ("postgresql://ana:Zq7-unreachable-pw@127.0.0.1:1/db", "Zq7-unreachable-pw"),
    (f"postgresql://ana:{quote('Zq7@un/reach:pw', safe='')}@127.0.0.1:1/db", "Zq7@un/reach:pw"),
    ("postgresql://ana:Zq7%zzbadly-encoded-pw@127.0.0.1:1/db", "Zq7%zzbadly-encoded-pw"),
    ("postgresql://ana:Zq7@at-sign-pw@127.0.0.1:1/db", "Zq7@at-sign-pw"),
    ("postgresql://ana@127.0.0.1:1/db?password=Zq7-query-pw", "Zq7-query-pw"),
    ("postgresql://ana:Zq7-bad-port-pw@127.0.0.1:notaport/db", "Zq7-bad-port-pw"),
    ("postgres://ana:Zq7-bracket-pw@[::1/db", "Zq7-bracket-pw"),
    ("mysql://ana:Zq7-other-scheme-pw@127.0.0.1/db", "Zq7-other-scheme-pw"),
]


@pytest.mark.parametrize(("url", "password"), UNREACHABLE)
def test_an_unreachable_or_malformed_url_is_one_line_without_its_password(
    url: str, password: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (["status"], ["vacuum"], ["ls"], ["schedule", "ls"], ["daemon", "stop"]):
        ran = run_main(monkeypatch, "--db", url, *args)
        assert ran.returncode != 0 and ran.stdout == "", (args, ran)
        assert ran.stderr.startswith("flowctl: ") and ran.stderr.count("\n") == 1, ran.stderr
        pieces = [password, *password.split("@")[1:], quote(password, safe="")]
        assert not [p for p in pieces if p in ran.stderr], ran.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p@w/x@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),
        ("postgresql://[::1]:5432/db", "postgresql://[::1]:5432/db"),
        ("postgresql://u@h/db?sslmode=require&password=pw", "postgresql://u@h/db?sslmode=require&password=***"),
        ("host=h password='a b' dbname=d", "host=h password=*** dbname=d"),
        ("--db 'mysql://root:pw@h/db': no", "--db 'mysql://root:***@h/db': no"),
        ("/home/ana/flowctl.db", "/home/ana/flowctl.db"),
    ],
)  # fmt: skip
def test_mask_password_hides_each_form_and_keeps_the_rest(text: str, shown: str) -> None:
    assert mask_password(text) == shown


def test_mask_password_hides_the_pieces_a_driver_quotes() -> None:
    url = "postgresql://u:se@cretpw@h:1/db"
    said = "failed to resolve host 'cretpw@h': Name or service not known"
    assert mask_password(said, url) == "failed to resolve host '***@h': Name or service not known"
    same = "postgresql://ana:ana@h:1/ana_db"  # a password the URL spells elsewhere too
    said = 'database "ana_db" does not exist'
    assert mask_password(said, same) == said
