"""The HTTP stack stays off every path but `flowctl serve`'s own."""

from __future__ import annotations

import ast
import subprocess
import sys

HEAVY = ("starlette", "uvicorn", "prometheus_client", "flowctl.serve", "flowctl.ops.metrics")


def loaded_after(imports: str) -> list[str]:
    code = f"import sys; {imports}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(ast.literal_eval(out.stdout))


def test_cli_startup_and_the_core_do_not_load_the_http_stack() -> None:
    assert loaded_after("from flowctl import cli") == []
    assert (
        loaded_after("import flowctl.daemon, flowctl.ops, flowctl.client, flowctl.daemon.notifier")
        == []
    )


def test_flowctl_help_does_not_load_it_either() -> None:
    code = (
        "import sys; from flowctl import cli; sys.argv = ['flowctl', '--help']\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "[]"
    assert "serve" in out.stdout
