"""`flowctl init --example`: the shipped sample workflows written into a project, all or
nothing, never overwriting without --force."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from flowctl.cli import starter
from flowctl.errors import UsageError
from tests.conftest import ROOT


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_samples_are_written_as_plain_copies_of_workflows(tmp_path: Path) -> None:
    written = starter.write_samples(tmp_path / "workflows")
    repo = {p.name for p in (ROOT / "workflows").iterdir() if p.is_file()}
    assert {p.name for p in written} == repo == _names(tmp_path / "workflows")
    for path in written:
        assert not path.is_symlink(), "a copy, never a link into the installed package"
        assert path.read_bytes() == (ROOT / "workflows" / path.name).read_bytes()


def test_an_existing_file_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "onboarding.py").write_text("mine\n")
    with pytest.raises(UsageError, match=r"onboarding\.py already exists; use --force"):
        starter.write_samples(folder)
    assert _names(folder) == {"onboarding.py"}
    assert (folder / "onboarding.py").read_text() == "mine\n"


def test_force_overwrites_and_replaces_a_link_instead_of_writing_through_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    outside = tmp_path / "elsewhere.py"
    outside.write_text("keep me\n")
    (folder / "onboarding.py").symlink_to(outside)
    (folder / "ping.yaml").write_text("old\n")
    starter.write_samples(folder, force=True)
    assert outside.read_text() == "keep me\n"
    assert not (folder / "onboarding.py").is_symlink()
    for name in ("onboarding.py", "ping.yaml"):
        assert (folder / name).read_bytes() == (ROOT / "workflows" / name).read_bytes()


def test_a_file_where_the_folder_goes_is_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "workflows").write_text("not a folder\n")
    for force in (False, True):
        with pytest.raises(UsageError, match="is not a folder"):
            starter.write_samples(tmp_path / "workflows", force=force)
    assert (tmp_path / "workflows").read_text() == "not a folder\n"


# ----------------------------------------------------------------- the command


def _invoke(*args: str) -> Result:
    from flowctl.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    return tmp_path


def test_init_example_writes_the_project_and_its_next_command_works(project: Path) -> None:
    out = _invoke("init", "--example")
    assert out.exit_code == 0, out.output
    assert (project / "flowctl.toml").is_file()
    assert _names(project / "workflows") == {p.name for p in starter.sample_workflows()}
    lines = out.output.splitlines()
    assert (
        "wrote workflows/fanout.py, workflows/followup.yaml, workflows/onboarding.py,"
        " workflows/ping.yaml" in lines
    )
    # "says what to run next": the command it names runs and leaves a sleeping run
    nxt = next(x for x in lines if x.startswith("next: ")).removeprefix("next: ")
    argv = shlex.split(nxt.split("#", 1)[0])
    assert argv[0] == "flowctl"
    ran = _invoke(*argv[1:])
    assert ran.exit_code == 0, ran.output
    listed = json.loads(_invoke("ls", "--json").output)
    assert [(r["workflow"], r["status"]) for r in listed] == [("onboarding", "sleeping")]
    assert (project / ".flowctl" / "outbox.log").read_text() == "welcome -> user 42\n"


def test_init_example_refuses_an_existing_sample_and_writes_nothing(project: Path) -> None:
    (project / "workflows").mkdir()
    (project / "workflows" / "ping.yaml").write_text("mine\n")
    out = _invoke("init", "--example")
    assert out.exit_code == 2
    assert "ping.yaml already exists; use --force to overwrite" in out.output
    assert "Traceback" not in out.output
    assert _names(project) == {"workflows"}  # no flowctl.toml, no database
    assert _names(project / "workflows") == {"ping.yaml"}
    assert _invoke("init", "--example", "--force").exit_code == 0
    assert (project / "workflows" / "ping.yaml").read_bytes() == (
        ROOT / "workflows" / "ping.yaml"
    ).read_bytes()


def test_init_example_refuses_an_existing_config_before_writing_samples(project: Path) -> None:
    (project / "flowctl.toml").write_text('workflows = "workflows"\n')
    out = _invoke("init", "--example")
    assert out.exit_code == 2
    assert "flowctl.toml already exists; use --force" in out.output
    assert _names(project) == {"flowctl.toml"}


@pytest.mark.parametrize("folder", ["flowctl.toml", ".flowctl/flowctl.db"])
def test_init_where_its_file_is_a_folder_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    from tests.inproc import run_main

    (tmp_path / folder).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for args in (["init"], ["init", "--force"]):
        ran = run_main(monkeypatch, *args)
        assert ran.returncode == 2, (ran.stdout, ran.stderr)
        assert ran.stderr.startswith(f"flowctl: {tmp_path / folder} is a folder")
        assert len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr
        assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
