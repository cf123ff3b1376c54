"""`flowctl run --detach --input-file FILE|-`: one run per JSON line, in one transaction,
keys per line with --key, and a bad file queues nothing (issue 14, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowctl.model import RunStatus
from flowctl.store import open_store
from tests.dbs import has_schema
from tests.inproc import run_main

FLOWS = """\
from flowctl import workflow

@workflow
def greet(ctx, who: str):
    return ctx.step("hi", lambda: "hi " + who)
"""


@pytest.fixture
def target(tmp_path: Path) -> str:
    (tmp_path / "flows.py").write_text(FLOWS)
    return f"{tmp_path / 'flows.py'}:greet"


def queued(db: Path) -> list[dict[str, object]]:
    with open_store(db) as store:
        runs = store.list_runs(limit=1000)
        assert {r.status for r in runs} <= {RunStatus.QUEUED}
        return [r.input for r in runs]


def test_a_file_of_lines_queues_one_run_each(
    db: str, tmp_path: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"who": f"u{i}"}) + "\n" for i in range(300)) + "\n")
    ran = run_main(
        monkeypatch, "--db", str(db), "run", target, "--detach", "--input-file", str(lines)
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "queued 300 run(s) of greet"
    assert sorted(i["who"] for i in queued(db)) == sorted(f"u{i}" for i in range(300))  # type: ignore[index]


def test_stdin_and_keys_per_line(db: str, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = '{"who": "ana"}\n{"who": "bo"}\n'
    args = ["--db", str(db), "run", target, "--detach", "--input-file", "-", "--key", "batch7"]
    first = run_main(monkeypatch, *args, "--json", stdin=text)
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    assert [m["created"] for m in made] == [True, True]
    again = run_main(monkeypatch, *args, stdin=text + '{"who": "cy"}\n')
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "queued 1 run(s) of greet (2 already existed for their keys)"
    assert sorted(i["who"] for i in queued(db)) == ["ana", "bo", "cy"]  # type: ignore[index]
    with open_store(db) as store:
        assert store.get_run_by_key("batch7:1") is not None
        assert store.get_run_by_key("batch7:3") is not None


def test_a_key_is_numbered_by_the_line_an_editor_shows(
    db: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = '{"who": "ana"}\n\n{"who": "bo"}\n'
    args = ["--db", str(db), "run", target, "--detach", "--input-file", "-", "--key", "k"]
    assert run_main(monkeypatch, *args, stdin=text).returncode == 0
    with open_store(db) as store:
        assert store.get_run_by_key("k:1").input == {"who": "ana"}  # type: ignore[union-attr]
        assert store.get_run_by_key("k:3").input == {"who": "bo"}  # type: ignore[union-attr]
        assert store.get_run_by_key("k:2") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"who": "ana"}\n[1, 2]\n', "stdin line 2: each line must be a JSON object"),
        ('{"who": "ana"}\n{"who": \n', "stdin line 2 is not valid JSON"),
        ('{"who": "ana"}\n{"whom": "bo"}\n', "stdin line 2: workflow greet has no input 'whom'"),
        ('{"who": "ana"}\n\n{"whom": "bo"}\n', "stdin line 3: workflow greet has no input"),
        ("\n\n", "stdin holds no input"),
    ],
)
def test_a_bad_file_queues_nothing(
    db: str, target: str, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    args = ["--db", str(db), "run", target, "--detach", "--input-file", "-"]
    ran = run_main(monkeypatch, *args, stdin=text)
    assert ran.returncode != 0
    assert message in ran.stderr
    assert "Traceback" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    if has_schema(db):
        assert queued(db) == []


def test_input_file_needs_detach_and_no_other_input(
    db: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_detach = run_main(
        monkeypatch, "--db", str(db), "run", target, "--input-file", "-", stdin="{}"
    )
    assert no_detach.returncode == 2 and "add --detach" in no_detach.stderr
    both = run_main(
        monkeypatch, "--db", str(db), "run", target, "--detach", "--input-file", "-", "-i", "who=x",
        stdin="{}",
    )  # fmt: skip
    assert both.returncode == 2 and "not both" in both.stderr
