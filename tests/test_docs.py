"""The README tells the truth: every command in it runs, every snippet labelled with a path
is that file byte for byte, and its schedule and duration examples are what flowctl accepts.

"Every command" means every line of every ```sh block. Each runs through /bin/sh with the
real `flowctl` entry point of this environment on PATH, in a temporary copy of the checkout
(examples/ and workflows/) with its own HOME, so the default database is a fresh one. `RUN`
stands for the newest run's id. A line that cannot run here says so after
`# not run by the docs test:` with its reason. The install half of the two set-up lines
(`python3 -m venv .venv && .venv/bin/pip install ...`) is not repeated here: it is what
`.ci/run` does before it runs this suite, and the test checks that they agree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from typer.main import get_command

from flowctl.cli import app
from flowctl.durations import parse_duration
from flowctl.model import Run
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
NOT_RUN = "# not run by the docs test:"
# A snippet's first line `# path/to/file` (or `// ...`) says the snippet is that file.
LABEL = re.compile(r"(?:#|//) ((?:[\w.-]+/)*[\w-]+\.[a-z]+)")
FLOWCTL = Path(sys.executable).with_name("flowctl")  # this environment's entry point


@dataclass(frozen=True)
class Block:
    lang: str
    lines: list[str]
    section: str  # the `## ` heading it stands under
    line: int  # README line of its first line


def _blocks() -> list[Block]:
    blocks: list[Block] = []
    section = ""
    lines = README.splitlines()
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.startswith("## "):
            section = text[3:].strip()
        if text.startswith("```") and len(text) > 3:
            end = lines.index("```", i + 1)
            blocks.append(Block(text[3:].strip(), lines[i + 1 : end], section, i + 2))
            i = end
        i += 1
    return blocks


BLOCKS = _blocks()
SETUP, *SH = [b for b in BLOCKS if b.lang == "sh"]


def test_every_command_is_in_the_readme() -> None:
    group = get_command(app)
    for name in group.commands:
        assert f"flowctl {name}" in README, f"`flowctl {name}` is not documented in README.md"


def test_readme_testing_example_runs(tmp_path, monkeypatch) -> None:
    """The README's 'Testing your workflows' snippet works as written."""
    block = next(
        b.split("```", 1)[0]
        for b in README.split("```python")[1:]
        if "WorkflowEnvironment" in b.split("```", 1)[0]
    )
    # in a copy of the checkout: onboarding appends to ../.flowctl/outbox.log beside its file
    root, _env = _checkout(tmp_path)
    checkout_outbox = ROOT / ".flowctl" / "outbox.log"
    before = checkout_outbox.read_bytes() if checkout_outbox.exists() else None
    monkeypatch.chdir(root)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert tests
    for test in tests:
        test(tmp_path)  # type: ignore[operator]
    sent = (root / ".flowctl" / "outbox.log").read_text()
    assert sent == "welcome -> user 42\ntips -> user 42\n"
    assert (checkout_outbox.read_bytes() if checkout_outbox.exists() else None) == before


def test_readme_client_example_runs(tmp_path, monkeypatch) -> None:
    block = next(
        b.split("```", 1)[0]
        for b in README.split("```python")[1:]
        if "Client()" in b.split("```", 1)[0]
    )
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("FLOWCTL_DB", str(tmp_path / "readme.db"))
    exec(compile(block, "README.md", "exec"), {})
    from flowctl.store.sqlite import SqliteStore as Store

    with Store(tmp_path / "readme.db") as store:
        runs = store.list_runs()
    assert [r.key for r in runs] == ["signup-42"]


# ----------------------------------------------------------------- set-up lines


def _checkout(tmp_path: Path, *, empty: bool = False) -> tuple[Path, dict[str, str]]:
    """A fresh copy of what a checkout holds for the README (`empty`: a new project's
    folder), and an environment with its own HOME: no flowctl.toml up the tree, so the
    default database is new and private."""
    root = tmp_path / "checkout"
    root.mkdir()
    for folder in () if empty else ("examples", "workflows"):
        shutil.copytree(ROOT / folder, root / folder)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWCTL_", "XDG_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{FLOWCTL.parent}{os.pathsep}{env.get('PATH', '')}"
    return root, env


def _sh(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_readme_starts_with_the_two_setup_commands() -> None:
    assert README.startswith("# flowctl\n\n```sh\n"), "the set-up block comes first"
    assert len(SETUP.lines) == 2
    run_line, test_line = SETUP.lines
    assert run_line.startswith("python3 -m venv .venv && .venv/bin/pip install -e . && ")
    assert run_line.endswith("&& .venv/bin/flowctl run examples/hello.py:hello -i name=ana --wait")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    install, tests = test_line.split(" && ")[1:]
    assert install == ".venv/bin/pip install -e '.[dev]'"
    assert ".venv/bin/pip install -q -e '.[dev]'" in ci  # the same install, quietly
    assert tests in ci, f"README runs `{tests}`, .ci/run does not"


def test_readme_first_command_runs_a_real_workflow(tmp_path: Path) -> None:
    """The flowctl half of line one, as a subprocess on the default database. The example's
    durable 2-second sleep is ended early with `flowctl wake`, as an operator may, so the
    test takes no real 2 seconds; the output is the same either way."""
    from flowctl.store import open_store

    root, env = _checkout(tmp_path)
    command = SETUP.lines[0].split(" && ")[-1].removeprefix(".venv/bin/")
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command], cwd=root, env=env, stdout=subprocess.PIPE, text=True
    )
    db = tmp_path / "home" / ".local" / "state" / "flowctl" / "flowctl.db"
    limit = time.monotonic() + 30
    sleeping: list[str] = []
    while not sleeping and proc.poll() is None and time.monotonic() < limit:
        if db.exists():
            with open_store(db) as store:
                sleeping = [r.run_id for r in store.list_runs() if r.status == "sleeping"]
        time.sleep(0.02)
    if sleeping:
        woke = _sh(f"flowctl wake {sleeping[0]}", root, env)
        assert woke.returncode == 0 or "is completed" in woke.stderr, woke.stderr
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "✓ greet" in out and "sleeping until" in out and "✓ shout" in out
    assert "completed" in out and '"loud": "HELLO, ANA!"' in out


# ----------------------------------------------------------------- every sh line


def _db(cwd: Path) -> Path:
    """The database the README's commands use: the project's when `flowctl init` wrote a
    flowctl.toml, else the default one under this test's HOME."""
    if (cwd / "flowctl.toml").exists():
        return cwd / ".flowctl" / "flowctl.db"
    return cwd.parent / "home" / ".local" / "state" / "flowctl" / "flowctl.db"


def _runs(cwd: Path) -> list[Run]:
    """Read straight from the file (a `flowctl ls` process per RUN would double the time);
    as `ls` reads it, so an encrypted database needs no key (a value shows its key id)."""
    from flowctl.store import open_store

    with open_store(_db(cwd), masked=True) as store:
        return store.list_runs()


def _newest_run(cwd: Path) -> str:
    runs = _runs(cwd)
    assert runs, "the README says RUN before any run was started"
    return max(runs, key=lambda r: r.created_at).run_id


def _check_glance(cwd: Path, env: dict[str, str]) -> None:
    runs = {r.workflow: r for r in _runs(cwd)}
    assert runs["onboarding"].status == "sleeping"  # woken, sent the tips, now sleeps 6d
    assert (cwd / ".flowctl" / "outbox.log").read_text().splitlines() == [
        "welcome -> user 42",
        "tips -> user 42",
    ]
    followup = runs["trial-followup"]
    assert followup.status == "completed"  # the README's signal is the one the file awaits
    assert followup.result == {"steps": {"welcome": "welcome 42", "reply": {"text": "thanks!"}}}


def _check_install(cwd: Path, env: dict[str, str]) -> None:
    assert (cwd / "flowctl.toml").is_file()
    for name in ("onboarding.py", "followup.yaml"):  # the files "At a glance" shows
        assert (cwd / "workflows" / name).read_bytes() == (ROOT / "workflows" / name).read_bytes()
    assert ".flowctl/" in (cwd / ".gitignore").read_text().splitlines()
    assert ".flowctl/" in (ROOT / ".gitignore").read_text().splitlines()
    assert [(r.workflow, r.status) for r in _runs(cwd)] == [("onboarding", "sleeping")]


def _check_schedules(cwd: Path, env: dict[str, str]) -> None:
    out = _sh("flowctl schedule ls --json", cwd, env)
    names = {s["name"]: s for s in json.loads(out.stdout)}
    assert names["nightly-report"]["cron"] == "0 9 * * MON-FRI"
    assert names["heartbeat"]["every"] is not None


# What each section's commands must have done, beyond exiting 0.
CHECKS = {"At a glance": _check_glance, "Install": _check_install, "Schedules": _check_schedules}
# Sections whose commands start in an empty folder ("a project of your own").
EMPTY_START = {"Install"}


def test_each_checked_section_has_commands() -> None:
    assert set(CHECKS) | EMPTY_START <= {b.section for b in SH}


@pytest.mark.parametrize("block", SH, ids=[f"{b.section}:{b.line}" for b in SH])
def test_readme_commands_run(tmp_path: Path, block: Block) -> None:
    root, env = _checkout(tmp_path, empty=block.section in EMPTY_START)
    ran = 0  # a block may be all `not run` lines (pipx); its section is checked elsewhere
    for offset, line in enumerate(block.lines):
        where = f"README.md:{block.line + offset}"
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if NOT_RUN in line:
            assert line.split(NOT_RUN, 1)[1].strip(), f"{where}: say why it is not run"
            continue
        if re.search(r"\bRUN\b", line):
            line = re.sub(r"\bRUN\b", _newest_run(root), line)
        out = _sh(line, root, env)
        assert out.returncode == 0, f"{where}: `{line}` exited {out.returncode}: {out.stderr}"
        assert "Traceback" not in out.stderr, f"{where}: {out.stderr}"
        ran += 1
    if ran and block.section in CHECKS:
        CHECKS[block.section](root, env)


# ----------------------------------------------------------------- snippets


def test_labelled_snippets_are_the_files() -> None:
    labelled = [(b, m[1]) for b in BLOCKS if b.lines and (m := LABEL.fullmatch(b.lines[0]))]
    paths = {path for _, path in labelled}
    assert {"workflows/onboarding.py", "workflows/followup.yaml"} <= paths
    for block, path in labelled:
        snippet = "\n".join(block.lines[1:]) + "\n"
        assert (ROOT / path).read_bytes() == snippet.encode(), (
            f"README.md:{block.line}: the snippet labelled {path} differs from the file"
        )


def _only_block(lang: str, marker: str) -> Block:
    found = [b for b in BLOCKS if b.lang == lang and any(marker in x for x in b.lines)]
    assert len(found) == 1, f"expected one {lang} block with {marker!r}"
    return found[0]


def test_readme_schedule_declarations_validate_and_sync(tmp_path: Path) -> None:
    """The `schedule:` block and the `[schedules.NAME]` table are real syntax: validate
    accepts the first, and a sync stores both with the rules they state."""
    root, env = _checkout(tmp_path)
    yaml_block = _only_block("yaml", "schedule:")
    toml_block = _only_block("toml", "[schedules.")
    declared = root / "workflows" / "declared.yaml"
    declared.write_text("\n".join(yaml_block.lines) + "\n")
    (root / "flowctl.toml").write_text("\n".join(toml_block.lines) + "\n")
    valid = _sh("flowctl validate workflows/declared.yaml", root, env)
    assert valid.returncode == 0, valid.stderr
    synced = _sh("flowctl schedule sync", root, env)
    assert synced.returncode == 0, synced.stderr
    stored = {s["name"]: s for s in json.loads(_sh("flowctl schedule ls --json", root, env).stdout)}
    yaml_name = next(x.split(":", 1)[1].strip() for x in yaml_block.lines if x.startswith("name:"))
    toml_table = tomllib.loads("\n".join(toml_block.lines))["schedules"]
    assert set(stored) == {yaml_name, *toml_table}
    assert (stored[yaml_name]["cron"], stored[yaml_name]["tz"]) == (
        "0 9 * * MON-FRI",
        "Europe/Paris",
    )
    assert stored[yaml_name]["policies"]["missed"] == "latest"
    for name, table in toml_table.items():
        assert stored[name]["cron"] == table["cron"] and stored[name]["input"] == table["input"]
        assert stored[name]["target"] == str((root / table["target"]).resolve())


def test_readme_duration_table_is_what_the_parser_reads() -> None:
    section = README.split("## Durations", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| `")]
    assert len(rows) >= 4
    bare_seen = False
    for row in rows:
        forms_cell, seconds_cell = (c.strip() for c in row.strip("|").split("|"))
        expected = timedelta(seconds=float(seconds_cell))
        forms = re.findall(r"`([^`]+)`", forms_cell)
        for form in forms:
            assert parse_duration(form) == expected, f"{form!r} is not {seconds_cell} s"
        bare_seen |= any(re.fullmatch(r"[0-9.]+", f) for f in forms)
    assert bare_seen, "the table shows that a bare number is seconds"
    assert parse_duration(1000) == timedelta(seconds=1000)  # "sleep: 1000 is 16m40s"
