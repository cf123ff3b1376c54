"""Client.start loads a target once while its file is unchanged (issue 14, item 2), and an
edited file is still pinned as it is when a run starts."""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any

import pytest

from flowctl import Client
from flowctl.errors import InputError

# The module that loads targets (load_target, TargetCache).
workflow = importlib.import_module("flowctl.runtime.targets")

FLOWS = """\
from flowctl import workflow

@workflow
def greet(ctx, who: str = "ana"):
    return ctx.step("hi", lambda: "hi " + who)
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    loads: list[str] = []
    real = workflow.load_target

    def counting(target: str, **kw: Any) -> workflow.WorkflowDef:
        loads.append(target)
        return real(target, **kw)

    monkeypatch.setattr(workflow, "load_target", counting)
    return loads


def test_many_starts_of_one_file_load_it_once(
    db: str, flows: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = count_loads(monkeypatch)
    with Client(db) as client:
        ids = [client.start(f"{flows}:greet", {"who": f"u{i}"}) for i in range(5)]
        runs = [client.get(i) for i in ids]
        sources = {client.store.run_source(i)[0] for i in ids}
    assert loads == [f"{flows}:greet"]
    assert [r.input for r in runs] == [{"who": f"u{i}"} for i in range(5)]
    assert sources == {FLOWS}


def test_an_edited_file_is_loaded_again_and_pinned_as_edited(
    db: str, flows: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = count_loads(monkeypatch)
    with Client(db) as client:
        first = client.start(f"{flows}:greet")
        edited = FLOWS + "\n# edited\n"
        flows.write_text(edited)
        st = flows.stat()
        os.utime(flows, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        second = client.start(f"{flows}:greet")
        assert client.store.run_source(first)[0] == FLOWS
        assert client.store.run_source(second)[0] == edited
    assert len(loads) == 2


def test_a_cached_target_still_checks_each_input(db: str, flows: Path) -> None:
    with Client(db) as client:
        client.start(f"{flows}:greet", {"who": "bo"})
        with pytest.raises(InputError, match="has no input 'whom'"):
            client.start(f"{flows}:greet", {"whom": "bo"})
        assert len(client.list()) == 1


def test_a_defs_signature_is_read_once(flows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wf = workflow.load_target(f"{flows}:greet")
    calls: list[object] = []
    real = inspect.signature

    def counting(fn: Any, *a: Any, **kw: Any) -> inspect.Signature:
        calls.append(fn)
        return real(fn, *a, **kw)

    monkeypatch.setattr(inspect, "signature", counting)
    for i in range(3):
        wf.check_binds({"who": f"u{i}"})
    with pytest.raises(InputError, match=r"has no input 'nobody'"):
        wf.check_binds({"nobody": 1})
    assert len(calls) == 1
