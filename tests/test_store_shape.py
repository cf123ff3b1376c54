"""The store is written once (issue 35, items 1 and 2): every transaction lives in
flowctl/store/ over the dialect, and a backend folder holds only its connections, schema
and file- or server-level operations; one place per backend issues a COMMIT; and nothing
outside the store discovers what a store can do by sniffing it.

These are checks of the code itself (its AST and lines), so that a transaction copied
into a backend again, or a capability reached around the protocol, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from flowctl.store.protocol import RunListing, Store
from flowctl.store.schedule_store import ScheduleStore

PACKAGE = Path(__file__).resolve().parent.parent / "flowctl"
STORE = PACKAGE / "store"
BACKENDS = (STORE / "sqlite", STORE / "postgres")
# What only a backend can do: the protocol operations a backend folder may define.
BACKEND_OWN = {
    "close",
    "data_version",
    "own_writes",
    "set_group_commit",
    "take_turns",
    "writers",
    "file_replaced",
    "file_identity",
    "free_bytes",
    "vacuum",
    "backup_to",
    "integrity_check",
}


def functions(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


def operations() -> set[str]:
    return {
        name
        for proto in (RunListing, ScheduleStore, Store)
        for name in vars(proto)
        if not name.startswith("_") and callable(getattr(proto, name, None))
    }


def test_no_backend_defines_a_store_transaction() -> None:
    ops = operations()
    assert {"claim_due", "record_entry", "complete_run", "fire_schedule"} <= ops  # seen
    for backend in BACKENDS:
        written = functions(backend) & ops
        assert written <= BACKEND_OWN, f"{backend.name} writes {sorted(written - BACKEND_OWN)}"


def test_the_backends_share_at_most_fifteen_function_names() -> None:
    shared = functions(BACKENDS[0]) & functions(BACKENDS[1])
    assert "transact" in shared  # both run a transaction, each its own way
    assert len(shared) <= 15, sorted(shared)


def test_the_postgresql_backend_stays_under_1500_lines() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in BACKENDS[1].rglob("*.py"))
    assert 300 < lines <= 1500


def _normalized(path: Path) -> list[str]:
    """Lines that carry code: white space folded; blank lines, comments, imports, lone
    punctuation and docstring-only lines left out (as a reader skims them)."""
    out = []
    for raw in path.read_text().splitlines():
        line = " ".join(raw.split())
        if not line or line.startswith(("#", "import ", "from ")) or not re.search(r"\w", line):
            continue
        out.append(line)
    return out


def _windows(folder: Path, size: int = 6) -> dict[tuple[str, ...], str]:
    seen: dict[tuple[str, ...], str] = {}
    for path in sorted(folder.rglob("*.py")):
        lines = _normalized(path)
        for i in range(len(lines) - size + 1):
            seen.setdefault(tuple(lines[i : i + size]), f"{path.name}:{i}")
    return seen


def test_no_run_of_six_lines_is_repeated_between_the_backends() -> None:
    sqlite, postgres = (_windows(b) for b in BACKENDS)
    repeated = [(sqlite[w], postgres[w]) for w in sqlite.keys() & postgres.keys()]
    assert repeated == []


def test_only_a_backends_connection_issues_a_commit() -> None:
    """The round's COMMIT, and every other, is the backend's transaction's own (SQLite's
    connection says it; PostgreSQL's pool connection's transaction() makes it): no
    procedure, no round and nothing outside the store runs a COMMIT. A migration commits
    the schema's own transaction."""
    running = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"""execute\(\s*["']COMMIT""", p.read_text())
    }
    assert running == {"store/sqlite/connection.py", "store/sqlite/migrating.py"}


def test_no_store_capability_is_sniffed() -> None:
    """What a store can do is its protocol: no hasattr/getattr on a store, and no call to
    it that mypy has to be told to let through."""
    sniffing = []
    for path in PACKAGE.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            sniff = re.search(r"\b(hasattr|getattr)\((type\()?[\w.]*store", line)
            silenced = "store" in line and "type: ignore[attr-defined]" in line
            if sniff or silenced:
                sniffing.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert sniffing == []
