"""Validation of YAML fan-out: a `parallel:` block's steps and a `for_each:` value,
each mistake at its file:line:column (used by flowctl.yamlflow.schema)."""

from __future__ import annotations

from typing import Any, Protocol

from flowctl.yamlflow.expressions import (
    StepRef,
    bad_expression,
    describe,
    expressions_in,
    parse_path,
    reference_problem,
)
from flowctl.yamlflow.steps import InputSpec, Step
from flowctl.yamlflow.tree import Node, to_plain

STEP_KINDS = ("run", "call", "sleep", "sleep_until", "wait_signal", "workflow", "parallel")
# The kinds a `parallel:` block holds.
BRANCH_KINDS = ("run", "call")


class Checker(Protocol):
    """What these checks use of the schema's validator."""

    inputs: dict[str, InputSpec]
    step_infos: dict[str, StepRef]
    signals: dict[str, list[int]]

    def bad(self, node: Node, where: str, message: str, *, key: bool = False) -> None: ...
    def step(self, node: Node, index: int, where: str | None = None) -> Step | None: ...
    def check_templates_in(self, node: Node, where: str, index: int) -> None: ...


def parallel_block(v: Checker, step: Step, node: Node, where: str) -> None:
    """A block of run and call steps that run concurrently, each with its own id."""
    if not node.is_list or not node.value:
        v.bad(node, where, f"expected a list of steps, got {describe(node.value)}")
        return
    branches = []
    for j, inner in enumerate(node.value):
        here = f"{where}[{j}]"
        if not inner.is_map:
            v.bad(inner, here, f"expected a mapping (one step), got {describe(inner.value)}")
            continue
        kinds = [key for key in inner.value if key in STEP_KINDS]
        if len(kinds) == 1 and kinds[0] not in BRANCH_KINDS:
            v.bad(
                inner.value[kinds[0]],
                f"{here}.{kinds[0]}",
                f"a parallel block holds run and call steps; a {kinds[0]} step runs"
                " on its own, before or after the block",
                key=True,
            )
            continue
        for refused in ("if", "for_each"):
            if refused in inner.value:
                v.bad(
                    inner.value[refused],
                    f"{here}.{refused}",
                    f"`{refused}` does not apply inside a parallel block; put it on a step"
                    " of its own",
                    key=True,
                )
        branch = v.step(inner, step.index, here)
        if branch is not None:
            branches.append(branch)
    step.value = [b.id for b in branches]
    step.branches = branches


def for_each_value(v: Checker, node: Node, where: str, index: int) -> Any:
    """A list expression (`${{ input.users }}`) or a YAML list."""
    if node.is_list:
        v.check_templates_in(node, where, index)
        return to_plain(node)
    text = node.value if isinstance(node.value, str) else None
    found = expressions_in(text) if text is not None else []
    if text is None or len(found) != 1 or found[0][0] != text.strip():
        v.bad(
            node,
            where,
            "expected a list expression like ${{ input.users }} or a YAML list, got"
            f" {node.text or describe(node.value)!r}",
        )
        return None
    path = parse_path(found[0][1])
    if path is None:
        v.bad(node, where, bad_expression(found[0][0]))
        return None
    problem = reference_problem(path, index, inputs=v.inputs, steps=v.step_infos, signals=v.signals)
    spec = v.inputs.get(path[1]) if path[0] == "input" and len(path) == 2 else None
    if problem is None and spec is not None and spec.type != "list":
        problem = f"{found[0][0]}: input {path[1]!r} is a {spec.type}, not a list"
    if problem:
        v.bad(node, where, problem)
        return None
    return text
