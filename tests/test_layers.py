"""The import direction is a checked fact: the core never loads the CLI's or TUI's libraries."""

from __future__ import annotations

import subprocess
import sys


def test_core_does_not_load_front_ends() -> None:
    code = (
        "import sys, flowctl.engine, flowctl.daemon, flowctl.ops, flowctl.schedule_ops, flowctl.client, flowctl.testing; "
        "print(sorted(m for m in ('typer', 'textual', 'flowctl.cli', 'flowctl.cli_common', 'flowctl.cli_schedule', 'flowctl.tui', 'flowctl.tui_render', 'flowctl.tui_views', 'flowctl.tui_widgets', 'flowctl.tui_screens') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_cli_startup_does_not_load_textual_or_the_engine() -> None:
    code = (
        "import sys; from flowctl import cli; "
        "print(sorted(m for m in ('textual', 'flowctl.tui', 'yaml', 'flowctl.schedule_ops', 'cronsim') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
