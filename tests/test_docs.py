"""Every command has help text and appears in the README; the README's set-up lines come first."""

from __future__ import annotations

from typer.main import get_command

from flowctl.cli import app
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_every_command_is_in_the_readme() -> None:
    group = get_command(app)
    for name in group.commands:
        assert f"flowctl {name}" in README, f"`flowctl {name}` is not documented in README.md"


def test_readme_starts_with_the_two_setup_commands() -> None:
    block = README.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    assert "flowctl run examples/hello.py:hello" in block[0]
    assert "pytest" in block[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[dev]'" in ci and "pytest" in ci


def test_readme_testing_example_runs(tmp_path, monkeypatch) -> None:
    """The README's 'Testing your workflows' snippet works as written."""
    block = next(
        b.split("```", 1)[0]
        for b in README.split("```python")[1:]
        if "WorkflowEnvironment" in b.split("```", 1)[0]
    )
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert tests
    for test in tests:
        test(tmp_path)  # type: ignore[operator]


def test_readme_client_example_runs(tmp_path, monkeypatch) -> None:
    block = next(
        b.split("```", 1)[0]
        for b in README.split("```python")[1:]
        if "Client()" in b.split("```", 1)[0]
    )
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("FLOWCTL_DB", str(tmp_path / "readme.db"))
    exec(compile(block, "README.md", "exec"), {})
    from flowctl.store.sqlite import SqliteStore as Store

    with Store(tmp_path / "readme.db") as store:
        runs = store.list_runs()
    assert [r.key for r in runs] == ["signup-42"]
