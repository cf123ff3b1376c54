"""The front ends and ops import in one direction: no module of flowctl.cli, flowctl.tui,
flowctl.serve or flowctl.ops (nor flowctl.client) is part of an import circle, counting
every import (at the top, inside a function, under TYPE_CHECKING). A circle hidden by a
function-local import still ties two modules together: it is refused like any other.

Importing a submodule runs its package's __init__, but that edge is Python's, not ours:
only the imports written in each module count.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import PACKAGE, imported, module_name

FRONT = ("flowctl.cli", "flowctl.tui", "flowctl.serve", "flowctl.ops", "flowctl.client")


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each flowctl module -> the flowctl modules it imports (a name that is no module,
    `from m import f`, counts as m)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found = imported(path.read_text(), name, is_package=path.name == "__init__.py")
        deps = set()
        for _line, target in found:
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target not in (name, "flowctl"):
                deps.add(target)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_front_end_or_ops_module_is_in_an_import_circle() -> None:
    graph = import_graph()
    assert "flowctl.tui.header" in graph and "flowctl.cli.lazy" in graph  # it sees them
    ours = [c for c in circles(graph) if any(m.startswith(FRONT) for m in c)]
    assert ours == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in ours)


def test_the_check_sees_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "flowctl"
    (pkg / "tui").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tui" / "__init__.py").write_text("")
    (pkg / "tui" / "app.py").write_text("from flowctl.tui.header import HeaderLine\n")
    (pkg / "tui" / "header.py").write_text(
        "def render():\n    from flowctl.tui.app import FlowctlApp\n"
    )
    (pkg / "tui" / "views.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flowctl.tui import app\n"
    )
    assert circles(import_graph(pkg)) == [["flowctl.tui.app", "flowctl.tui.header"]]
