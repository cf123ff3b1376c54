"""YAML parallel branches (issue 36): a `parallel:` block and `for_each:`, run by the real
engine on both stores, and `flowctl validate`'s file:line:column for their mistakes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.model import RunStatus
from flowctl.store import Store
from tests.test_yamlflow import problems

FAN = """\
name: fan
input:
  users: {type: list}
steps:
  - id: greet
    for_each: ${{ input.users }}
    max_concurrency: 2
    run: [echo, "hello ${{ item }} #${{ index }}"]
  - id: both
    parallel:
      - id: left
        run: [echo, left]
      - id: right
        run: echo "right $FLOWCTL_ITEM"
  - id: last
    run: [echo, "${{ steps.left.output }}+${{ steps.right.output }}+${{ steps.greet.output }}"]
"""

CHILD = """\
name: kid
input:
  n: {type: int}
steps:
  - id: square
    run: [python3, -c, "print(${{ input.n }} * ${{ input.n }})"]
"""

PARENT = """\
name: parent
input:
  ns: {type: list}
steps:
  - id: kids
    for_each: ${{ input.ns }}
    workflow: kid.yaml
    with: {n: "${{ item }}"}
"""


ODD = """\
name: odd
steps:
  - id: prev
    run: [echo, '{"a": 1}']
  - id: each
    for_each: ${{ steps.prev.json }}
    run: [echo, "${{ item }}"]
"""


def start(store: Store, clock: FakeClock, folder: Path, file: str, **input: object) -> str:
    return ops.start(store, str(folder / file), input, clock=clock, cwd=str(folder)).run.run_id


def test_for_each_and_a_parallel_block_run_and_name_their_outputs(
    store: Store, fake_clock: FakeClock, daemon: Daemon, tmp_path: Path
) -> None:
    (tmp_path / "fan.yaml").write_text(FAN)
    rid = start(store, fake_clock, tmp_path, "fan.yaml", users=["ana", "bo", "cy"])
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED, run.error
    steps = run.result["steps"]
    assert steps["greet"] == ["hello ana #0", "hello bo #1", "hello cy #2"]
    assert steps["left"] == "left" and steps["right"] == "right"  # no item outside a for_each
    assert steps["last"] == 'left+right+["hello ana #0","hello bo #1","hello cy #2"]'
    names = [(str(e.kind), e.name) for e in store.journal(rid).values()]
    assert names == [
        ("fanout", "greet"),
        ("step", "greet[0]"),
        ("step", "greet[1]"),
        ("step", "greet[2]"),
        ("fanout", "both"),
        ("step", "both[0]"),
        ("step", "both[1]"),
        ("step", "last"),
    ]


def test_for_each_on_a_workflow_step_starts_one_child_each(
    store: Store, fake_clock: FakeClock, daemon: Daemon, tmp_path: Path
) -> None:
    (tmp_path / "kid.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    rid = start(store, fake_clock, tmp_path, "parent.yaml", ns=[2, 3])
    for _ in range(4):
        daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.COMPLETED, run.error
    outputs = run.result["steps"]["kids"]
    assert [o["steps"]["square"] for o in outputs] == ["4", "9"]
    assert len(store.children_of(rid)) == 2


def test_a_for_each_value_that_is_not_a_list_fails_the_run_plainly(
    store: Store, fake_clock: FakeClock, daemon: Daemon, tmp_path: Path
) -> None:
    (tmp_path / "odd.yaml").write_text(ODD)
    rid = start(store, fake_clock, tmp_path, "odd.yaml")
    daemon.tick()
    run = store.get_run(rid)
    assert run.status is RunStatus.DEAD
    assert "for_each must give a list" in run.error["message"]


def test_validate_points_at_each_fan_out_mistake() -> None:
    found = problems(
        textwrap.dedent(
            """\
            input:
              who: {type: str}
            steps:
              - id: a
                for_each: users
                run: [echo, "${{ item }}"]
              - id: b
                for_each: ${{ input.who }}
                run: [echo, x]
              - id: c
                run: [echo, "${{ index }}"]
              - id: d
                parallel:
                  - id: x
                    run: [echo, 1]
                  - id: x
                    run: [echo, 2]
                  - id: w
                    wait_signal: go
              - id: e
                max_concurrency: 0
                for_each: [1, 2]
                run: [echo]
            """
        )
    )
    assert found == [
        "wf.yaml:5:15: steps[0].for_each: expected a list expression like ${{ input.users }}"
        " or a YAML list, got 'users'",
        "wf.yaml:8:15: steps[1].for_each: ${{ input.who }}: input 'who' is a str, not a list",
        "wf.yaml:11:17: steps[2].run[1]: ${{ index }}: index is known only in the values of a"
        " for_each step",
        "wf.yaml:16:13: steps[3].parallel[1].id: duplicate step id 'x';"
        " steps[3].parallel[0] already uses it",
        "wf.yaml:19:9: steps[3].parallel[2].wait_signal: a parallel block holds run and call"
        " steps; a wait_signal step runs on its own, before or after the block",
        "wf.yaml:21:22: steps[4].max_concurrency: must be at least 1, got 0",
    ]
