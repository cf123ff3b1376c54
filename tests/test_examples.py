"""Every file in examples/ and workflows/ runs to completion on a fake clock, on both stores.
Each test runs a copy of the two folders in its tmp_path: a sample writes beside its file
(workflows/onboarding.py appends to ../.flowctl/outbox.log), never into the checkout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flowctl.testing import WorkflowEnvironment
from tests.conftest import ROOT


def _targets() -> list[str]:
    out = []
    for folder in ("examples", "workflows"):
        for path in sorted((ROOT / folder).iterdir()):
            if path.suffix in (".yaml", ".yml"):
                out.append(f"{folder}/{path.name}")
            elif path.suffix == ".py" and not path.name.startswith("_"):
                text = path.read_text()
                for line in text.splitlines():
                    if line.startswith("def ") and "(ctx" in line:
                        out.append(f"{folder}/{path.name}:{line[4 : line.index('(')]}")
    return out


INPUTS = {
    "workflows/followup.yaml": {"user": "42"},
    "workflows/onboarding.py:onboarding": {"user": "42"},
    "examples/quote.py:quote": {"fail_rate": 0.0},
    "examples/digest.yaml": {"user": "zed"},
}
# The named limits an example's steps take (flowctl limits set NAME ...): name, concurrency,
# (N, period in µs).
LIMITS = {"examples/paced.py:paced": [("mail", 5, (100, 60_000_000))]}


def test_every_example_is_covered() -> None:
    targets = _targets()
    assert "examples/hello.py:hello" in targets
    assert any(t.endswith(".yaml") for t in targets)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of examples/ and workflows/, as `flowctl init --example` gives a project."""
    for folder in ("examples", "workflows"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def _outbox(folder: Path) -> str | None:
    path = folder / ".flowctl" / "outbox.log"
    return path.read_text() if path.exists() else None


@pytest.mark.parametrize("target", _targets())
def test_example_runs_to_completion(db: str, target: str, project: Path) -> None:
    checkout = _outbox(ROOT)
    with WorkflowEnvironment(db=db, cwd=project) as env:
        for name, concurrency, rate in LIMITS.get(target, []):
            env.store.set_limit(name, concurrency, rate, env.clock.now())
        run_id = env.start(target, INPUTS.get(target, {}))
        for _ in range(20):  # sleeps and signal timeouts pass on the fake clock
            run = env.get(run_id)
            if run.status.is_terminal:
                break
            if run.run_at is None:
                env.signal(run_id, "approved", {"by": "test"})
                continue
            env.clock.set(max(env.clock.now(), run.run_at))
            env.run_due()
        run = env.get(run_id)
        assert run.status == "completed", (run.status, run.error)
    assert _outbox(ROOT) == checkout  # the checkout's .flowctl/outbox.log is left alone
    if target == "workflows/onboarding.py:onboarding":
        assert _outbox(project) == "welcome -> user 42\ntips -> user 42\ncheck-in -> user 42\n"


def test_hello_result_and_durable_sleep(db: str, project: Path) -> None:
    with WorkflowEnvironment(db=db, cwd=project) as env:
        run_id = env.start("examples/hello.py:hello", {"name": "ana"})
        assert env.get(run_id).status == "sleeping"
        env.advance("1999ms")
        assert env.get(run_id).status == "sleeping"
        env.advance("1ms")
        run = env.get(run_id)
        assert run.status == "completed"
        assert run.result == {"greeting": "hello, ana", "loud": "HELLO, ANA!"}


def test_followup_python_example_respects_the_reply(db: str, project: Path) -> None:
    with WorkflowEnvironment(db=db, cwd=project) as env:
        replied = env.start("examples/followup.py:followup", {"user": "7"})
        assert env.get(replied).status == "waiting"
        env.signal(replied, "replied", {"text": "thanks"})
        assert env.get(replied).result == {
            "user": "7",
            "followed_up": False,
            "reply": {"text": "thanks"},
        }
        silent = env.start("examples/followup.py:followup", {"user": "8"})
        env.advance("72h")
        assert env.get(silent).result == {"user": "8", "followed_up": True}
