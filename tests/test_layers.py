"""The import direction is a checked fact: each library is used by its own package only,
the store depends on no execution code, nothing imports a front end, no import runs up a
layer and no modules import each other in a circle.

The library rules are ruff's banned-api lines in pyproject.toml, checked here at run time
over the AST of every module; every check counts every import, at the top, inside
functions and under TYPE_CHECKING: a lazy import hides nothing from it.
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
    "opentelemetry": ("flowctl.tracing",),
    "starlette": ("flowctl.serve",),
    "uvicorn": ("flowctl.serve",),
    "cryptography": ("flowctl.crypto.cipher",),
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
    "flowctl.runtime",
    "flowctl.workflow",
    "flowctl.daemon",
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


def _from_base(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from ... import` names, relative imports resolved against `importer`."""
    base = node.module or ""
    if node.level:
        package = importer.split(".")
        if not is_package:
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    return base


def imported(source: str, importer: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in `source`; `from m import n` yields m and m.n
    (n may be a submodule), relative imports are resolved against `importer`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, importer, is_package)
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


# ---------------------------------------------------------------- the import graph

# The layers, lowest first (README's map): a module imports its own layer and those below,
# never one above. A name covers itself and everything under it; "flowctl" is the package's
# own __init__ (the public names), and only it. Every module must fall in one.
LAYERS: tuple[tuple[str, ...], ...] = (
    (  # the leaves: stdlib only, and each other
        "flowctl.errors",
        "flowctl.status",
        "flowctl.clock",
        "flowctl.durations",
        "flowctl.limits",
        "flowctl.model",
        "flowctl.ids",
        "flowctl.retry",
        "flowctl.notify",
        "flowctl.config",
        "flowctl.transitions",
        "flowctl.fanout",
        "flowctl.inputs",
        "flowctl.flow",
        "flowctl.workflow",
    ),
    # key files and the key ring (issue 42): the store is handed a ring, never imports one
    ("flowctl.crypto",),
    # a Litestream replica: the binary, the destination, the child process
    ("flowctl.replica",),
    ("flowctl.store",),
    ("flowctl.tracing",),  # spans for runs and steps (OpenTelemetry, when asked for)
    # execution: a run's handler, replayed; what its steps print (output), which YAML's
    # commands and the runtime's steps both capture
    ("flowctl.yamlflow", "flowctl.runtime", "flowctl.output"),
    ("flowctl.schedule",),
    ("flowctl.daemon",),
    ("flowctl.ops",),  # operator actions and why, for every front end
    (
        "flowctl.cli",
        "flowctl.tui",
        "flowctl.serve",
        "flowctl.client",
        "flowctl.testing",
        "flowctl.__main__",
        "flowctl",
    ),
)


def package_sources(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    """Every module of the package: its name -> (its source, whether it is a package).
    Not samples/: the example workflows `flowctl init --example` copies out are user code."""
    return {
        module_name(path, root): (path.read_text(), path.name == "__init__.py")
        for path in sorted(root.rglob("*.py"))
        if "samples" not in path.relative_to(root).parts
    }


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Which modules of `sources` each one imports, every import counted. `from m import n`
    imports m.n when that is a module, else m (a package's own __init__, run first by any
    import of its modules, is not counted as imported by them)."""
    graph: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(node, name, is_package)
                edges.update(
                    f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base
                    for a in node.names
                )
        graph[name] = {mod for mod in edges if mod in sources and mod != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles: each set of modules that import each other (strongly connected
    components of more than one module), found by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(members) > 1:
                found.append(frozenset(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(name: str) -> int | None:
    """The rank in LAYERS of the most specific name covering `name` (None: no layer)."""
    best: tuple[int, int] | None = None
    for rank, names in enumerate(LAYERS):
        for prefix in names:
            covers = name == prefix or (prefix != "flowctl" and name.startswith(prefix + "."))
            if covers and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def uphill(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module in a higher layer than the importer's, as "a -> b"."""
    return [
        f"{importer} -> {mod}"
        for importer, mods in sorted(graph.items())
        for mod in sorted(mods)
        if (layer_of(mod) or 0) > (layer_of(importer) or 0)
    ]


def test_no_modules_import_each_other_in_a_circle() -> None:
    found = circles(import_graph(package_sources()))
    assert [sorted(c) for c in found] == []


def test_every_module_has_a_layer_and_no_import_runs_up_one() -> None:
    graph = import_graph(package_sources())
    assert "flowctl.daemon.loop" in graph["flowctl.daemon.worker"]  # the graph sees imports
    assert [name for name in graph if layer_of(name) is None] == []
    assert uphill(graph) == []


PLANTED: dict[str, dict[str, str]] = {
    "a function-local import": {
        "flowctl.runtime.engine": "from flowctl.runtime.targets import Loader",
        "flowctl.runtime.targets": "def load():\n    from flowctl.runtime import engine",
    },
    "a TYPE_CHECKING import": {
        "flowctl.daemon.loop": "from flowctl.daemon.executor import Executor",
        "flowctl.daemon.executor": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from flowctl.daemon.loop import Daemon"
        ),
    },
    "a ring of three, one relative": {
        "flowctl.workflow": "import flowctl.inputs",
        "flowctl.inputs": "from flowctl import yamlflow",
        "flowctl.yamlflow": "from .. import workflow",
    },
}


@pytest.mark.parametrize("how", PLANTED)
def test_the_circle_check_sees_a_planted_circle(how: str) -> None:
    sources = {name: (text, name == "flowctl.yamlflow") for name, text in PLANTED[how].items()}
    assert circles(import_graph(sources)) == [frozenset(sources)]


def test_the_circle_check_sees_no_circle_where_imports_only_go_down() -> None:
    sources = {
        "flowctl": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import flowctl.client",
            True,
        ),
        "flowctl.client": ("from flowctl import ops\nfrom flowctl.daemon import Daemon", False),
        "flowctl.ops": ("from flowctl.store import Store", True),
        "flowctl.daemon": ("from flowctl.daemon.loop import Daemon", True),
        "flowctl.daemon.loop": ("from flowctl import store, workflow", False),
        "flowctl.store": ("def f():\n    from flowctl.model import Run", True),
        "flowctl.workflow": ("", False),
        "flowctl.model": ("", False),
    }
    graph = import_graph(sources)
    assert graph["flowctl.daemon.loop"] == {"flowctl.store", "flowctl.workflow"}
    assert circles(graph) == [] and uphill(graph) == []


@pytest.mark.parametrize(
    ("importer", "source", "up"),
    [
        (
            "flowctl.store.sqlite.runs",
            "def f():\n    from flowctl.daemon import loop",
            "flowctl.daemon.loop",
        ),
        (
            "flowctl.config",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from flowctl.daemon import retention",
            "flowctl.daemon.retention",
        ),
        (
            "flowctl.inputs",
            "def f():\n    from flowctl.yamlflow import steps",
            "flowctl.yamlflow.steps",
        ),
        (
            "flowctl.runtime.engine",
            "from flowctl.schedule import firing",
            "flowctl.schedule.firing",
        ),
        ("flowctl.daemon.loop", "from ..ops import runs", "flowctl.ops.runs"),
    ],
)
def test_the_layer_order_sees_an_import_up(importer: str, source: str, up: str) -> None:
    sources = {importer: (source, False), up: ("", False)}
    assert uphill(import_graph(sources)) == [f"{importer} -> {up}"]


MAX_MODULE_LINES = 800


def test_every_module_is_under_800_lines() -> None:
    """A module that passes ~800 lines is split by job (STYLE.md 3.1), not left to grow."""
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) >= MAX_MODULE_LINES
    }
    assert long == {}, f"split these by job: {long}"


MAX_FUNCTION_LINES = 80
# Data written as code, read whole: a schema's first migration and the OpenAPI document.
LONG_BY_NATURE = {("store/sqlite/schema.py", "_migration_1"), ("serve/openapi.py", "spec")}


def long_functions(root: Path, limit: int) -> dict[tuple[str, str], int]:
    """Every function (methods and nested ones included) of more than `limit` lines."""
    found: dict[tuple[str, str], int] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    found[(str(path.relative_to(root)), node.name)] = n
    return found


def test_no_function_is_over_80_lines_but_data_written_as_code() -> None:
    """A function a reader can hold (STYLE.md): none passes 80 lines outside migrations and
    the OpenAPI document."""
    long = long_functions(PACKAGE, MAX_FUNCTION_LINES)
    assert set(long) - LONG_BY_NATURE == set(), f"split these: {long}"


def test_the_function_length_check_counts_nested_functions(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(81))
    (tmp_path / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n")
    assert long_functions(tmp_path, MAX_FUNCTION_LINES) == {("m.py", "f"): 82}


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
