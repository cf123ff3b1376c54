"""No input reaches a traceback (issue 11, item 7): hypothesis drives every command's
arguments and mutated YAML workflow files through the real entry point, in-process.

Each invocation must end with exit 0, 1 or 2 and no traceback; a failure is one line on
stderr (`validate`: one line per problem) and leaves every table's row count as it was
(except a run that started and then died);
an argument that is not UTF-8 is a usage error (exit 2). Set FLOWCTL_FUZZ_SCALE to run
longer (FLOWCTL_FUZZ_SCALE=10: ten times the default). The argv bytes case only happens in
a real process, so it has two subprocess checks at the end.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command

from flowctl import cli
from flowctl.cli.lazy import build_all
from flowctl.clock import FakeClock
from flowctl.limits import is_utf8, one_line
from tests.conftest import ROOT
from tests.inproc import Ran, run_main

# CI: 220 invocations and 80 mutated files (a few seconds in process); FLOWCTL_FUZZ_SCALE=10
# runs ten times as many.
SCALE = float(os.environ.get("FLOWCTL_FUZZ_SCALE", "1"))
START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)

FLOWS = """
from flowctl import workflow


@workflow
def add(ctx, a: int = 1, b: int = 1):
    return ctx.step("add", lambda: a + b)


@workflow
def nap(ctx):
    ctx.sleep("1h")
    return ctx.wait_signal("go", timeout="1d")


@workflow
def boom(ctx):
    ctx.step("explode", lambda: 1 / 0)
"""

TYPED = """name: typed
description: Every input type, all with defaults.
input:
  user: {type: str, default: ana}
  n: {type: int, default: 3}
  ratio: {type: float, default: 0.5}
  loud: {type: bool, default: false}
  tags: {type: list, default: [a, b]}
  meta: {type: dict, default: {k: v}}
defaults:
  retry: &retry {max_attempts: 2, backoff: 1s}
schedule:
  - {cron: "0 9 * * MON-FRI", tz: Europe/Paris}
steps:
  - id: hello
    run: [echo, "${{ input.user }}", "${{ input.n }}"]
    retry: {<<: *retry, max_attempts: 3}
  - id: shell
    run: echo "$FLOWCTL_INPUT_USER"
    env: {EXTRA: "${{ input.tags }}"}
    timeout: 30s
  - sleep: 2h
    if: ${{ input.loud }}
  - wait_signal: approved
    timeout: 7d
    on_timeout: continue
  - sleep_until: "2026-12-01T09:00:00Z"
"""

# Values a hostile or careless user types, beside each argument's plausible ones.
HOSTILE = [
    "",
    " ",
    "-",
    "--",
    "=",
    ":=",
    "a:=",
    "\x7f",
    "\u202e",
    "\U0001f600",
    "\t\n",
    "\udcff",
    "run\udc80id",
    "\udce9t\udce9",
    "9" * 5000,
    "-" + "9" * 5000,
    "-1",
    "0",
    str(2**63),
    str(2**64),
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "nan",
    "1e-999",
    "[" * 5000 + "]" * 5000,
    '{"a":' * 300 + "1" + "}" * 300,
    '{"a": ' + "9" * 5000 + "}",
    "[" + "9" * 5000 + "]",
    '{"a": NaN}',
    '{"a": 1e999}',
    "[1, 2",
    '{"a" 1}',
    '"x"',
    "null",
    "0001-01-01",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59",
    "9999-12-31T23:59:59-14:00",
    "1969-12-31T23:59:59Z",
    "2026-03-27T11:00:00Z",
    "2026-02-30",
    "now",
    "yesterday",
    "2h",
    "1h30m",
    "3650d",
    "3651d",
    "-5s",
    "0s",
    "\u0663",
    "\uff15m",
    "1e9s",
    "5 minuts",
    "'; rm -rf ~",
    "%",
    "_",
    "\\",
    "*",
    "..",
    "/",
    "/dev/null",
    "./nope.yaml",
    "nope.py",
    "flows.py",
    "flows.py:",
    ":add",
    "flows.py:nope",
    "os:system",
    "typed.yaml",
    "bad.yaml",
    "* * * * *",
    "61 * * * *",
    "@daily",
    "@never",
    "Europe/Nowhere",
    "../../etc/passwd",
    "_reserved",
    "a" * 2000,
]
RUN_IDS: list[str] = []  # filled by the seeded project
PLAUSIBLE: dict[str, list[str]] = {
    "target": ["flows.py:add", "flows.py:nap", "flows.py:boom", "typed.yaml", "typed", "add"],
    "inputs": ["a=1", "a:=2", "b:=3", "n=4", "tags:=[1]", "user=bo", "meta:={}"],
    "input_json": ['{"a": 1}', '{"n": 2}', "{}", "[]"],
    "in_": ["10m", "1h"],
    "at": ["now", "2026-03-28T00:00:00Z"],
    "deadline": ["1h", "2026-04-01"],
    "timeout": ["30s"],
    "max_attempts": ["1", "2"],
    "key": ["k1", "k2"],
    "status": ["queued", "dead", "sleeping,waiting", "completed"],
    "workflow": ["add", "nap"],
    "search": ["a", "add"],
    "limit": ["1", "5"],
    "name": ["go", "approved", "nightly"],
    "data": ['{"by": "ana"}', "null", "3"],
    "reason": ["dup"],
    "since": ["2h", "1d"],
    "from_index": ["0", "1", "2"],
    "files": ["typed.yaml", "bad.yaml"],
    "until": ["7d", "1h"],
    "cron": ["0 9 * * MON-FRI", "*/5 * * * *"],
    "every": ["15m"],
    "tz": ["UTC", "Europe/Paris"],
    "missed": ["skip", "all", "latest"],
    "max_missed": ["3"],
    "overlap": ["skip", "queue"],
    "gap": ["shift", "skip"],
    "fold": ["first", "both"],
    "jitter": ["5s"],
    "count": ["3"],
    "expression": ["0 9 * * *"],
    "from_": ["2026-03-28T00:00:00Z"],
}
# Commands and options that serve or wait until something outside the test happens.
# serve: fuzzed over HTTP in test_serve_fuzz; wait: until its runs end (test_cli_wait);
# replicate: Litestream until stopped (its bad destinations: test_replica).
SKIP_COMMANDS = {"daemon", "tui", "init", "serve", "wait", "replicate"}
# logs --follow: until the run ends; ls --watch: until Ctrl-C (both tested on a FakeClock).
SKIP_OPTIONS = {"wait", "follow", "watch", "version", "help"}


def _commands() -> list[tuple[list[str], Any]]:
    """Every leaf command of the real app, with its path (`schedule add`)."""
    found: list[tuple[list[str], Any]] = []

    def walk(group: Any, path: list[str]) -> None:
        for name, command in sorted(group.commands.items()):
            if hasattr(command, "commands"):
                walk(command, [*path, name])
            elif name not in SKIP_COMMANDS:
                found.append(([*path, name], command))

    walk(build_all(get_command(cli.app)), [])  # built: a stand-in has no options (cli/lazy.py)
    return found


COMMANDS = _commands()


def _text() -> st.SearchStrategy[str]:
    """Free text a shell could pass (no NUL), now and then with undecodable bytes in it."""
    free = st.text(st.characters(exclude_characters="\x00"), max_size=40)
    smuggled = st.builds(lambda a, b: f"{a}\udcff{b}", free, free)
    return st.one_of(free, smuggled, st.integers().map(str))


def _value(name: str) -> st.SearchStrategy[str]:
    plausible = PLAUSIBLE.get(name, [])
    if name == "run_ref":
        plausible = RUN_IDS
    choices: list[st.SearchStrategy[str]] = [st.sampled_from(HOSTILE), _text()]
    if plausible:
        choices = [st.sampled_from(plausible), st.sampled_from(plausible), *choices]
    return st.one_of(choices)


@st.composite
def invocations(draw: st.DrawFn) -> list[str]:
    path, command = draw(st.sampled_from(COMMANDS))
    args = list(path)
    for param in command.params:
        if param.name in SKIP_OPTIONS:
            continue
        if param.param_type_name == "argument":
            if not param.required and draw(st.booleans()):
                continue
            count = 1 if param.nargs == 1 else draw(st.integers(1, 2))
            args += [draw(_value(param.name)) for _ in range(count)]
        elif param.required or draw(st.integers(0, 2)) == 0:
            flag = draw(st.sampled_from(param.opts))
            if param.is_flag:
                args.append(flag)
            else:
                for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
                    args += [flag, draw(_value(param.name))]
    return args


@dataclass
class Project:
    root: Path
    db: Path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """A project with Python and YAML workflows and a database holding runs in several
    states, behind a frozen clock; the working directory while the fuzzers run."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "flows.py").write_text(FLOWS)
    (root / "typed.yaml").write_text(TYPED)
    (root / "bad.yaml").write_text("name: bad\nsteps:\n  - sleep: 5 minuts\n")
    (root / "flowctl.toml").write_text('workflows = "."\n')
    db = root / "f.db"
    clock = FakeClock(START)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("FLOWCTL_DB", raising=False)
        mp.setattr(cli, "SystemClock", lambda: clock)
        for args in (
            ["run", "flows.py:add", "-i", "a:=2"],
            ["run", "flows.py:nap"],
            ["run", "flows.py:boom", "--max-attempts", "1"],
            ["run", "typed.yaml", "--detach"],
            ["schedule", "add", "nightly", "flows.py:add", "--cron", "0 9 * * *", "--tz", "UTC"],
        ):
            out = run_main(mp, "--db", str(db), *args)
            assert out.returncode in (0, 1), out.stderr
        with sqlite3.connect(db) as conn:
            RUN_IDS[:] = [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id")]
        RUN_IDS.extend(r[:4] for r in list(RUN_IDS))
        yield Project(root, db)


def row_counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}


def check(out: Ran, args: list[str], before: dict[str, int], db: Path) -> None:
    """The invariants every invocation keeps, whatever it was given."""
    shown = f"flowctl {args!r} -> {out.returncode}\nstdout: {out.stdout[-2000:]}\nstderr: {out.stderr[-2000:]}"
    # (an uncaught exception would propagate out of cli.main() and fail the test by itself;
    # stdout may show a run's recorded traceback, which is data)
    assert "Traceback" not in out.stderr, shown
    assert out.returncode in (0, 1, 2), shown
    if not all(is_utf8(a) for a in args):
        assert out.returncode == 2 and "is not valid UTF-8" in out.stderr, shown
        assert out.stderr.count("\n") == 1 and row_counts(db) == before, shown
        return
    options = args[: args.index("--")] if "--" in args else args
    json_mode = "--json" in options and "--help" not in options
    if out.returncode == 0:
        if json_mode:
            json.loads(out.stdout)  # one JSON document, nothing else on stdout
        return
    lines = out.stderr.splitlines()
    if args[0] in ("run", "rerun", "fork") and json_mode and out.returncode == 1 and out.stdout:
        # a run that started and then died: its JSON summary says so, and is all there is
        assert json.loads(out.stdout)["status"] in ("dead", "cancelled"), shown
        assert out.stderr == "", shown
        return
    if (
        args[0] in ("run", "rerun", "fork")
        and out.returncode == 1
        and lines
        and re.match(r"(dead|cancelled) [0-9a-z]{16}: ", lines[0])
    ):
        # ... or, without --json, one line saying how it ended and why (`dead ID: error`)
        assert len(lines) == 1, shown
        return
    if args[0] == "check" and out.returncode == 1 and out.stdout and not lines:
        # runs that would break with the code on disk: the findings are the output
        if json_mode:
            assert json.loads(out.stdout), shown
        else:
            assert out.stdout.startswith("BREAKS ") and "would break" in out.stdout, shown
        return
    if args[0] == "validate" and json_mode and out.stdout:
        assert json.loads(out.stdout)["problems"], shown
    elif args[0] == "validate" or args[:2] == ["schedule", "sync"]:
        # one line per problem: `flowctl: ...` or `FILE:LINE:COL: ...`
        files = tuple(one_line(str(Path(a))) for a in args[1:])
        assert lines and all(line.startswith(("flowctl: ", "/", *files)) for line in lines), shown
    else:
        assert len(lines) == 1 and lines[0].startswith("flowctl: "), shown
    if out.returncode == 2 or args[0] not in ("run", "rerun", "fork"):
        # bad input writes nothing (a run that was started and then died exits 1 too)
        assert row_counts(db) == before, shown


def fuzz(examples: int) -> Any:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# FLOWCTL_FUZZ_TALLY=FILE records each invocation's verdict as a JSON line instead of
# failing at the first bad one: how the campaign's figures (tried, failed) are counted.
TALLY = os.environ.get("FLOWCTL_FUZZ_TALLY")


def invoke_and_check(project: Project, args: list[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project.root)
        mp.setattr(cli, "SystemClock", lambda: FakeClock(START))
        before = row_counts(project.db)
        try:
            check(run_main(mp, "--db", str(project.db), *args), args, before, project.db)
        except Exception as e:
            if not TALLY:
                raise
            verdict = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
        else:
            verdict = "ok"
    if TALLY:
        with open(TALLY, "a") as f:
            f.write(json.dumps({"args": args, "verdict": verdict}) + "\n")


@fuzz(220)
@given(args=invocations())
def test_no_argument_of_any_command_reaches_a_traceback(project: Project, args: list[str]) -> None:
    invoke_and_check(project, args)


# ---------------------------------------------------------------- mutated YAML

SEEDS = [TYPED.encode()] + [
    p.read_bytes()
    for folder in ("examples", "workflows")
    for p in sorted((ROOT / folder).glob("*.yaml"))
]
SNIPPETS = [
    b"&a ",
    b"*a",
    b"*b",
    b"<<: *a\n",
    b"!!python/object/apply:os.system [echo]",
    b"!!binary aGk=",
    b"!x ",
    b"\x00",
    b"\x07",
    b"\x1b",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\t",
    b"\r",
    b"\xef\xbb\xbf",
    b"[" * 200,
    b"{" * 200,
    b"9" * 5000,
    b"-" + b"9" * 400,
    b"1e999",
    b".nan",
    b": ",
    b"- ",
    b"? ",
    b"${{",
    b"}}",
    b"${{ input.nope }}",
    b"${{ steps.x.output }}",
    b"'",
    b'"',
    b"#",
    b"|\n",
    b">-\n",
    b"\n  ",
    b"\n- ",
    b"---\n",
    b"...\n",
    b"%YAML 1.1\n",
    b"%TAG ! tag:x,2000:\n",
    b"0001-01-01",
    b"9999-12-31T23:59:59",
    b"yes",
    b"~",
    b"null",
    b"\\u0000",
    b'"\\ud800"',
    b"\xe2\x80\xae",
]


@st.composite
def mutated_yaml(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.integers(0, 4))
        if op == 0 and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == 1:
            data[at:at] = draw(st.sampled_from(SNIPPETS))
        elif op == 2:
            data[at : at + draw(st.integers(1, 40))] = b""
        elif op == 3:
            lines = bytes(data).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[draw(st.integers(0, len(lines) - 1))])
            data = bytearray(b"\n".join(lines))
        else:
            data[at:at] = draw(st.binary(max_size=8))
    return bytes(data)


@fuzz(80)
@given(text=mutated_yaml())
def test_no_mutated_yaml_file_reaches_a_traceback(project: Project, text: bytes) -> None:
    path = project.root / "mutated.yaml"
    path.write_bytes(text)
    for args in (["validate", str(path)], ["run", str(path), "--detach"], ["workflows"]):
        invoke_and_check(project, args)


# ---------------------------------------------------------------- real argv bytes


@pytest.mark.parametrize(
    "args",
    [
        [b"ls", b"--search", b"\xff\xfe"],
        [b"run", b"flows.py:add", b"--key", b"k\xe9y", b"--detach"],
        [b"signal", b"run\x80", b"go"],
        [b"cancel", b"r", b"--reason", b"caf\xe9"],
    ],
)
def test_argv_bytes_that_are_not_utf8_are_one_usage_line(
    project: Project, args: list[bytes]
) -> None:
    before = row_counts(project.db)
    out = subprocess.run(
        [sys.executable.encode(), b"-m", b"flowctl", b"--db", str(project.db).encode(), *args],
        capture_output=True,
        cwd=project.root,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "FLOWCTL_DB"},
    )
    assert out.returncode == 2, out.stderr
    assert out.stdout == b""
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("flowctl: argument '") and "is not valid UTF-8" in lines[0]
    assert row_counts(project.db) == before
