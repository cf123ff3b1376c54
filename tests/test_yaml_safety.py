"""Hostile YAML and workflow discovery: aliases, tags, bytes and nesting are refused at their
file:line:column; discovery reads files and never runs them (issue 11, item 5)."""

from __future__ import annotations

import logging
import stat
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowctl import cli, ops
from flowctl.errors import TargetError, ValidationError
from flowctl.runtime.targets import discover, load_target
from flowctl.yamlflow import ALIAS_BUDGET, MAX_YAML_BYTES, load_yaml, load_yaml_file

STEPS = "steps:\n  - run: [echo, hi]\n"


def problems_of(text: str, path: str = "wf.yaml") -> list[str]:
    with pytest.raises(ValidationError) as err:
        load_yaml(text, path)
    return err.value.problems


def laughs(levels: int) -> str:
    """The classic "billion laughs": each level is nine aliases of the one before."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nsteps: [{{run: [echo, *l{levels}]}}]\n"


# ---------------------------------------------------------------- aliases


@pytest.mark.parametrize("levels", [3, 8, 12])
def test_billion_laughs_is_refused_at_the_alias_that_breaks_the_budget(levels: int) -> None:
    found = problems_of(laughs(levels))
    assert len(found) == 1
    # l1 is 9 aliases of 10 values, l2 9 of 91: 909 in all; the first alias of l3 passes 1,000
    assert found[0].startswith("wf.yaml:4:10: ")
    assert f"aliases expand to more than {ALIAS_BUDGET} values" in found[0]


def test_small_anchors_and_merge_keys_still_work() -> None:
    wf = load_yaml(
        "name: merged\n"
        "defaults: {retry: &r {max_attempts: 4, backoff: 2s}}\n"
        "steps:\n"
        "  - id: a\n    run: [echo, a]\n    retry: *r\n"
        "  - id: b\n    run: [echo, b]\n    retry: {<<: *r, max_attempts: 2}\n",
        "wf.yaml",
    )
    assert [s.retry for s in wf.steps] == [
        {"max_attempts": 4, "backoff": timedelta(seconds=2)},
        {"max_attempts": 2, "backoff": timedelta(seconds=2)},
    ]


def test_a_recursive_alias_is_refused() -> None:
    found = problems_of("name: r\nsteps: &s\n  - run: [echo, *s]\n")
    assert found == ["wf.yaml:3:17: yaml: alias *s refers to itself"]


# ---------------------------------------------------------------- tags


@pytest.mark.parametrize(
    ("value", "shown", "col"),
    [
        (
            '!!python/object/apply:os.system ["touch {marker}"]',
            "!!python/object/apply:os.system",
            9,
        ),
        ("!!python/name:os.system", "!!python/name:os.system", 9),
        ("!!binary aGk=", "!!binary", 9),
        ("!custom thing", "!custom", 9),
        ("!!str 5", "!!str", 9),
        ("! plain", "!", 9),
    ],
)
def test_every_tag_is_refused_at_its_place(
    tmp_path: Path, value: str, shown: str, col: int
) -> None:
    marker = tmp_path / "pwned"
    text = f"name: t\nsteps:\n  - run:\n      - echo\n      - {value.format(marker=marker)}\n"
    found = problems_of(text)
    assert found == [
        f"wf.yaml:5:{col}: yaml: YAML tags are not allowed (found {shown}); "
        "quote the value to keep it as text"
    ]
    assert not marker.exists()


def test_a_tag_on_a_mapping_is_refused_too() -> None:
    found = problems_of("name: t\nsteps:\n  - !!map {run: [echo, hi]}\n")
    assert found[0].startswith("wf.yaml:3:5: yaml: YAML tags are not allowed (found !!map)")


def test_a_quoted_bang_is_plain_text() -> None:
    wf = load_yaml('name: t\nsteps:\n  - run: [echo, "!!binary aGk="]\n', "wf.yaml")
    assert wf.steps[0].value == ["echo", "!!binary aGk="]


# ---------------------------------------------------------------- bytes, depth, size


@pytest.mark.parametrize(
    ("raw", "where", "message"),
    [
        (b'name: x\nsteps:\n  - run: [echo, "a\x07b"]\n', "3:19", "character U+0007"),
        (b"name: x\x1b\nsteps: []\n", "1:8", "character U+001B"),
        (b'name: x\nsteps:\n  - run: [echo, "a\xffb"]\n', "3:19", "byte 0xff is not UTF-8"),
        (b"name: \xc3\xa9\xc3\nsteps: []\n", "1:8", "byte 0xc3 is not UTF-8"),
    ],
)
def test_control_characters_and_bad_bytes_point_at_their_place(
    tmp_path: Path, raw: bytes, where: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(raw)
    with pytest.raises(ValidationError) as err:
        load_yaml_file(path)
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith(f"{path}:{where}: yaml: ")
    assert message in err.value.problems[0]


def test_deep_nesting_is_one_problem_not_a_recursion_error() -> None:
    found = problems_of("name: deep\nsteps: " + "[" * 5000 + "]" * 5000 + "\n")
    assert found == ["wf.yaml:2:71: yaml: nesting is deeper than 64 levels"]


def test_a_number_python_cannot_convert_is_a_problem() -> None:
    found = problems_of("name: n\nmax_attempts: " + "9" * 5000 + "\n" + STEPS)
    assert found == ["wf.yaml:2:15: yaml: number too long (5000 characters)"]


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\n" + STEPS + "#" * MAX_YAML_BYTES + "\n")
    with pytest.raises(ValidationError, match="longer than 1024 KiB"):
        load_yaml_file(path)


def test_validate_reports_each_hostile_file_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "laughs.yaml").write_text(laughs(8))
    (tmp_path / "tag.yaml").write_text("name: t\nsteps: !!python/object/apply:os.getcwd []\n")
    (tmp_path / "bytes.yaml").write_bytes(b"name: \xff\n" + STEPS.encode())
    result = CliRunner().invoke(
        cli.app,
        ["validate", *(str(tmp_path / n) for n in ("laughs.yaml", "tag.yaml", "bytes.yaml"))],
    )
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert [line.split(": yaml: ")[0] for line in lines] == [
        f"{tmp_path / 'laughs.yaml'}:4:10",
        f"{tmp_path / 'tag.yaml'}:2:8",
        f"{tmp_path / 'bytes.yaml'}:1:7",
    ]
    assert "Traceback" not in result.output


# ---------------------------------------------------------------- discovery


PY_FLOW = '''
from pathlib import Path
from flowctl import workflow

Path({marker!r}).write_text("imported")  # a side effect at import time


@workflow("{name}")
def {fn}(ctx, n: int = 1):
    """{doc}"""
    return n + 1
'''


def write_py(folder: Path, stem: str, name: str, fn: str, doc: str = "Adds one.") -> Path:
    marker = folder.parent / f"imported-{stem}"
    (folder / f"{stem}.py").write_text(
        PY_FLOW.format(marker=str(marker), name=name, fn=fn, doc=doc)
    )
    return marker


def test_discovery_reads_python_source_and_imports_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "wf"
    folder.mkdir()
    marker = write_py(folder, "adder", "add-one", "add")
    (folder / "plain.py").write_text(
        "import flowctl\n\n@flowctl.workflow\ndef bare(ctx):\n    pass\n\n"
        "@flowctl.workflow(name='named')\nasync def other(ctx):\n    pass\n\n"
        "def helper():\n    pass\n\n@staticmethod\ndef not_a_workflow():\n    pass\n"
    )
    (folder / "broken.py").write_text("def (:\n")
    (folder / "ping.yaml").write_text("name: ping\ndescription: Says pong.\n" + STEPS)
    (folder / "unnamed.yaml").write_text(STEPS)
    found = discover(folder)
    assert {n: (e.kind, e.target.rpartition(":")[2]) for n, e in found.items()} == {
        "add-one": ("python", "add"),
        "bare": ("python", "bare"),
        "named": ("python", "other"),
        "ping": ("yaml", str((folder / "ping.yaml").resolve())),
        "unnamed": ("yaml", str((folder / "unnamed.yaml").resolve())),
    }
    assert found["add-one"].description == "Adds one."
    assert found["ping"].description == "Says pong."
    assert not marker.exists()  # listing imported nothing


def test_run_by_name_imports_only_the_file_it_runs(tmp_path: Path) -> None:
    folder = tmp_path / "wf"
    folder.mkdir()
    used = write_py(folder, "a_used", "used", "used_fn")
    other = write_py(folder, "b_other", "other", "other_fn")
    wf = load_target("used", workflows_dir=folder)
    assert wf.handler(None, n=41) == 42
    assert used.exists() and not other.exists()


def test_one_hostile_yaml_does_not_hang_or_hide_the_others(tmp_path: Path) -> None:
    folder = tmp_path / "wf"
    folder.mkdir()
    (folder / "a-laughs.yaml").write_text("name: laughs\n" + laughs(9))
    (folder / "b-big.yaml").write_text("name: big\n" + STEPS + "#" * (2 * MAX_YAML_BYTES))
    (folder / "c-tag.yaml").write_text("name: !!python/name:os.system\n" + STEPS)
    (folder / "d-bytes.yaml").write_bytes(b"name: \xff\n" + STEPS.encode())
    (folder / "ping.yaml").write_text("name: ping\n" + STEPS)
    # listed by the name read from the top (a tagged name: by the file's stem); the big
    # and the undecodable files are skipped with a warning
    assert [w.name for w in ops.list_workflows(folder)] == ["c-tag", "laughs", "ping"]
    with pytest.raises(ValidationError, match="aliases expand"):
        load_target("laughs", workflows_dir=folder)  # found by name, refused when loaded
    with pytest.raises(ValidationError, match="YAML tags are not allowed"):
        load_target("c-tag", workflows_dir=folder)
    assert load_target("ping", workflows_dir=folder).name == "ping"


def test_workflows_command_lists_without_importing(tmp_path: Path, monkeypatch: Any) -> None:
    folder = tmp_path / "project"
    (folder / "workflows").mkdir(parents=True)
    (folder / "flowctl.toml").write_text('workflows = "workflows"\n')
    marker = write_py(folder / "workflows", "adder", "add-one", "add")
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    result = CliRunner().invoke(cli.app, ["--db", str(tmp_path / "x.db"), "workflows"])
    assert result.exit_code == 0, result.output
    assert result.output.split("\n")[1].split() == [
        "add-one", "python", "workflows/adder.py", "Adds", "one.",
    ]  # fmt: skip
    assert not marker.exists()


def test_a_folder_or_file_writable_by_others_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules["flowctl.runtime.targets"], "_warned", set())
    folder = tmp_path / "wf"
    folder.mkdir()
    (folder / "ping.yaml").write_text("name: ping\n" + STEPS)
    (folder / "open.yaml").write_text("name: open\n" + STEPS)
    caplog.set_level(logging.WARNING, logger="flowctl.runtime.targets")
    discover(folder)
    assert caplog.records == []
    folder.chmod(folder.stat().st_mode | stat.S_IWOTH)
    (folder / "open.yaml").chmod(0o666)
    for _ in range(3):
        discover(folder)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"warning: workflows folder {folder} is writable by other users, who could make it "
        f"run code as you; fix with: chmod o-w {folder}",
        f"warning: workflow file {folder / 'open.yaml'} is writable by other users, who could "
        f"make it run code as you; fix with: chmod o-w {folder / 'open.yaml'}",
    ]


def test_unknown_name_is_still_a_target_error(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="unknown workflow 'nope'"):
        load_target("nope", workflows_dir=tmp_path)
