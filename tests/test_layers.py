"""The import direction is a checked fact: the core never loads the CLI's or TUI's libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_core_does_not_load_front_ends() -> None:
    code = (
        "import sys, flowctl.engine, flowctl.daemon, flowctl.ops, flowctl.ops.schedules, flowctl.client, flowctl.testing; "
        "print(sorted(m for m in ('typer', 'textual', 'flowctl.cli', 'flowctl.cli.common', 'flowctl.cli.schedule', 'flowctl.tui', 'flowctl.tui.render', 'flowctl.tui.views', 'flowctl.tui.widgets', 'flowctl.tui.screens') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_cli_startup_does_not_load_textual_or_the_engine() -> None:
    code = (
        "import sys; from flowctl import cli; "
        "print(sorted(m for m in ('textual', 'flowctl.tui', 'yaml', 'flowctl.ops.schedules', 'cronsim') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# Private names a test may read, as (file relative to tests/, "receiver._name"). Keep it
# short: a test that needs a private name is asking for a public, documented way to observe.
PRIVATE_READS_ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        # os._exit is public stdlib: the reproduction of a step that kills its daemon.
        ("crash/core_flows.py", "os._exit"),
    }
)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) for `x._name` (x not self/cls), `from m import _name` and
    `getattr(x, "_name")`; dunders are public protocol, not privates."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            receiver = ast.unparse(node.value)
            if receiver not in ("self", "cls"):
                found.append((node.lineno, f"{receiver}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom):
            found += [
                (node.lineno, f"{node.module}.{a.name}") for a in node.names if _is_private(a.name)
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            found.append((node.lineno, f"{ast.unparse(node.args[0])}.{node.args[1].value}"))
    return sorted(found)


def test_no_test_reads_a_private_attribute() -> None:
    """Tests observe flowctl through its public API or its effects (rows, files, processes),
    so internals can be rearranged without rewriting the tests that guard behaviour."""
    files = sorted(TESTS.rglob("*.py"))
    assert Path(__file__).resolve() in files  # the scan covers tests/ itself
    offenders = [
        f"{path.relative_to(TESTS)}:{line}: {name}"
        for path in files
        for line, name in private_reads(path.read_text())
        if (str(path.relative_to(TESTS)), name) not in PRIVATE_READS_ALLOWED
    ]
    assert offenders == [], "tests read private names:\n" + "\n".join(offenders)


def test_the_private_read_check_sees_each_form() -> None:
    source = (
        "from flowctl.store import _connect, Store\n"
        "store._conn.execute('PRAGMA foreign_keys')\n"
        "getattr(daemon, '_silenced').add(run_id)\n"
        "self._mine = cls._theirs = 1\n"
        "type(obj).__name__, obj.__dict__\n"
    )
    assert private_reads(source) == [
        (1, "flowctl.store._connect"),
        (2, "store._conn"),
        (3, "daemon._silenced"),
    ]
