"""The import direction is a checked fact: each library is used by its own package only,
the store depends on no execution code, and nothing imports a front end.

The same rules as ruff's banned-api lines in pyproject.toml, checked here at run time over
the AST of every module (imports inside functions and under TYPE_CHECKING included).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "flowctl"

# (imported module or package, the packages that may import it). A name matches itself
# and everything under it: "flowctl.cli" covers flowctl.cli.start.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "typer": ("flowctl.cli",),
    "click": ("flowctl.cli",),
    "textual": ("flowctl.tui",),
    "yaml": ("flowctl.yamlflow",),
    "sqlite3": ("flowctl.store",),
    "sqlite_utils": ("flowctl.store",),
    "psycopg": ("flowctl.store",),
    "starlette": ("flowctl.serve",),
    "uvicorn": ("flowctl.serve",),
}
FRONT_ENDS: dict[str, tuple[str, ...]] = {
    "flowctl.cli": ("flowctl.cli", "flowctl.__main__"),
    "flowctl.tui": ("flowctl.tui", "flowctl.cli"),
    "flowctl.serve": ("flowctl.serve", "flowctl.cli"),
    # operator actions are for front ends; the core below them never calls up
    "flowctl.ops": (
        "flowctl.ops",
        "flowctl.cli",
        "flowctl.tui",
        "flowctl.serve",
        "flowctl.client",
        "flowctl.testing",
    ),
}
# A backend is reached through the Store protocol and open_store, never by name.
BACKENDS = ("flowctl.store.sqlite", "flowctl.store.postgres")
# The store holds SQL and nothing that runs workflows.
EXECUTION = (
    "flowctl.runtime.context",
    "flowctl.runtime.engine",
    "flowctl.workflow",
    "flowctl.daemon",
    "flowctl.daemon.foreground",
    "flowctl.daemon",
    "flowctl.daemon.notifier",
    "flowctl.daemon.wheel",
    "flowctl.client",
    "flowctl.testing",
    "flowctl.cli",
    "flowctl.tui",
    "flowctl.serve",
    "flowctl.ops",
    "flowctl.yamlflow",
    "flowctl.schedule",
)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, importer: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in `source`; `from m import n` yields m and m.n
    (n may be a submodule), relative imports are resolved against `importer`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = importer.split(".")
                if not is_package:
                    package = package[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if a.name != "*"]
    return found


def broken_rules(importer: str, modules: list[tuple[int, str]]) -> list[str]:
    """Each import of `importer` that breaks a rule, as "importer:line: imports X (why)"."""
    out = []
    for line, mod in modules:
        why = None
        for lib, allowed in (LIBRARIES | FRONT_ENDS).items():
            if _under(mod, lib) and not any(_under(importer, a) for a in allowed):
                why = f"only {', '.join(allowed)} may"
        if any(mod.startswith(b) for b in BACKENDS) and not _under(importer, "flowctl.store"):
            why = "a backend is reached through flowctl.store, never by name"
        if _under(importer, "flowctl.store") and any(_under(mod, e) for e in EXECUTION):
            why = "the store imports no execution module"
        if why:
            out.append(f"{importer}:{line}: imports {mod} ({why})")
    return out


def test_every_module_keeps_to_its_layer() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "cli" / "__init__.py" in files and len(files) > 30  # the walk sees them all
    problems = [
        problem
        for path in files
        for problem in broken_rules(
            module_name(path),
            imported(path.read_text(), module_name(path), is_package=path.name == "__init__.py"),
        )
    ]
    assert problems == [], "imports across a layer:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("importer", "source", "broken"),
    [
        ("flowctl.runtime.engine", "import typer", "typer"),
        ("flowctl.ops.runs", "from textual.widgets import Static", "textual"),
        ("flowctl.workflow", "def f():\n    import yaml", "yaml"),
        ("flowctl.daemon", "import sqlite3", "sqlite3"),
        ("flowctl.tui.views", "from sqlite_utils import Database", "sqlite_utils"),
        ("flowctl.client", "import psycopg", "psycopg"),
        ("flowctl.runtime.engine", "from flowctl.store.sqlite import runs", "flowctl.store.sqlite"),
        ("flowctl.cli.start", "from flowctl.store import postgres", "flowctl.store.postgres"),
        ("flowctl.store", "from flowctl.runtime.engine import Engine", "flowctl.runtime.engine"),
        ("flowctl.store.sqlite.leases", "from ... import schedule", "flowctl.schedule"),
        ("flowctl.daemon", "from flowctl import cli", "flowctl.cli"),
        ("flowctl.runtime.engine", "from flowctl.tui.render import ago", "flowctl.tui.render"),
        ("flowctl.schedule.firing", "from flowctl import ops", "flowctl.ops"),
        ("flowctl.yamlflow.steps", "from ..ops import schedules", "flowctl.ops"),
    ],
)
def test_the_layer_check_sees_each_rule(importer: str, source: str, broken: str) -> None:
    problems = broken_rules(importer, imported(source, importer))
    assert problems and all(broken in p for p in problems), problems


def test_the_layer_check_allows_each_part_its_own() -> None:
    allowed = [
        (
            "flowctl.cli.admin",
            "import typer\nfrom flowctl.tui import FlowctlApp\nfrom flowctl import ops",
        ),
        ("flowctl.tui.app", "from textual.app import App\nfrom flowctl import ops"),
        ("flowctl.yamlflow", "import yaml"),
        ("flowctl.store.sqlite.runs", "import sqlite3\nfrom flowctl.store.sqlite import schema"),
        ("flowctl.store", "from flowctl.model import Run\nfrom flowctl.transitions import claim"),
        ("flowctl.__main__", "from flowctl.cli import main"),
        ("flowctl.testing", "from flowctl import ops\nfrom flowctl.daemon import Daemon"),
    ]
    assert [p for imp, src in allowed for p in broken_rules(imp, imported(src, imp))] == []


MAX_MODULE_LINES = 800


def test_every_module_is_under_800_lines() -> None:
    """A module that passes ~800 lines is split by job (STYLE.md 3.1), not left to grow."""
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) >= MAX_MODULE_LINES
    }
    assert long == {}, f"split these by job: {long}"


def test_core_does_not_load_front_ends() -> None:
    code = (
        "import sys, flowctl.runtime.engine, flowctl.daemon, flowctl.ops, flowctl.ops.schedules, "
        "flowctl.client, flowctl.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'textual') "
        "or m.split('.')[:2] in (['flowctl', 'cli'], ['flowctl', 'tui'])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_cli_startup_does_not_load_textual_or_the_engine() -> None:
    code = (
        "import sys; from flowctl import cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'yaml', 'cronsim') "
        "or m.split('.')[:2] in (['flowctl', 'tui'], ['flowctl', 'yamlflow']) "
        "or m == 'flowctl.ops.schedules'))"
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
        # Typer's, not flowctl's: CliRunner's name for get_command, which conftest.py points
        # at a build-once cache (the suite's in-process CLI invocations were half spent there).
        ("conftest.py", "typer.testing._get_command"),
        # The store's row decoder builds a Run without Run.__init__ (a claim decodes one per
        # run); test_mapping pins it to the constructor field by field and type by type,
        # for values no public call produces together (a paused suspect with a deadline...).
        ("test_mapping.py", "flowctl.store.mapping._RUN_COLUMNS"),
        ("test_mapping.py", "flowctl.store.mapping._dt"),
        ("test_mapping.py", "flowctl.store.mapping._run_from_row"),
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
