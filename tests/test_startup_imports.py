"""Start-up stays cheap: parsing `flowctl --help`, or importing the CLI or the package,
loads none of the heavy modules (issue 17, item 4). The time itself is a benchmark
(benchmarks/startup.py), never asserted here; what is asserted is which modules load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from flowctl.cli import app, coerce
from flowctl.client import Client
from tests.conftest import ROOT

HEAVY = (
    "textual",
    "yaml",
    "cronsim",
    "flowctl.runtime.engine",
    "flowctl.daemon",
    "flowctl.runtime.context",
    "flowctl.workflow",
    "flowctl.yamlflow",
    "flowctl.schedule",
    "flowctl.store",
    "sqlite3",
    "sqlite_utils",
    "psycopg",
    "starlette",
    "uvicorn",
    "httpx",
    "pydantic",
    "rich",
    "cryptography",  # only with a key configured (issue 42)
    "flowctl.crypto",
    "logging",  # only the daemon configures it (cli/daemon.py, loaded by `flowctl daemon`)
)


def _loaded_after(code: str) -> list[str]:
    """Top-level-or-flowctl module names from HEAVY loaded after running `code` fresh."""
    probe = (
        "import sys, json\n"
        f"{code}\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if any(m == h or m.startswith(h + '.') for h in heavy))))\n"
    )
    loaded: list[str] = json.loads(_output_of(probe).strip().splitlines()[-1])
    return loaded


def _output_of(code: str) -> str:
    """What a fresh `python -c code` prints."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout


HELP = (
    "import flowctl.cli\n"
    "try:\n"
    "    flowctl.cli.app({argv!r}, prog_name='flowctl', standalone_mode=False)\n"
    "except SystemExit:\n"
    "    pass\n"
)


@pytest.mark.parametrize(
    "code",
    [
        "import flowctl",
        "import flowctl.cli",
        HELP.format(argv=["--help"]),
        HELP.format(argv=["ls", "--help"]),
        HELP.format(argv=["schedule", "--help"]),
        HELP.format(argv=["tui", "--help"]),
    ],
    ids=[
        "import flowctl",
        "import flowctl.cli",
        "--help",
        "ls --help",
        "schedule --help",
        "tui --help",
    ],
)
def test_start_up_loads_no_heavy_module(code: str) -> None:
    assert _loaded_after(code) == []


def test_ls_loads_the_store_but_not_the_engine_or_pydantic(tmp_path: object) -> None:
    code = (
        "import os, flowctl.cli\n"
        f"os.environ['FLOWCTL_DB'] = {str(tmp_path) + '/f.db'!r}\n"
        "try:\n"
        "    flowctl.cli.app(['ls'], prog_name='flowctl', standalone_mode=False)\n"
        "except BaseException:\n"
        "    pass\n"
    )
    loaded = _loaded_after(code)
    assert "flowctl.store" in loaded  # the probe really ran `ls` as far as the database
    for name in (
        "pydantic",
        "textual",
        "yaml",
        "cronsim",
        "flowctl.runtime.engine",
        "flowctl.daemon",
        "flowctl.workflow",  # the run list needs no workflow loader (flowctl/ops/listing.py)
        "logging",
    ):
        assert not any(m == name or m.startswith(name + ".") for m in loaded), name


def test_public_api_still_resolves_lazily() -> None:
    import flowctl
    from flowctl.errors import FlowctlError
    from flowctl.workflow import workflow

    assert flowctl.FlowctlError is FlowctlError
    assert flowctl.workflow is workflow
    assert "Client" in dir(flowctl)
    with pytest.raises(AttributeError):
        _ = flowctl.no_such_name  # type: ignore[attr-defined]


# --- the plain converter accepts and rejects what Typer's pydantic one does ----------


def _cmd(
    n: int = typer.Option(5, "-n", max=10),
    name: str = typer.Option("x"),
    tag: list[str] = typer.Option([], "--tag"),  # noqa: B008
    flag: bool = typer.Option(False, "--flag"),
) -> None:
    typer.echo(json.dumps([n, name, tag, flag]))


ARGS = [
    ["-n", "7"],
    ["-n", " 7"],
    ["-n", "+3"],
    ["-n", "-2"],
    ["-n", "10"],
    ["-n", "11"],
    ["-n", "abc"],
    ["-n", "2.5"],
    ["-n", ""],
    ["--name", "héllo", "--tag", "a", "--tag", "b", "--flag"],
    [],
]


@pytest.mark.parametrize("argv", ARGS, ids=[" ".join(a) or "defaults" for a in ARGS])
def test_plain_converter_agrees_with_typers(argv: list[str]) -> None:
    assert coerce.installed()
    ours = CliRunner().invoke(_fresh_probe(), argv)
    with coerce.typers_converter():
        assert not coerce.installed()
        theirs = CliRunner().invoke(_fresh_probe(), argv)
    assert ours.exit_code == theirs.exit_code, (ours.output, theirs.output)
    if ours.exit_code == 0:
        assert json.loads(ours.output) == json.loads(theirs.output)


def _fresh_probe() -> typer.Typer:
    fresh = typer.Typer()
    fresh.command()(_cmd)
    return fresh


def test_install_is_idempotent_and_used_by_the_app() -> None:
    coerce.install()
    coerce.install()
    assert coerce.installed()
    result = CliRunner().invoke(app, ["ls", "-n", "abc"])
    assert result.exit_code == 2
    assert "'abc' is not a whole number" in result.output


# The CLI skeleton: what `flowctl --help` may load of flowctl (issue 17, item 4). Every
# command module is imported only when its command is used (cli/__init__.py COMMANDS).
SKELETON = {
    "flowctl",
    "flowctl.cli",
    "flowctl.cli.coerce",
    "flowctl.cli.common",
    "flowctl.cli.helpfmt",
    "flowctl.cli.lazy",
    "flowctl.cli.panels",  # the help's boxes (not Rich: see cli/helpfmt.py)
    "flowctl.clock",
    "flowctl.errors",
    "flowctl.limits",
}
# ... and what `flowctl ls` adds: its command, the run-list read, the config that finds the
# database, the SQLite run-list reads alone (flowctl.store.open_run_list), the table renderer.
# Not the store's records (dataclasses), the claim policy, the write, lease, schedule or
# maintenance mixins, nor the [notify] parser (only a flowctl.toml with [notify] loads it).
LS_PATH = {
    "flowctl.cli.listing",
    "flowctl.cli.table",
    "flowctl.ops",
    "flowctl.ops.listing",
    "flowctl.ops.parse",
    "flowctl.config",
    "flowctl.durations",
    "flowctl.model",
    "flowctl.status",
    "flowctl.store",
    "flowctl.store.core",
    "flowctl.store.dialect",
    "flowctl.store.listing",
    "flowctl.store.mapping",
    "flowctl.store.protocol",
    "flowctl.store.round",
    "flowctl.store.schedule_store",  # split off protocol: the same code, loaded as before
    "flowctl.store.rows",
    "flowctl.store.sql",
    "flowctl.store.sqlite",
    "flowctl.store.sqlite.connection",
    "flowctl.store.sqlite.files",
    "flowctl.store.sqlite.migrating",  # split off schema: the same code, loaded as before
    "flowctl.store.sqlite.opening",
    "flowctl.store.sqlite.schema",
    "flowctl.store.values",  # a sealed value shown as its key id (issue 42): no cipher
}


def _flowctl_modules_after(argv: list[str], db: str) -> set[str]:
    probe = (
        "import os, sys, json, flowctl.cli\n"
        f"os.environ['FLOWCTL_DB'] = {db!r}\n"
        "try:\n"
        f"    flowctl.cli.app({argv!r}, prog_name='flowctl', standalone_mode=False)\n"
        "except BaseException:\n"
        "    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'flowctl')))\n"
    )
    return set(json.loads(_output_of(probe).strip().splitlines()[-1]))


def test_help_loads_the_cli_skeleton_only(tmp_path: Path) -> None:
    assert _flowctl_modules_after(["--help"], str(tmp_path / "f.db")) == SKELETON


def test_ls_help_loads_the_ls_command_and_the_status_names_only(tmp_path: Path) -> None:
    """`flowctl ls --help` builds `ls` (its module and the statuses its help names), and
    loads nothing a list needs: no model (row dataclasses), no durations, no store."""
    loaded = _flowctl_modules_after(["ls", "--help"], str(tmp_path / "f.db"))
    assert loaded - SKELETON == {"flowctl.cli.listing", "flowctl.ops", "flowctl.status"}


def test_ls_loads_the_store_read_path_and_the_table_renderer_only(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with Client(db) as client:  # a row, so the table prints
        client.start(str(ROOT / "workflows" / "ping.yaml"))
    loaded = _flowctl_modules_after(["ls"], str(db))
    assert "flowctl.cli.table" in loaded  # the probe really printed the list
    assert loaded - SKELETON == LS_PATH


def test_ls_leaves_the_writes_and_every_heavy_module_unloaded(tmp_path: Path) -> None:
    """By name, what `flowctl ls` must never pay for: the engine and daemon, the write
    side of the store, Textual, cron, YAML, the HTTP stack, pydantic, Rich's console."""
    db = tmp_path / "f.db"
    with Client(db) as client:
        client.start(str(ROOT / "workflows" / "ping.yaml"))
    code = (
        "import os, flowctl.cli\n"
        f"os.environ['FLOWCTL_DB'] = {str(db)!r}\n"
        "try:\n"
        "    flowctl.cli.app(['ls'], prog_name='flowctl', standalone_mode=False)\n"
        "except BaseException:\n"
        "    pass\n"
        "import sys, json\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = set(json.loads(_output_of(code).strip().splitlines()[-1]))
    assert "flowctl.store.listing" in loaded  # the probe really read the database
    never = (
        "flowctl.runtime.engine",
        "flowctl.daemon",
        "flowctl.runtime.context",
        "flowctl.workflow",
        "flowctl.transitions",
        "flowctl.retry",
        "flowctl.notify",
        "flowctl.store.records",
        "flowctl.store.store",
        "flowctl.store.sqlite.store",
        "flowctl.store.reads",
        "flowctl.store.creating",
        "flowctl.store.endings",
        "flowctl.store.claims",
        "flowctl.store.leases",
        "flowctl.store.fenced",
        "flowctl.store.operator",
        "flowctl.store.schedules",
        "flowctl.store.pruning",
        "flowctl.store.outbox",
        "flowctl.store.output",
        "flowctl.store.metrics",
        "flowctl.store.postgres",
        "textual",
        "cronsim",
        "yaml",
        "httpx",
        "starlette",
        "uvicorn",
        "psycopg",
        "pydantic",
        "rich.console",
        "logging",
    )
    for name in never:
        assert not any(m == name or m.startswith(name + ".") for m in loaded), name


def test_every_store_name_still_resolves() -> None:
    """flowctl.store loads its re-exports on first use: each name in __all__ is there, the
    same object as where it is defined."""
    import flowctl.store as store
    from flowctl.store.records import Lease
    from flowctl.store.sqlite.schema import SCHEMA_VERSION

    assert [n for n in store.__all__ if not hasattr(store, n)] == []
    assert (store.Lease, store.SCHEMA_VERSION) == (Lease, SCHEMA_VERSION)
    with pytest.raises(AttributeError):
        _ = store.no_such_name  # type: ignore[attr-defined]


def test_the_processes_a_daemon_starts_import_no_asyncio_until_a_body_is_awaited() -> None:
    """A worker process and an isolated worker (one started per suspect, issue 39) import
    the workflow context, and with it the fan-out's event loop: asyncio, with socket and
    ssl (35 modules, a tenth of their start-up's instructions), is loaded only when an
    `async def` body is awaited."""
    code = (
        "import flowctl.daemon.worker, flowctl.daemon.isolated, flowctl.runtime.context\n"
        "from flowctl.runtime.branches import call_body\n"
        "import sys\n"
        "before = 'asyncio' in sys.modules or 'ssl' in sys.modules\n"
        "async def body(x):\n"
        "    return x + 1\n"
        "print(before, call_body(body, (1,), {}), 'asyncio' in sys.modules)\n"
    )
    assert _output_of(code).split() == ["False", "2", "True"]
