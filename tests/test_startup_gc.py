"""The `flowctl` entry point imports the CLI with the cyclic collector off, then freezes
what the import made and turns the collector back on before the command runs (issue 17,
item 4; flowctl/__main__.py). What is asserted is the collector's state, never a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PROBE = """
import gc, json, sys
{before}
import flowctl.__main__ as entry
sys.argv = ["flowctl", *{argv!r}]
try:
    entry.main()
except SystemExit as e:
    code = e.code
print(json.dumps({{"code": code, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                   "cli_loaded": "flowctl.cli" in sys.modules}}))
"""


def _probe(argv: list[str], tmp_path: Path, before: str = "") -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before, argv=argv)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"FLOWCTL_DB": str(tmp_path / "f.db"), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def test_the_collector_is_on_when_the_command_runs_and_the_cli_import_is_frozen(
    tmp_path: Path,
) -> None:
    result = _probe(["--version"], tmp_path)
    assert result["code"] in (0, None)
    assert result["enabled"] is True  # a daemon or the TUI collects as usual
    assert isinstance(result["frozen"], int) and result["frozen"] > 5_000  # Typer, Click, flowctl
    assert result["cli_loaded"] is True


def test_a_process_that_turned_the_collector_off_keeps_it_off_and_nothing_is_frozen(
    tmp_path: Path,
) -> None:
    result = _probe(["--version"], tmp_path, before="gc.disable()")
    assert (result["enabled"], result["frozen"]) == (False, 0)


def test_python_dash_m_flowctl_runs_the_same_entry_point(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert (done.returncode, done.stdout.split()[0]) == (0, "flowctl")
