"""Flow control in a YAML workflow (issue 37): the top-level `concurrency:` and
`debounce:` blocks and a step's `limit:`, checked by flowctl.yamlflow.schema's validator
at file:line:column through flowctl.flow.spec (the same checks as @workflow's)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from flowctl.errors import UsageError
from flowctl.flow.spec import check_name, parse_concurrency, parse_debounce

Node = Any  # flowctl.yamlflow.schema.Node (which imports this module)


class _Validator(Protocol):
    """What of flowctl.yamlflow.schema's validator these checks use."""

    inputs: dict[str, Any]

    def bad(self, node: Node, where: str, message: str, *, key: bool = False) -> None: ...
    def string(self, node: Node, where: str, *, allow_empty: bool = False) -> str | None: ...


T = TypeVar("T")
FLOW_TOP_KEYS = ("concurrency", "debounce")
_INPUT_NAMES = re.compile(r"input\.([A-Za-z_]\w*)")


def flow_blocks(
    v: _Validator, top: dict[str, Node], plain: Callable[[Node], Any]
) -> dict[str, Any]:
    """YamlWorkflow's `concurrency` and `debounce`, checked (`plain`: a node's values)."""
    return {
        "concurrency": flow_block(v, top.get("concurrency"), plain, parse_concurrency),
        "debounce": flow_block(v, top.get("debounce"), plain, parse_debounce),
    }


def flow_block(
    v: _Validator, node: Node | None, plain: Callable[[Node], Any], parse: Callable[[Any, str], T]
) -> T | None:
    """`concurrency:` / `debounce:` parsed, its key naming declared inputs only."""
    if node is None:
        return None
    field = "concurrency" if parse is parse_concurrency else "debounce"
    try:
        parsed = parse(plain(node), field)
    except UsageError as exc:
        where, _, rest = str(exc).partition(" ")
        if where.rstrip(":").startswith(field) and rest:
            v.bad(node, where.rstrip(":"), rest)
        else:
            v.bad(node, field, str(exc))
        return None
    names = _INPUT_NAMES.findall(getattr(parsed, "key", None) or "")
    unknown = [n for n in names if v.inputs and n not in v.inputs]
    if unknown:
        inputs = ", ".join(sorted(v.inputs))
        v.bad(node, f"{field}.key", f"names input {unknown[0]!r}, not declared (inputs: {inputs})")
    return parsed


def step_limit(v: _Validator, node: Node | None, where: str, spec: dict[str, Node]) -> str | None:
    """A step's `limit: NAME` (a named limit: `flowctl limits set NAME`), if it has one; not
    on a `for_each` step (its branches run at once, outside a named limit's reach)."""
    if node is None:
        return None
    where = f"{where}.limit"
    if "for_each" in spec:
        v.bad(node, where, "`limit` does not apply to a for_each step: its branches run at once")
        return None
    name = v.string(node, where)
    if name is None:
        return None
    try:
        return check_name(name)
    except UsageError as exc:
        v.bad(node, where, str(exc))
        return None
