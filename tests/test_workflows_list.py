"""`flowctl workflows` checks each YAML file in full (issue 39): a file that does not parse,
or does not validate, is listed as BROKEN with its first problem, never as if it were fine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flowctl import cli
from tests.conftest import ROOT


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "ping.yaml").write_bytes((ROOT / "workflows" / "ping.yaml").read_bytes())
    (folder / "typo.yaml").write_text("name: typo\nsteps:\n  - id: a\n    runn: [echo]\n")
    (folder / "cut.yaml").write_text('name: cut\nsteps:\n  - id: a\n    run: [echo, "no end\n')
    (folder / "nameless.yml").write_text("steps: [\n")  # discovery cannot read a name
    (tmp_path / "flowctl.toml").write_text('workflows = "workflows"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    return tmp_path


def _workflows(project: Path, *args: str) -> str:
    result = CliRunner().invoke(cli.app, ["--db", str(project / "f.db"), "workflows", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def test_workflows_lists_a_yaml_file_that_does_not_load_as_broken(project: Path) -> None:
    rows = {line.split()[0]: line for line in _workflows(project).splitlines()[1:]}
    assert set(rows) == {"cut", "nameless", "ping", "typo"}
    assert rows["ping"].endswith("Print pong; a heartbeat to schedule with `flowctl schedule add heartbeat --every 15m`.")  # fmt: skip
    assert "BROKEN" not in rows["ping"]
    assert rows["typo"].split(None, 3)[3] == (
        "BROKEN: 3:5: steps[0]: a step needs one of: run, call, sleep, sleep_until,"
        " wait_signal, workflow, parallel (and 1 more)"
    )
    assert rows["cut"].split(None, 3)[3].startswith("BROKEN: 5:1: yaml: syntax error: ")
    assert rows["nameless"].split(None, 3)[2] == "workflows/nameless.yml"
    assert "BROKEN: 2:1: yaml: syntax error" in rows["nameless"]


def test_workflows_json_carries_each_problem(project: Path) -> None:
    listed = {w["name"]: w for w in json.loads(_workflows(project, "--json"))}
    assert listed["ping"]["problem"] is None
    assert listed["typo"]["problem"].startswith("3:5: steps[0]: a step needs one of: run,")
    assert listed["nameless"]["target"] == str(project / "workflows" / "nameless.yml")
