"""Run `flowctl` in-process through `cli.main` (the console script's own entry point, so
click's usage errors get their one-line form) inside CliRunner isolation: what a shell
would see, at in-process speed."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from flowctl import cli


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str, stdin: str | None = None) -> Ran:
    """`flowctl ARGS...` in this process; the exit code as a shell would see it."""
    monkeypatch.setattr(sys, "argv", ["flowctl", *args])
    with CliRunner().isolation(input=stdin) as (out, err, _mixed):
        try:
            cli.main()
            code = 0  # pragma: no cover - main() always exits
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return Ran(
            code,
            out.getvalue().decode("utf-8", "replace"),
            err.getvalue().decode("utf-8", "replace"),
        )
