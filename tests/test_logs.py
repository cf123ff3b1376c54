"""`flowctl logs`: what steps print is stored per run and step as it happens.

Python steps' print, sys.stdout/sys.stderr and logging records, and command steps'
stdout/stderr; concurrent runs in one daemon never mix; `-f` follows a run until it ends;
the 1 MiB cap per stream is kept and the cut is said.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import query, wait_until

ROOT = Path(__file__).resolve().parent.parent
FLOWCTL = Path(sys.executable).with_name("flowctl")

FLOWS = """
import logging
import sys
import time
from pathlib import Path

from flowctl import workflow

log = logging.getLogger("mine")


def chatty(who):
    print("hello from", who)
    sys.stdout.write("second line\\n")
    sys.stderr.write("to stderr\\n")
    log.warning("a warning for %s", who)
    return who


@workflow
def talk(ctx, who="ana"):
    ctx.step("greet", chatty, who)
    ctx.step("quiet", lambda: 1)
    ctx.step("bye", print, "bye", who)
    return who


def rendezvous(folder, me, other, lines):
    Path(folder, me).touch()
    for _ in range(500):
        if Path(folder, other).exists():
            break
        time.sleep(0.01)
    for i in range(lines):
        print(f"{me} line {i}")
        time.sleep(0.002)
    return me


@workflow
def pair(ctx, folder, me, other):
    return ctx.step("together", rendezvous, folder, me, other, 40)


def gated(folder):
    print("working 1", flush=True)
    for _ in range(6000):
        if Path(folder, "go").exists():
            break
        time.sleep(0.01)
    print("working 2")
    return "ok"


@workflow
def slow(ctx, folder):
    return ctx.step("work", gated, folder)
"""

YAML = """
name: shell
steps:
  - id: out
    run: "echo one; echo two >&2; echo three"
  - id: big
    run: "head -c 1300000 /dev/zero | tr '\\\\0' a"
"""


def flowctl(db: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FLOWCTL), "--db", db, *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def last_run(db: str, cwd: Path) -> str:
    return str(json.loads(flowctl(db, "ls", "--json", "-n", "1", cwd=cwd).stdout)[0]["run_id"])


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "shell.yaml").write_text(YAML)
    return tmp_path


def test_a_python_steps_print_stderr_and_logging_are_stored_per_step(folder: Path, db: str) -> None:
    ran = flowctl(db, "run", "flows.py:talk", "-i", "who=bo", cwd=folder)
    assert ran.returncode == 0, ran.stderr
    assert "hello from bo" in ran.stdout  # a foreground run still prints where it did
    run_id = last_run(db, folder)
    out = flowctl(db, "logs", run_id, "--json", cwd=folder)
    assert out.returncode == 0, out.stderr
    chunks = json.loads(out.stdout)
    lines = [(c["step"], c["stream"], line) for c in chunks for line in c["text"].splitlines()]
    assert lines == [
        ("greet", "stdout", "hello from bo"),
        ("greet", "stdout", "second line"),
        ("greet", "stderr", "to stderr"),
        ("greet", "log", "WARNING mine: a warning for bo"),
        ("bye", "stdout", "bye bo"),
    ]
    assert [c["call_index"] for c in chunks][-1] == 2
    assert all(c["at"].endswith("Z") for c in chunks)
    text = flowctl(db, "logs", run_id, "--step", "bye", cwd=folder)
    assert text.stdout.splitlines()[0].endswith("bye  bye bo")
    assert len(text.stdout.splitlines()) == 1


def test_a_command_steps_output_is_stored_and_the_cap_is_said(folder: Path, db: str) -> None:
    ran = flowctl(db, "run", "shell.yaml", cwd=folder)
    assert ran.returncode == 0, ran.stderr
    run_id = last_run(db, folder)
    chunks = json.loads(flowctl(db, "logs", run_id, "--json", cwd=folder).stdout)
    out = [c for c in chunks if c["step"] == "out"]
    assert "".join(c["text"] for c in out if c["stream"] == "stdout") == "one\nthree\n"
    assert "".join(c["text"] for c in out if c["stream"] == "stderr") == "two\n"
    big = [c for c in chunks if c["step"] == "big"]
    stored = sum(len(c["text"]) for c in big if c["stream"] == "stdout")
    assert stored == 1 << 20  # the cap per stream
    assert max(len(c["text"]) for c in big) <= 64 * 1024  # in bounded chunks
    notes = [c["text"] for c in big if c["stream"] == "note"]
    assert notes == [
        f"[flowctl] stdout cut at {1 << 20} bytes: {1300000 - (1 << 20)} more bytes were not stored\n"
    ]


@pytest.fixture
def daemon(folder: Path, db: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with open(folder / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [str(FLOWCTL), "--db", db, "daemon", "-c", "4"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
    yield db, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.crash
def test_concurrent_runs_in_one_daemon_never_mix(
    folder: Path, daemon: tuple[str, subprocess.Popen[bytes]]
) -> None:
    db, _ = daemon
    ids = {}
    for me, other in (("left", "right"), ("right", "left")):
        ran = flowctl(
            db,
            "run",
            "flows.py:pair",
            "--input",
            json.dumps({"folder": str(folder), "me": me, "other": other}),
            "--detach",
            "--json",
            cwd=folder,
        )
        ids[me] = json.loads(ran.stdout)["id"]
    wait_until(
        lambda: query(db, "SELECT COUNT(*) FROM runs WHERE status = 'completed'") == [(2,)],
        timeout=30,
    )
    for me, run_id in ids.items():
        chunks = json.loads(flowctl(db, "logs", run_id, "--json", cwd=folder).stdout)
        lines = [line for c in chunks for line in c["text"].splitlines()]
        assert lines == [f"{me} line {i}" for i in range(40)]


@pytest.mark.crash
def test_follow_prints_as_the_step_runs_and_show_has_the_last_lines(
    folder: Path, daemon: tuple[str, subprocess.Popen[bytes]]
) -> None:
    db, _ = daemon
    ran = flowctl(
        db,
        "run",
        "flows.py:slow",
        "--input",
        json.dumps({"folder": str(folder)}),
        "--detach",
        "--json",
        cwd=folder,
    )
    run_id = json.loads(ran.stdout)["id"]
    follower = subprocess.Popen(
        [str(FLOWCTL), "--db", db, "logs", run_id, "-f"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=folder,
    )
    assert follower.stdout is not None
    first = follower.stdout.readline()  # printed while the step still runs
    assert first.rstrip().endswith("work  working 1")
    assert query(db, "SELECT status FROM runs WHERE run_id = ?", (run_id,)) == [("running",)]
    shown = flowctl(db, "show", run_id, cwd=folder)
    assert f"output    of step #0 'work' (`flowctl logs {run_id} -f`):" in shown.stdout
    assert "          working 1" in shown.stdout.splitlines()
    assert tui_detail(db, run_id).count("working 1") == 1
    (folder / "go").touch()
    rest, _ = follower.communicate(timeout=30)
    assert follower.returncode == 0
    assert rest.rstrip().endswith("work  working 2")
    assert query(db, "SELECT status FROM runs WHERE run_id = ?", (run_id,)) == [("completed",)]


def tui_detail(db: str, run_id: str) -> str:
    """The TUI's detail pane of the run, as text."""
    from flowctl import ops
    from flowctl.clock import SystemClock
    from flowctl.store import open_store
    from flowctl.tui.render import render_detail

    with open_store(db, create=False) as store:
        detail = ops.show_run(store, run_id, clock=SystemClock())
    return render_detail(detail, SystemClock().now()).plain


def test_logs_of_an_unknown_run_is_one_line(folder: Path, db: str) -> None:
    flowctl(db, "run", "flows.py:talk", cwd=folder)
    out = flowctl(db, "logs", "nope", cwd=folder)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1


def test_a_steps_terminal_escapes_reach_the_terminal_inert_but_colours_stay(
    folder: Path, db: str
) -> None:
    # Step output is untrusted: an OSC (retitle the terminal), a screen clear or a carriage
    # (backspace) in it is printed as its escape, not obeyed; SGR colours are kept.
    (folder / "esc.yaml").write_text(
        "name: esc\nsteps:\n"
        "  - id: evil\n"
        "    run: [printf, '\\033]0;PWNED\\007title \\033[2Jclear \\033[31mred\\033[0m x\\by\\n']\n"
    )
    ran = flowctl(db, "run", "esc.yaml", cwd=folder)
    assert ran.returncode == 0, ran.stderr
    run_id = last_run(db, folder)
    line = flowctl(db, "logs", run_id, cwd=folder).stdout.splitlines()[0]
    # (click drops the SGR colours itself when stdout is not a terminal, as here)
    want = "evil  \\x1b]0;PWNED\\x07title \\x1b[2Jclear red x\\x08y"
    assert line.endswith(want), repr(line)
    # --json gives the text as recorded: a program reading it decides.
    chunks = json.loads(flowctl(db, "logs", run_id, "--json", cwd=folder).stdout)
    assert "\x1b]0;PWNED\x07" in chunks[0]["text"]


def test_terminal_safe_keeps_colours_and_tabs_and_escapes_every_other_control() -> None:
    from flowctl.limits import terminal_safe

    assert terminal_safe("plain text") == "plain text"
    assert terminal_safe("\x1b[1;31mred\x1b[0m\tok") == "\x1b[1;31mred\x1b[0m\tok"
    assert terminal_safe("\x1b]8;;http://x\x1b\\link\x9b2J\u202e") == (
        "\\x1b]8;;http://x\\x1b\\link\\x9b2J\\u202e"
    )
