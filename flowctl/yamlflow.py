"""YAML step-list workflows: the public entry point, and the only module that imports `yaml`.

A YAML workflow is a list of steps run in order; each executed step is one durable call,
so a crash never re-runs a finished step. `load_yaml` parses the text into a tree that
keeps every value's line and column, has it validated, and raises one ValidationError
listing every mistake as file:line:column. The other jobs live in their own modules:

    flowctl.yamlschema    what a workflow may contain; validation with field paths and hints
    flowctl.expressions   the `${{ }}` value language, `if:` conditions, FLOWCTL_* env names
    flowctl.yamlsteps     the validated model, input conversion, and the handler running steps

Their public names are re-exported here, so `flowctl.yamlflow` stays the one import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flowctl.errors import UsageError, ValidationError
from flowctl.expressions import (
    DEEP_ATTRS,
    STEP_ATTRS,
    Condition,
    ExpressionError,
    Term,
    describe,
    env_name,
    parse_condition,
    parse_path,
    shell_variable,
    to_text,
    truthy,
    values_equal,
)
from flowctl.yamlschema import (
    DEFAULTS_KEYS,
    INPUT_KEYS,
    INPUT_TYPES,
    KIND_OPTIONS,
    ON_TIMEOUT,
    RETRY_KEYS,
    STEP_KEYS,
    STEP_KINDS,
    STEP_OPTIONS,
    TOP_KEYS,
    Node,
    Problems,
    build_workflow,
)
from flowctl.yamlsteps import (
    Defaults,
    InputSpec,
    Step,
    StepContext,
    YamlWorkflow,
    convert_inputs,
    convert_value,
    load_callable,
    parse_when,
)

__all__ = [
    "DEEP_ATTRS",
    "DEFAULTS_KEYS",
    "INPUT_KEYS",
    "INPUT_TYPES",
    "KIND_OPTIONS",
    "ON_TIMEOUT",
    "RETRY_KEYS",
    "STEP_ATTRS",
    "STEP_KEYS",
    "STEP_KINDS",
    "STEP_OPTIONS",
    "TOP_KEYS",
    "Condition",
    "Defaults",
    "ExpressionError",
    "InputSpec",
    "Step",
    "StepContext",
    "Term",
    "YamlWorkflow",
    "convert_inputs",
    "convert_value",
    "env_name",
    "load_callable",
    "load_yaml",
    "load_yaml_file",
    "parse_condition",
    "parse_path",
    "parse_when",
    "shell_variable",
    "to_text",
    "truthy",
    "values_equal",
]

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


# ---------------------------------------------------------------------------------------
# Loading: YAML text -> position-tracking node tree


def _compose(text: str, problems: Problems) -> Node | None:
    """Parse with yaml.safe_load semantics, keeping the position of every value and key."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            problems.add(1, 1, "workflow", "the file is empty; expected a mapping with `steps:`")
            return None
        return _convert(node, loader, problems, 0)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = exc.problem or exc.context or " ".join(str(exc).split())
        if exc.problem and exc.context:
            where = exc.context_mark
            at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
            message = f"{exc.problem} ({exc.context}{at})"
        lines = text.splitlines()
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        if exc.context == "while scanning a tag":
            message += '; quote a value that starts with ! (like "!${{ input.flag }}")'
        elif "${{" in source:
            message += "; put a value containing ${{ }} in quotes"
        problems.add(line, col, "yaml", f"syntax error: {message}")
    except yaml.YAMLError as exc:
        problems.add(1, 1, "yaml", f"syntax error: {' '.join(str(exc).split())}")
    finally:
        loader.dispose()
    return None


def _convert(node: yaml.Node, loader: yaml.SafeLoader, problems: Problems, depth: int) -> Node:
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if depth > 64:
        problems.add(line, col, "yaml", "nesting is too deep (a recursive alias?)")
        return Node(None, None, line, col)
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _TIMESTAMP_TAG:
            value: Any = node.value  # keep times as text; sleep_until parses them itself
        else:
            value = loader.construct_object(node)
            if not isinstance(value, str | int | float | bool | type(None)):
                value = node.value
        return Node(value, node.value, line, col)
    if isinstance(node, yaml.SequenceNode):
        items = [_convert(child, loader, problems, depth + 1) for child in node.value]
        return Node(items, None, line, col)
    assert isinstance(node, yaml.MappingNode)
    loader.flatten_mapping(node)
    mapping: dict[str, Node] = {}
    for key_node, value_node in node.value:
        key_line, key_col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
        key = loader.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a collection"
            hint = (
                "; YAML reads on/off/yes/no as true/false, so quote it"
                if key in (True, False)
                else ""
            )
            problems.add(key_line, key_col, "yaml", f"keys must be strings, got {shown!r}{hint}")
            continue
        if key in mapping:
            problems.add(key_line, key_col, "yaml", f"duplicate key {key!r}")
            continue
        child = _convert(value_node, loader, problems, depth + 1)
        child.key_line, child.key_column = key_line, key_col
        mapping[key] = child
    return Node(mapping, None, line, col)


def load_yaml(text: str, path: str) -> YamlWorkflow:
    """Parse and validate a YAML workflow; every mistake is reported at once, with its place."""
    problems = Problems(path)
    root = _compose(text, problems)
    if root is not None and not root.is_map:
        problems.at(
            root, "workflow", f"expected a mapping with `steps:`, got {describe(root.value)}"
        )
    if root is None or not root.is_map or problems.items:
        raise ValidationError(problems.lines())
    workflow = build_workflow(root, problems, path, text)
    if problems.items:
        raise ValidationError(problems.lines())
    return workflow


def load_yaml_file(path: str | Path) -> YamlWorkflow:
    """Read and validate a YAML workflow file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    return load_yaml(text, str(path))
