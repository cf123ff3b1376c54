"""Secret inputs: declared by the workflow, recorded with the run, shown as *** by ls, show,
--json and the TUI, never matched by `ls --search`, and handed to the handler unchanged.
The database itself holds them in plain text (README says so; the file is 0600)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from dbs import rows as query
from inproc import run_main

from flowctl import workflow
from flowctl.clock import FakeClock
from flowctl.errors import UsageError, ValidationError
from flowctl.model import SECRET_MASK, Run, RunStatus, mask_secrets
from flowctl.runtime.targets import load_target
from flowctl.store import open_store
from flowctl.testing import WorkflowEnvironment

SECRET = "s3cr3t-value-42"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()[:12]

FLOWS = """\
import hashlib
from flowctl import workflow

@workflow(secret_inputs=["token"])
def deploy(ctx, user: str, token: str):
    return ctx.step("use", lambda: hashlib.sha256(token.encode()).hexdigest()[:12])
"""

YAML = """\
name: deploy-yaml
input:
  user: str
  token: {type: str, secret: true}
steps:
  - id: check
    run: 'test "$FLOWCTL_INPUT_TOKEN" = "s3cr3t-value-42" && echo same'
"""


@pytest.fixture
def cli(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "deploy.yaml").write_text(YAML)

    def call(*args: str, code: int = 0) -> str:
        ran = run_main(monkeypatch, "--db", str(db), *args)
        assert ran.returncode == code, (ran.stdout, ran.stderr)
        return ran.stdout + ran.stderr

    call.db = db  # type: ignore[attr-defined]
    return call


def _stored(db: str, run_id: str) -> tuple[str, str | None]:
    ((inputs, secret_keys),) = query(
        db, "SELECT input, secret_keys FROM runs WHERE run_id = ?", (run_id,)
    )
    return inputs, secret_keys


@pytest.mark.parametrize("target", ["flows.py:deploy", "deploy.yaml"])
def test_a_secret_input_is_masked_everywhere_and_reaches_the_workflow_unchanged(
    cli: Any, target: str
) -> None:
    run = cli
    out = run("run", target, "-i", "user=ana", "-i", f"token={SECRET}", "--json")
    assert SECRET not in out
    summary = json.loads(out)
    assert summary["status"] == "completed"
    rid = summary["id"]
    if ".py:" in target:
        assert summary["result"] == DIGEST  # the handler saw the real value
    else:
        assert summary["result"]["steps"]["check"] == "same"  # so did the shell step

    shown = json.loads(run("show", rid, "--json"))
    assert shown["run"]["input"] == {"user": "ana", "token": SECRET_MASK}
    assert shown["run"]["secret_inputs"] == ["token"]
    for args in (("show", rid), ("show", rid, "--json"), ("ls",), ("ls", "--json")):
        text = run(*args)
        assert SECRET not in text, args
    assert '"token": "***"' in run("show", rid)
    listed = json.loads(run("ls", "--json"))
    assert [r["input"] for r in listed] == [{"user": "ana", "token": SECRET_MASK}]

    # The database holds the value in plain text; the run records which keys are secret.
    raw, keys = _stored(run.db, rid)
    assert json.loads(raw)["token"] == SECRET
    assert json.loads(keys or "[]") == ["token"]


def test_search_never_matches_a_secret_value(cli: Any) -> None:
    run = cli
    # Searched texts hold a "-": a run id never does, so none can match by its id.
    run("run", "flows.py:deploy", "-i", "user=ana-lee", "-i", f"token={SECRET}")
    run("run", "flows.py:deploy", "-i", f"user={SECRET}", "-i", "token=other-one")
    found = json.loads(run("ls", "--search", "s3cr3t-", "--json"))
    assert [r["input"]["user"] for r in found] == [SECRET]  # only where it is no secret
    assert json.loads(run("ls", "--search", "other-one", "--json")) == []
    by_user = json.loads(run("ls", "--search", "ana-lee", "--json"))
    assert [r["input"] for r in by_user] == [{"user": "ana-lee", "token": SECRET_MASK}]


def test_rendering_needs_no_workflow_import(cli: Any, tmp_path: Path) -> None:
    run = cli
    rid = json.loads(
        run("run", "flows.py:deploy", "-i", "user=ana", "-i", f"token={SECRET}", "--json")
    )["id"]
    (tmp_path / "flows.py").unlink()  # the keys are recorded with the run
    text = run("show", rid)
    assert SECRET not in text and "***" in text


def test_the_tui_masks_secret_inputs(tmp_path: Path, db: str) -> None:
    from textual.widgets import Static

    from flowctl.tui import FlowctlApp, RunTable

    (tmp_path / "flows.py").write_text(FLOWS)
    env = WorkflowEnvironment(db=db, cwd=tmp_path)
    rid = env.start("flows.py:deploy", {"user": "ana", "token": SECRET})
    assert env.get(rid).status is RunStatus.COMPLETED
    store = open_store(env.db)

    async def scenario() -> None:
        app = FlowctlApp(store=store, clock=env.clock, view="completed")
        async with app.run_test(size=(140, 40)) as pilot:
            table = app.query_one(RunTable)
            detail = app.query_one("#detail-text", Static)
            for _ in range(400):  # the page and the detail load in thread workers
                await pilot.pause(0.01)
                if table.row_count and "ana" in str(detail.render()):
                    break
            cell = table.get_cell(rid, "input").plain
            assert "***" in cell and SECRET not in cell
            text = str(detail.render())
            assert "***" in text and SECRET not in text

    try:
        asyncio.run(scenario())
    finally:
        store.close()
        env.close()


def test_mask_replaces_only_the_declared_keys() -> None:
    assert mask_secrets({"a": 1, "t": {"x": 2}}, ("t",)) == {"a": 1, "t": SECRET_MASK}
    assert mask_secrets({"a": 1}, ("t",)) == {"a": 1}  # an absent secret adds nothing
    assert mask_secrets({"a": 1}, ()) == {"a": 1}
    run = Run(
        "r",
        "wf",
        "t",
        "python",
        RunStatus.QUEUED,
        {"t": "x"},
        FakeClock().now(),
        secret_keys=("t",),
    )
    assert run.input == {"t": "x"} and run.to_json()["input"] == {"t": SECRET_MASK}


def test_a_secret_that_names_no_input_is_refused_when_the_workflow_is_defined() -> None:
    def deploy(ctx: object, user: str, token: str) -> None: ...

    with pytest.raises(UsageError, match="secret_inputs names 'tokn', which is not an input"):
        workflow(secret_inputs=["tokn"])(deploy)
    with pytest.raises(UsageError, match="must be a list of input names"):
        workflow(secret_inputs="token")  # type: ignore[arg-type]


def test_yaml_secret_must_be_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(YAML.replace("secret: true", "secret: maybe"))
    with pytest.raises(ValidationError) as err:
        load_target(str(path))
    assert "bad.yaml:4:" in str(err.value) and "secret" in str(err.value)
    ok = tmp_path / "ok.yaml"
    ok.write_text(YAML)
    assert load_target(str(ok)).secret_inputs == ("token",)
