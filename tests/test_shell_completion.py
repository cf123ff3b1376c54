"""Shell completion works in a real bash (issue 17, item 3): `flowctl --install-completion
bash` writes the script and sources it from ~/.bashrc, and an interactive bash that read
that file completes `flowctl sch<TAB>`, a group's commands and a command's options, by
Click's protocol (COMP_WORDS / COMP_CWORD handed to `_FLOWCTL_COMPLETE=complete_bash`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FLOWCTL = Path(sys.executable).with_name("flowctl")  # this environment's entry point
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def _env(home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("_FLOWCTL")}
    return {**keep, "HOME": str(home), "PATH": f"{FLOWCTL.parent}{os.pathsep}{keep['PATH']}"}


def _in_bash(option: str) -> list[str]:
    """`flowctl OPTION` started by bash, as a user types it: Typer's completion options
    take no value and name the shell they find among the process's parents (a test run
    whose runner has no shell above it would find none)."""
    # Not the command alone: bash would exec it in its own place, leaving no shell above.
    return [str(BASH), "-c", f"'{FLOWCTL}' {option}; exit $?"]


def _complete(home: Path, *words: str) -> list[str]:
    """What TAB offers after `words` (the last one is being typed) in `bash -i` at `home`."""
    line = " ".join(f"'{w}'" for w in words)
    script = (
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
        '_flowctl_completion flowctl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run(
        [str(BASH), "-i", "-c", script],
        env=_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [w for w in out.splitlines() if w]


def test_install_completion_then_tab_completes_in_bash(tmp_path: Path) -> None:
    installed = subprocess.run(
        _in_bash("--install-completion"),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    script = tmp_path / ".bash_completions" / "flowctl.sh"
    assert "completion installed" in installed.stdout
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    assert "complete -o default -F _flowctl_completion flowctl" in script.read_text()

    assert _complete(tmp_path, "flowctl", "sch") == ["schedule"]
    # In the order --help lists them.
    assert _complete(tmp_path, "flowctl", "re") == [
        "redrive", "rerun", "resume", "replicate", "restore",
    ]  # fmt: skip
    assert _complete(tmp_path, "flowctl", "schedule", "") == [
        "add", "ls", "show", "pause", "resume", "rm", "trigger", "explain", "sync",
    ]  # fmt: skip
    assert _complete(tmp_path, "flowctl", "ls", "--st") == ["--status"]


def test_show_completion_prints_the_script_install_writes(tmp_path: Path) -> None:
    shown = subprocess.run(
        _in_bash("--show-completion"),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    subprocess.run(
        _in_bash("--install-completion"),
        env=_env(tmp_path),
        capture_output=True,
        timeout=60,
        check=True,
    )
    written = (tmp_path / ".bash_completions" / "flowctl.sh").read_text()
    assert shown.strip() == written.strip()


def _complete_in(home: Path, cwd: Path, *words: str) -> list[str]:
    """What TAB offers after `words` in `bash -i` (completion installed in `home`) at `cwd`."""
    line = " ".join(f"'{w}'" for w in words)
    script = (
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
        '_flowctl_completion flowctl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {k: v for k, v in _env(home).items() if k != "FLOWCTL_DB"}
    out = subprocess.run(
        [str(BASH), "-i", "-c", script],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [w for w in out.splitlines() if w]


def test_tab_offers_workflow_names_run_ids_and_statuses(tmp_path: Path) -> None:
    """Issue 39: completion offered commands and options only."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    subprocess.run(
        _in_bash("--install-completion"),
        env=_env(home), capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    env = {k: v for k, v in _env(home).items() if k != "FLOWCTL_DB"}

    def flowctl(*args: str) -> str:
        done = subprocess.run(
            [str(FLOWCTL), *args], cwd=project, env=env, capture_output=True, text=True,
            timeout=60, check=True,
        )  # fmt: skip
        return done.stdout

    flowctl("init", "--example")
    first = flowctl("run", "ping", "--detach", "--json")
    second = flowctl("run", "onboarding", "-i", "user=1", "--json")
    ids = [json.loads(first)["id"], json.loads(second)["id"]]

    assert _complete_in(home, project, "flowctl", "run", "") == [
        "fanout", "onboarding", "ping", "trial-followup",
    ]  # fmt: skip
    assert _complete_in(home, project, "flowctl", "run", "on") == ["onboarding"]
    assert _complete_in(home, project, "flowctl", "ls", "--workflow", "p") == ["ping"]
    assert sorted(_complete_in(home, project, "flowctl", "show", "")) == sorted(ids)
    # Ids are time-ordered: the two may share their first six characters, or not.
    offered = sorted(_complete_in(home, project, "flowctl", "cancel", ids[1][:6]))
    assert offered == sorted(i for i in ids if i.startswith(ids[1][:6]))
    assert _complete_in(home, project, "flowctl", "ls", "--status", "sl") == ["sleeping"]
    assert _complete_in(home, project, "flowctl", "ls", "--status", "dead,c") == [
        "dead,completed", "dead,cancelled",
    ]  # fmt: skip
    # a path is left to the shell (`complete -o default` then completes file names), and
    # no database offers nothing: never an error, nothing created
    assert _complete_in(home, project, "flowctl", "run", "workflows/pi") == []
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    assert _complete_in(home, elsewhere, "flowctl", "--db", "nope.db", "show", "") == []
    assert not (elsewhere / "nope.db").exists()
