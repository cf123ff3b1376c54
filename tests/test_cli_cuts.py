"""Every cut in the CLI's human output ends with an ellipsis (issue 17, item 3): tables go
through flowctl/cli/table.py (tests/test_cli_tables.py); `show`'s checkpoint values are cut
in characters, and say so with "…" too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli

BIG = """
from flowctl import workflow


@workflow
def big(ctx):
    return ctx.step("big", lambda: {"items": ["x" * 30] * 4})
"""
LOUD = f"""
name: loud
steps:
  - id: talk
    run: [sh, -c, "echo ok; echo {"o" * 80}; echo {"e" * 60} >&2; exit 0"]
"""


@pytest.fixture
def invoke(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    (tmp_path / "big.py").write_text(BIG)
    (tmp_path / "loud.yaml").write_text(LOUD)

    def run(*args: str) -> Any:
        result = CliRunner().invoke(cli.app, ["--db", db, *args])
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    return run


def _checkpoint(invoke: Any, target: str) -> str:
    rid = json.loads(invoke("run", target, "--wait", "--json").stdout)["id"]
    return next(line for line in invoke("show", rid).stdout.splitlines() if "#0" in line)


def test_a_long_step_value_is_cut_with_an_ellipsis(invoke: Any) -> None:
    line = _checkpoint(invoke, "big.py:big")
    value = line.split(" → ", 1)[1]
    assert len(value) == 60 and value.endswith("…") and value.startswith('{"items": ["xxx')


def test_a_command_results_last_lines_are_cut_with_an_ellipsis(invoke: Any) -> None:
    line = _checkpoint(invoke, "loud.yaml")
    assert line.endswith(f"→ exit 0 · out: {'o' * 49}… · err: {'e' * 39}…")
