"""YAML step-list workflows: the public entry point, and the only module that imports `yaml`.

A YAML workflow is a list of steps run in order; each executed step is one durable call,
so a crash never re-runs a finished step. `load_yaml` parses the text into a tree that
keeps every value's line and column, has it validated, and raises one ValidationError
listing every mistake as file:line:column. The other jobs live in their own modules:

    flowctl.yamlflow.schema    what a workflow may contain; validation with field paths and hints
    flowctl.yamlflow.expressions   the `${{ }}` value language, `if:` conditions, FLOWCTL_* env names
    flowctl.yamlflow.steps     the validated model, input conversion, and the handler running steps

Their public names are re-exported here, so `flowctl.yamlflow` stays the one import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flowctl.errors import TargetError, ValidationError
from flowctl.inputs import convert_value
from flowctl.yamlflow.expressions import (
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
from flowctl.yamlflow.schema import (
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
    build_workflow,
)
from flowctl.yamlflow.steps import (
    Defaults,
    FindWorkflow,
    InputSpec,
    Step,
    StepContext,
    YamlWorkflow,
    convert_inputs,
    load_callable,
    parse_sleep_until,
)
from flowctl.yamlflow.tree import Node, Problems

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
    "parse_sleep_until",
    "peek_yaml",
    "read_yaml_text",
    "shell_variable",
    "to_text",
    "truthy",
    "values_equal",
]

_STANDARD_TAG = "tag:yaml.org,2002:"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"

# A workflow is a short hand-written file: these bounds are far above any real one and far
# below what hurts. Aliases are charged by the values they expand to (a "billion laughs"
# file is a few aliases expanding to millions), nesting by depth, files by size.
MAX_YAML_BYTES = 1024 * 1024
ALIAS_BUDGET = 1000
MAX_DEPTH = 64


# ---------------------------------------------------------------------------------------
# Loading: YAML text -> position-tracking node tree


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that a workflow may not use (a tag, a costly or recursive alias)."""


class _GuardedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses every explicit tag (`!!python/...`, `!!binary`, `!x`,
    even `!!str`), recursive aliases, aliases expanding past ALIAS_BUDGET values, and
    nesting past MAX_DEPTH, each at its place, before any value is built from them."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._open_anchors: set[str] = set()
        self._sizes: dict[int, int] = {}
        self._expanded = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise _Refused(None, None, f"alias *{event.anchor} refers to itself", mark)
            node = super().compose_node(parent, index)
            self._expanded += self._size(node) if node is not None else 0
            if self._expanded > ALIAS_BUDGET:
                raise _Refused(
                    None,
                    None,
                    f"aliases expand to more than {ALIAS_BUDGET} values here; "
                    "write the values out instead of repeating *aliases",
                    mark,
                )
            return node
        tag = getattr(event, "tag", None)
        if tag is not None:
            shown = "!!" + tag.removeprefix(_STANDARD_TAG) if tag.startswith(_STANDARD_TAG) else tag
            raise _Refused(
                None,
                None,
                f"YAML tags are not allowed (found {shown}); quote the value to keep it as text",
                event.start_mark,
            )
        if self._depth >= MAX_DEPTH:
            raise _Refused(
                None, None, f"nesting is deeper than {MAX_DEPTH} levels", event.start_mark
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.discard(anchor or "")

    def _size(self, node: yaml.Node) -> int:
        """How many values `node` stands for once its aliases are expanded (memoised, so
        shared nodes are counted in linear time; no cycles: recursive aliases are refused)."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return size


def _place(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def _compose(text: str, problems: Problems) -> Node | None:
    """Parse with yaml.safe_load semantics, keeping the position of every value and key."""
    try:
        loader = _GuardedLoader(text)
    except yaml.reader.ReaderError as exc:  # control characters: checked before parsing
        line, col = _place(text, exc.position)
        problems.add(
            line,
            col,
            "yaml",
            f"character U+{int(exc.character):04X} is not allowed in YAML; remove it or write it "
            "as an escape inside double quotes",
        )
        return None
    try:
        node = loader.get_single_node()
        if node is None:
            problems.add(1, 1, "workflow", "the file is empty; expected a mapping with `steps:`")
            return None
        return _convert(node, loader, problems, 0)
    except _Refused as exc:
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problems.add(line, col, "yaml", str(exc.problem))
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


def _scalar(node: yaml.ScalarNode, loader: yaml.SafeLoader, problems: Problems) -> Any:
    """A scalar's value as safe_load builds it; a number Python refuses (over 4,300 digits)
    is a problem at its place, not a traceback."""
    try:
        return loader.construct_object(node)
    except (ValueError, OverflowError):
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        problems.add(line, col, "yaml", f"number too long ({len(node.value)} characters)")
        return None


def _convert(node: yaml.Node, loader: yaml.SafeLoader, problems: Problems, depth: int) -> Node:
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if depth > MAX_DEPTH:
        problems.add(line, col, "yaml", "nesting is too deep (a recursive alias?)")
        return Node(None, None, line, col)
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _TIMESTAMP_TAG:
            value: Any = node.value  # keep times as text; sleep_until parses them itself
        else:
            value = _scalar(node, loader, problems)
            if not isinstance(value, str | int | float | bool | type(None)):
                value = node.value
        return Node(value, node.value, line, col)
    if isinstance(node, yaml.SequenceNode):
        items = [_convert(child, loader, problems, depth + 1) for child in node.value]
        return Node(items, None, line, col)
    assert isinstance(node, yaml.MappingNode)
    explicit = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
    loader.flatten_mapping(node)
    merged = len(node.value) - explicit  # `<<: *x` pairs come first; later ones override
    mapping: dict[str, Node] = {}
    from_merge: set[str] = set()
    for position, (key_node, value_node) in enumerate(node.value):
        key_line, key_col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
        key = _scalar(key_node, loader, problems) if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a collection"
            hint = (
                "; YAML reads on/off/yes/no as true/false, so quote it"
                if key in (True, False)
                else ""
            )
            problems.add(key_line, key_col, "yaml", f"keys must be strings, got {shown!r}{hint}")
            continue
        if key in mapping and position >= merged and key not in from_merge:
            problems.add(key_line, key_col, "yaml", f"duplicate key {key!r}")
            continue
        if position < merged:
            from_merge.add(key)
        else:
            from_merge.discard(key)
        child = _convert(value_node, loader, problems, depth + 1)
        child.key_line, child.key_column = key_line, key_col
        mapping[key] = child
    return Node(mapping, None, line, col)


def load_yaml(text: str, path: str, *, find_workflow: FindWorkflow | None = None) -> YamlWorkflow:
    """Parse and validate a YAML workflow; every mistake is reported at once, with its place.

    `find_workflow` finds the workflow a `workflow:` step names by name in the file's
    folder: the loader of runnable workflows hands its own (flowctl.runtime.targets);
    without it a bare name is taken as written.
    """
    problems = Problems(path)
    if len(text) > MAX_YAML_BYTES:
        problems.add(1, 1, "yaml", f"the file is longer than {MAX_YAML_BYTES // 1024} KiB")
        raise ValidationError(problems.lines())
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
    workflow.find_workflow = find_workflow
    return workflow


def read_yaml_text(path: str | Path) -> str:
    """A workflow file's text: at most MAX_YAML_BYTES, UTF-8. Undecodable bytes are a
    ValidationError at their line:column; a missing or unreadable file a TargetError."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise TargetError(f"workflow file {path} does not exist") from None
    except OSError as exc:
        raise TargetError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_YAML_BYTES:
        raise ValidationError(
            [f"{path}:1:1: yaml: the file is longer than {MAX_YAML_BYTES // 1024} KiB"]
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise ValidationError(
            [
                f"{path}:{line}:{col}: yaml: byte 0x{data[exc.start]:02x} is not UTF-8; save the file as UTF-8"
            ]
        ) from None


def load_yaml_file(path: str | Path) -> YamlWorkflow:
    """Read and validate a YAML workflow file."""
    return load_yaml(read_yaml_text(path), str(path))


def peek_yaml(text: str, path: str) -> tuple[str | None, str]:
    """The `name:` and `description:` of a workflow, for discovery, read from the parser's
    events: nothing is composed or built, so aliases and tags elsewhere cost nothing and
    the rest of the file is never looked at once both are found. A missing `name:` gives
    the file's stem, as the full loader does; (None, "") when the name cannot be read."""
    wanted: dict[str, str | None] = {"name": None, "description": None}
    try:
        loader = _GuardedLoader(text)
    except yaml.YAMLError:
        return None, ""
    try:
        _peek_top_level(loader, wanted)
    except yaml.YAMLError:
        if wanted["name"] is None:
            return None, ""
    finally:
        loader.dispose()
    name = wanted["name"] if wanted["name"] is not None else Path(path).stem
    description = (wanted["description"] or "").strip().splitlines()
    return (name.strip() or None), (description[0] if description else "")


def _peek_top_level(loader: yaml.SafeLoader, wanted: dict[str, str | None]) -> None:
    """Fill `wanted` with the untagged scalar values of those top-level keys."""
    check: Any = loader.check_event
    get: Any = loader.get_event
    while not check(yaml.MappingStartEvent):  # stream and document start
        if check(yaml.NodeEvent, yaml.StreamEndEvent, yaml.DocumentEndEvent):
            return
        get()
    get()
    depth, expecting_key, key = 0, True, None
    while not all(v is not None for v in wanted.values()):
        event = get()
        if depth == 0 and isinstance(event, yaml.MappingEndEvent):
            return
        if depth == 0:  # the event starts a top-level key or value
            if expecting_key:
                key = event.value if isinstance(event, yaml.ScalarEvent) else None
            elif (
                key in wanted
                and wanted[key] is None
                and isinstance(event, yaml.ScalarEvent)
                and event.tag is None
            ):
                wanted[key] = event.value
            expecting_key = not expecting_key
        if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            depth += 1
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            depth -= 1
