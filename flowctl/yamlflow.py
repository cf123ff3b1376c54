"""YAML step-list workflows: load and validate them (file:line:column), convert inputs, run steps.

A YAML workflow is a list of steps run in order. Each executed step is one durable call,
so a crash never re-runs a finished step. Values flow between steps through a tiny
substitution language (dotted paths, no code):

    ${{ input.NAME }}               a declared input
    ${{ steps.ID.output }}          a run step's stdout (trimmed), or a call/workflow result
    ${{ steps.ID.json.a.b }}        a run step's stdout parsed as JSON, then looked up
    ${{ steps.ID.exit_code }}       a run step's exit code
    ${{ signal.NAME.field }}        the payload of the last `wait_signal: NAME` step

Shell strings never get values pasted into their text: values are exported to every run
step as environment variables instead (see `env_name`):

    FLOWCTL_RUN_ID, FLOWCTL_WORKFLOW
    FLOWCTL_INPUT_<NAME>            each input
    FLOWCTL_STEP_<ID>_OUTPUT        each earlier step's output (JSON text when not a string)
    FLOWCTL_STEP_<ID>_EXIT_CODE     each earlier run step's exit code
    FLOWCTL_SIGNAL_<NAME>           each received signal's payload, as JSON
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import yaml

from flowctl.commands import run_command
from flowctl.durations import parse_duration
from flowctl.errors import (
    DurableCallError,
    DurationError,
    FlowctlError,
    InputError,
    NonDeterminismError,
    StepFailedError,
    UsageError,
    ValidationError,
)
from flowctl.retry import NO_RETRY, RetryPolicy, StepOptions, with_options

INPUT_TYPES = ("str", "int", "float", "bool", "list", "dict")
STEP_KINDS = ("run", "call", "sleep", "sleep_until", "wait_signal", "workflow")
TOP_KEYS = (
    "name",
    "description",
    "input",
    "env",
    "defaults",
    "schedule",
    "max_attempts",
    "steps",
)
STEP_OPTIONS = ("retry", "timeout", "env", "cwd", "continue_on_error", "with", "on_timeout")
STEP_KEYS = (*STEP_KINDS, "id", "if", *STEP_OPTIONS)
# Which options each step kind takes (`id` and `if` are taken by every kind).
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "run": ("retry", "timeout", "env", "cwd", "continue_on_error"),
    "call": ("with", "retry", "timeout", "continue_on_error"),
    "sleep": (),
    "sleep_until": (),
    "wait_signal": ("timeout", "on_timeout"),
    "workflow": ("with", "continue_on_error"),
}
INPUT_KEYS = ("type", "default", "required", "description")
RETRY_KEYS = ("max_attempts", "backoff", "multiplier", "max_backoff", "jitter")
DEFAULTS_KEYS = ("retry", "timeout")
ON_TIMEOUT = ("fail", "continue")
# What `${{ steps.ID.<attr> }}` may name, per step kind, and which attrs allow deeper paths.
STEP_ATTRS: dict[str, tuple[str, ...]] = {
    "run": ("output", "json", "exit_code", "failed", "error", "skipped"),
    "call": ("output", "json", "failed", "error", "skipped"),
    "workflow": ("output", "json", "failed", "error", "skipped"),
    "wait_signal": ("output", "json", "skipped"),
}
DEEP_ATTRS: dict[str, tuple[str, ...]] = {
    "run": ("json",),
    "call": ("output", "json"),
    "workflow": ("output", "json"),
    "wait_signal": ("output", "json"),
}
_TYPE_ALIASES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "mapping": "dict",
}
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"

_STEP_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
_INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIGNAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_CALLABLE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_WHOLE_EXPR = re.compile(r"\s*\$\{\{(.*?)\}\}\s*", re.DOTALL)
_PATH = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_FALSE_WORDS = frozenset({"", "false", "0", "no", "off", "null"})
_TRUE_INPUT = frozenset({"true", "1", "yes", "y", "on"})
_FALSE_INPUT = frozenset({"false", "0", "no", "n", "off"})


class ExpressionError(FlowctlError):
    """A `${{ }}` value that cannot be resolved while the workflow runs."""


class StepContext(Protocol):
    """The part of the replay Context a YAML workflow uses."""

    run_id: str
    workflow: str
    cwd: str | None

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    def sleep(self, duration: Any) -> None: ...
    def sleep_until(self, when: datetime | float) -> None: ...
    def wait_signal(self, name: str, timeout: Any = None, **kwargs: Any) -> Any: ...
    def child(self, target: str, input: dict[str, Any] | None = None) -> Any: ...
    def check(self) -> None: ...
    def interruption(self) -> BaseException | None: ...


# ---------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class InputSpec:
    """One declared input: its type, whether it must be given, and its default."""

    name: str
    type: str = "str"
    required: bool = True
    default: Any = None
    description: str = ""


@dataclass(frozen=True)
class Defaults:
    """Step options that apply to every run/call step unless the step says otherwise."""

    retry: dict[str, Any] | None = None
    timeout: timedelta | None = None


@dataclass(frozen=True)
class Term:
    """One side of a condition: a dotted path or a literal."""

    path: tuple[str, ...] | None = None
    literal: Any = None


@dataclass(frozen=True)
class Condition:
    """A parsed `if:`: `[!] term [(== | !=) term]` (see `parse_condition`)."""

    text: str
    left: Term
    op: str | None = None
    right: Term | None = None
    negate: bool = False


@dataclass
class Step:
    """One validated step. `value` is the kind's own value (argv, target, duration, ...)."""

    id: str
    kind: str
    value: Any
    index: int
    line: int
    auto_id: bool = False
    with_: Any = None
    retry: dict[str, Any] | None = None
    timeout: timedelta | None = None
    condition: Condition | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    continue_on_error: bool = False
    on_timeout: str = "fail"

    @property
    def has_output(self) -> bool:
        return self.kind in STEP_ATTRS


@dataclass
class YamlWorkflow:
    """A loaded, validated YAML workflow; `handler` runs it under a replay Context."""

    name: str
    description: str
    path: str
    text: str
    sha256: str
    inputs: dict[str, InputSpec]
    steps: list[Step]
    env: dict[str, str] = field(default_factory=dict)
    defaults: Defaults = field(default_factory=Defaults)
    schedule: Any = None
    max_attempts: int | None = None

    def handler(self, ctx: StepContext, /, **input: Any) -> dict[str, Any]:
        """Run the steps in order; each executed step is one durable call."""
        return _Runner(self, ctx, convert_inputs(self, input)).run()

    def step_options(self, step: Step) -> StepOptions:
        """The step's retry/timeout merged over the workflow's `defaults`."""
        retry = _merged_retry(self.defaults.retry, step.retry)
        policy = RetryPolicy.make(**retry) if retry is not None else NO_RETRY
        timeout = step.timeout if step.timeout is not None else self.defaults.timeout
        if step.kind not in ("run", "call"):
            timeout = None
        return StepOptions(retry=policy, timeout=timeout)


def env_name(*parts: str) -> str:
    """FLOWCTL_<PARTS>: upper-cased, every non-alphanumeric character turned into `_`."""
    return "FLOWCTL_" + "_".join(re.sub(r"[^A-Za-z0-9]", "_", p).upper() for p in parts)


# ---------------------------------------------------------------------------------------
# Loading: YAML text -> position-tracking node tree


@dataclass
class _Node:
    value: Any  # dict[str, _Node] | list[_Node] | a scalar
    text: str | None  # a scalar's source text
    line: int
    column: int
    key_line: int = 0
    key_column: int = 0

    @property
    def is_map(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_list(self) -> bool:
        return isinstance(self.value, list)


class _Problems:
    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[tuple[int, int, str, str]] = []

    def add(self, line: int, column: int, where: str, message: str) -> None:
        self.items.append((line, column, where, message))

    def at(self, node: _Node, where: str, message: str, *, key: bool = False) -> None:
        if key and node.key_line:
            self.add(node.key_line, node.key_column, where, message)
        else:
            self.add(node.line, node.column, where, message)

    def lines(self) -> list[str]:
        ordered = sorted(self.items, key=lambda item: (item[0], item[1]))
        return [f"{self.path}:{line}:{col}: {where}: {msg}" for line, col, where, msg in ordered]


def _compose(text: str, problems: _Problems) -> _Node | None:
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


def _convert(node: yaml.Node, loader: yaml.SafeLoader, problems: _Problems, depth: int) -> _Node:
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if depth > 64:
        problems.add(line, col, "yaml", "nesting is too deep (a recursive alias?)")
        return _Node(None, None, line, col)
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _TIMESTAMP_TAG:
            value: Any = node.value  # keep times as text; sleep_until parses them itself
        else:
            value = loader.construct_object(node)
            if not isinstance(value, str | int | float | bool | type(None)):
                value = node.value
        return _Node(value, node.value, line, col)
    if isinstance(node, yaml.SequenceNode):
        items = [_convert(child, loader, problems, depth + 1) for child in node.value]
        return _Node(items, None, line, col)
    assert isinstance(node, yaml.MappingNode)
    loader.flatten_mapping(node)
    mapping: dict[str, _Node] = {}
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
    return _Node(mapping, None, line, col)


def _plain(node: _Node) -> Any:
    """The node tree as plain JSON-like Python values."""
    if node.is_map:
        return {key: _plain(child) for key, child in node.value.items()}
    if node.is_list:
        return [_plain(child) for child in node.value]
    return node.value


# ---------------------------------------------------------------------------------------
# Validation


def load_yaml(text: str, path: str) -> YamlWorkflow:
    """Parse and validate a YAML workflow; every mistake is reported at once, with its place."""
    problems = _Problems(path)
    root = _compose(text, problems)
    if root is not None and not root.is_map:
        problems.at(root, "workflow", f"expected a mapping with `steps:`, got {_kind(root.value)}")
    if root is None or not root.is_map or problems.items:
        raise ValidationError(problems.lines())
    workflow = _Validator(problems, path, text).workflow(root)
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


@dataclass
class _StepInfo:
    id: str
    kind: str | None
    index: int
    signal: str | None = None


class _Validator:
    def __init__(self, problems: _Problems, path: str, text: str) -> None:
        self.problems = problems
        self.path = path
        self.text = text
        self.inputs: dict[str, InputSpec] = {}
        self.step_infos: dict[str, _StepInfo] = {}
        self.signals: dict[str, list[int]] = {}
        self.default_retry: dict[str, Any] | None = None

    # -- small helpers ------------------------------------------------------------------

    def bad(self, node: _Node, where: str, message: str, *, key: bool = False) -> None:
        self.problems.at(node, where, message, key=key)

    def check_keys(self, node: _Node, allowed: tuple[str, ...], where: str) -> None:
        for key, child in node.value.items():
            if key in allowed:
                continue
            here = f"{where}.{key}" if where else key
            hint = _did_you_mean(key, allowed)
            extra = hint or f"; allowed: {', '.join(allowed)}"
            self.bad(child, here, f"unknown key {key!r}{extra}", key=True)

    def string(self, node: _Node, where: str, *, allow_empty: bool = False) -> str | None:
        if not isinstance(node.value, str):
            self.bad(node, where, f"expected a string, got {_kind(node.value)}")
            return None
        if not allow_empty and not node.value.strip():
            self.bad(node, where, "must not be empty")
            return None
        return node.value

    def no_expression(self, node: _Node, where: str, what: str) -> bool:
        if isinstance(node.value, str) and "${{" in node.value:
            self.bad(node, where, f"{what} must be fixed text; `${{{{ }}}}` is not allowed here")
            return False
        return True

    def duration(self, node: _Node, where: str) -> timedelta | None:
        if isinstance(node.value, bool) or not isinstance(node.value, str | int | float):
            self.bad(node, where, f"expected a duration like 30s or 5m, got {_kind(node.value)}")
            return None
        if not self.no_expression(node, where, "a duration"):
            return None
        try:
            value = parse_duration(node.value)
        except DurationError as exc:
            self.bad(node, where, str(exc))
            return None
        if value <= timedelta(0):
            self.bad(node, where, f"must be longer than zero, got {node.text!r}")
            return None
        return value

    def integer(self, node: _Node, where: str, minimum: int) -> int | None:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            self.bad(node, where, f"expected a whole number, got {_kind(node.value)}")
            return None
        if node.value < minimum:
            self.bad(node, where, f"must be at least {minimum}, got {node.value}")
            return None
        return node.value

    def number(self, node: _Node, where: str, low: float, high: float | None) -> float | None:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            self.bad(node, where, f"expected a number, got {_kind(node.value)}")
            return None
        if node.value < low or (high is not None and node.value > high):
            bounds = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
            self.bad(node, where, f"must be {bounds}, got {node.value}")
            return None
        return float(node.value)

    def boolean(self, node: _Node, where: str) -> bool | None:
        if not isinstance(node.value, bool):
            self.bad(node, where, f"expected true or false, got {_kind(node.value)}")
            return None
        return node.value

    # -- the workflow -------------------------------------------------------------------

    def workflow(self, root: _Node) -> YamlWorkflow:
        top: dict[str, _Node] = root.value
        self.check_keys(root, TOP_KEYS, "")
        name = Path(self.path).stem
        if "name" in top:
            given = self.string(top["name"], "name")
            if given is not None and self.no_expression(top["name"], "name", "the name"):
                if len(given.splitlines()) > 1:
                    self.bad(top["name"], "name", "must be one line")
                name = given.strip()
        description = ""
        if "description" in top:
            description = self.string(top["description"], "description", allow_empty=True) or ""
        if "input" in top:
            self.input_block(top["input"])
        env = self.env_block(top["env"], "env", None) if "env" in top else {}
        defaults = self.defaults_block(top["defaults"]) if "defaults" in top else Defaults()
        schedule = None
        if "schedule" in top:
            schedule = self.schedule_block(top["schedule"])
        max_attempts = None
        if "max_attempts" in top:
            max_attempts = self.integer(top["max_attempts"], "max_attempts", 1)
        steps: list[Step] = []
        if "steps" not in top:
            self.bad(root, "steps", "missing `steps:` (a list of steps)")
        else:
            steps = self.steps_block(top["steps"])
        return YamlWorkflow(
            name=name,
            description=description,
            path=self.path,
            text=self.text,
            sha256=hashlib.sha256(self.text.encode("utf-8")).hexdigest(),
            inputs=self.inputs,
            steps=steps,
            env=env,
            defaults=defaults,
            schedule=schedule,
            max_attempts=max_attempts,
        )

    def input_block(self, node: _Node) -> None:
        if not node.is_map:
            self.bad(node, "input", f"expected a mapping of input names, got {_kind(node.value)}")
            return
        seen_env: dict[str, str] = {}
        for name, spec_node in node.value.items():
            where = f"input.{name}"
            if not _INPUT_NAME.fullmatch(name):
                self.bad(
                    spec_node,
                    where,
                    f"invalid input name {name!r}: use letters, digits and _ (not first a digit)",
                    key=True,
                )
                continue
            variable = env_name("input", name)
            if variable in seen_env:
                self.bad(
                    spec_node,
                    where,
                    f"input {name!r} and input {seen_env[variable]!r} would both be "
                    f"exported as ${variable}; rename one",
                    key=True,
                )
            seen_env[variable] = name
            spec = self.input_spec(name, spec_node, where)
            if spec is not None:
                self.inputs[name] = spec

    def input_type(self, node: _Node, where: str) -> str | None:
        if not isinstance(node.value, str):
            allowed = ", ".join(INPUT_TYPES)
            self.bad(node, where, f"expected a type ({allowed}), got {_kind(node.value)}")
            return None
        if node.value in INPUT_TYPES:
            return node.value
        alias = _TYPE_ALIASES.get(node.value.lower())
        hint = f" (did you mean {alias!r}?)" if alias else _did_you_mean(node.value, INPUT_TYPES)
        self.bad(node, where, f"unknown type {node.value!r}{hint}; types: {', '.join(INPUT_TYPES)}")
        return None

    def input_spec(self, name: str, node: _Node, where: str) -> InputSpec | None:
        if not node.is_map:
            kind = self.input_type(node, where)
            return InputSpec(name=name, type=kind) if kind else None
        spec: dict[str, _Node] = node.value
        self.check_keys(node, INPUT_KEYS, where)
        kind = "str"
        if "type" in spec:
            found = self.input_type(spec["type"], f"{where}.type")
            if found is None:
                return None
            kind = found
        description = ""
        if "description" in spec:
            text = self.string(spec["description"], f"{where}.description", allow_empty=True)
            description = text or ""
        has_default = "default" in spec
        default = None
        if has_default:
            raw = _plain(spec["default"])
            if raw is not None:
                try:
                    default = convert_value(name, kind, raw)
                except InputError as exc:
                    self.bad(spec["default"], f"{where}.default", str(exc))
                    return None
        required = not has_default
        if "required" in spec:
            flag = self.boolean(spec["required"], f"{where}.required")
            if flag is None:
                return None
            if flag and has_default:
                self.bad(
                    spec["required"],
                    f"{where}.required",
                    "an input with a default is not required; drop `required` or `default`",
                )
            required = flag
        return InputSpec(
            name=name, type=kind, required=required, default=default, description=description
        )

    def env_block(self, node: _Node, where: str, index: int | None) -> dict[str, str]:
        if not node.is_map:
            self.bad(node, where, f"expected a mapping of NAME: value, got {_kind(node.value)}")
            return {}
        env: dict[str, str] = {}
        for key, child in node.value.items():
            here = f"{where}.{key}"
            if not _ENV_NAME.fullmatch(key):
                self.bad(child, here, f"invalid environment variable name {key!r}", key=True)
                continue
            if key.upper().startswith("FLOWCTL_"):
                self.bad(child, here, "names starting with FLOWCTL_ are reserved", key=True)
                continue
            if child.is_map or child.is_list or child.value is None:
                self.bad(child, here, f"expected a string, got {_kind(child.value)}")
                continue
            text = child.value if isinstance(child.value, str) else str(child.text)
            self.check_template(child, here, text, index)
            env[key] = text
        return env

    def retry_block(self, node: _Node, where: str) -> dict[str, Any] | None:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            count = self.integer(node, where, 1)
            return {"max_attempts": count} if count is not None else None
        if not node.is_map:
            self.bad(
                node,
                where,
                f"expected a number of attempts or a mapping ({', '.join(RETRY_KEYS)}), "
                f"got {_kind(node.value)}",
            )
            return None
        self.check_keys(node, RETRY_KEYS, where)
        spec: dict[str, _Node] = node.value
        retry: dict[str, Any] = {}
        ok = True
        for key, child in spec.items():
            here = f"{where}.{key}"
            value: Any = None
            if key == "max_attempts":
                value = self.integer(child, here, 1)
            elif key in ("backoff", "max_backoff"):
                value = self.duration(child, here)
            elif key == "multiplier":
                value = self.number(child, here, 1, None)
            elif key == "jitter":
                value = self.number(child, here, 0, 1)
            else:
                continue
            if value is None:
                ok = False
            else:
                retry[key] = value
        return retry if ok else None

    def defaults_block(self, node: _Node) -> Defaults:
        if not node.is_map:
            self.bad(node, "defaults", f"expected a mapping, got {_kind(node.value)}")
            return Defaults()
        self.check_keys(node, DEFAULTS_KEYS, "defaults")
        spec: dict[str, _Node] = node.value
        retry = self.retry_block(spec["retry"], "defaults.retry") if "retry" in spec else None
        timeout = self.duration(spec["timeout"], "defaults.timeout") if "timeout" in spec else None
        self.default_retry = retry
        return Defaults(retry=retry, timeout=timeout)

    def schedule_block(self, node: _Node) -> Any:
        items = node.value if node.is_list else [node]
        for i, item in enumerate(items):
            if not item.is_map:
                where = f"schedule[{i}]" if node.is_list else "schedule"
                self.bad(item, where, f"expected a mapping, got {_kind(item.value)}")
        return _plain(node)

    # -- steps --------------------------------------------------------------------------

    def steps_block(self, node: _Node) -> list[Step]:
        if not node.is_list:
            self.bad(node, "steps", f"expected a list of steps, got {_kind(node.value)}")
            return []
        if not node.value:
            self.bad(node, "steps", "needs at least one step")
            return []
        self.collect_ids(node.value)
        steps = []
        for index, step_node in enumerate(node.value):
            step = self.step(step_node, index)
            if step is not None:
                steps.append(step)
        return steps

    def collect_ids(self, nodes: list[_Node]) -> None:
        """First pass: every step's id, kind and signal, so references can be checked."""
        seen_env: dict[str, str] = {}
        for index, node in enumerate(nodes):
            where = f"steps[{index}]"
            if not node.is_map:
                continue
            spec: dict[str, _Node] = node.value
            kinds = [key for key in spec if key in STEP_KINDS]
            kind = kinds[0] if len(kinds) == 1 else None
            step_id = f"step-{index + 1}"
            id_node = spec.get("id")
            if id_node is not None:
                given = self.string(id_node, f"{where}.id")
                if given is None:
                    continue
                if not _STEP_ID.fullmatch(given):
                    self.bad(
                        id_node,
                        f"{where}.id",
                        f"invalid step id {given!r}: use letters, digits, _ and - (at most 64)",
                    )
                    continue
                step_id = given
            if step_id in self.step_infos:
                first = self.step_infos[step_id].index
                auto = "" if id_node is not None else " (the automatic id of this step)"
                self.bad(
                    id_node or node,
                    f"{where}.id",
                    f"duplicate step id {step_id!r}{auto}; steps[{first}] already uses it",
                )
                continue
            variable = env_name("step", step_id)
            if variable in seen_env:
                self.bad(
                    id_node or node,
                    f"{where}.id",
                    f"step ids {step_id!r} and {seen_env[variable]!r} would share the "
                    f"environment variables {variable}_*; rename one",
                )
            seen_env[variable] = step_id
            signal = None
            if kind == "wait_signal" and isinstance(spec["wait_signal"].value, str):
                signal = spec["wait_signal"].value
                self.signals.setdefault(signal, []).append(index)
            self.step_infos[step_id] = _StepInfo(step_id, kind, index, signal)

    def step(self, node: _Node, index: int) -> Step | None:
        where = f"steps[{index}]"
        if not node.is_map:
            self.bad(node, where, f"expected a mapping (one step), got {_kind(node.value)}")
            return None
        spec: dict[str, _Node] = node.value
        self.check_keys(node, STEP_KEYS, where)
        kinds = [key for key in spec if key in STEP_KINDS]
        if not kinds:
            self.bad(node, where, f"a step needs one of: {', '.join(STEP_KINDS)}")
            return None
        if len(kinds) > 1:
            self.bad(
                spec[kinds[1]],
                f"{where}.{kinds[1]}",
                f"a step takes exactly one of {', '.join(STEP_KINDS)}; "
                f"this one has {' and '.join(kinds)}",
                key=True,
            )
            return None
        kind = kinds[0]
        for option in STEP_OPTIONS:
            if option in spec and option not in KIND_OPTIONS[kind]:
                takers = [k for k, opts in KIND_OPTIONS.items() if option in opts]
                self.bad(
                    spec[option],
                    f"{where}.{option}",
                    f"`{option}` does not apply to {kind} steps (only to {' and '.join(takers)})",
                    key=True,
                )
        step_id = f"step-{index + 1}"
        if "id" in spec and isinstance(spec["id"].value, str):
            step_id = spec["id"].value
        step = Step(
            id=step_id,
            kind=kind,
            value=None,
            index=index,
            line=node.line,
            auto_id="id" not in spec,
        )
        getattr(self, f"kind_{kind}")(step, spec[kind], f"{where}.{kind}")
        self.step_options(step, spec, where)
        return step

    def step_options(self, step: Step, spec: dict[str, _Node], where: str) -> None:
        index = step.index
        applies = KIND_OPTIONS[step.kind]
        if "if" in spec:
            step.condition = self.condition(spec["if"], f"{where}.if", index)
        if "retry" in spec and "retry" in applies:
            step.retry = self.retry_block(spec["retry"], f"{where}.retry")
            merged = _merged_retry(self.default_retry, step.retry)
            if merged is not None:
                try:
                    RetryPolicy.make(**merged)
                except UsageError as exc:
                    self.bad(spec["retry"], f"{where}.retry", str(exc))
        if "timeout" in spec and "timeout" in applies:
            step.timeout = self.duration(spec["timeout"], f"{where}.timeout")
        if "env" in spec and "env" in applies:
            step.env = self.env_block(spec["env"], f"{where}.env", index)
        if "cwd" in spec and "cwd" in applies:
            cwd = self.string(spec["cwd"], f"{where}.cwd")
            if cwd is not None:
                self.check_template(spec["cwd"], f"{where}.cwd", cwd, index)
                step.cwd = cwd
        if "continue_on_error" in spec and "continue_on_error" in applies:
            flag = self.boolean(spec["continue_on_error"], f"{where}.continue_on_error")
            step.continue_on_error = bool(flag)
        if "with" in spec and "with" in applies:
            step.with_ = self.with_block(spec["with"], f"{where}.with", index, step.kind)
        if "on_timeout" in spec and "on_timeout" in applies:
            node = spec["on_timeout"]
            if node.value not in ON_TIMEOUT:
                hint = _did_you_mean(str(node.value), ON_TIMEOUT)
                self.bad(
                    node,
                    f"{where}.on_timeout",
                    f"expected fail or continue, got {node.text or _kind(node.value)!r}{hint}",
                )
            else:
                step.on_timeout = node.value
                if node.value == "continue" and "timeout" not in spec:
                    self.bad(
                        node, f"{where}.on_timeout", "`on_timeout` needs a `timeout` to act on"
                    )

    def with_block(self, node: _Node, where: str, index: int, kind: str) -> Any:
        if not node.is_map:
            self.bad(node, where, f"expected a mapping of arguments, got {_kind(node.value)}")
            return None
        for key, child in node.value.items():
            if kind == "call" and not key.isidentifier():
                self.bad(
                    child, f"{where}.{key}", f"{key!r} is not a Python argument name", key=True
                )
            self.check_templates_in(child, f"{where}.{key}", index)
        return _plain(node)

    def check_templates_in(self, node: _Node, where: str, index: int) -> None:
        if node.is_map:
            for key, child in node.value.items():
                self.check_templates_in(child, f"{where}.{key}", index)
        elif node.is_list:
            for i, child in enumerate(node.value):
                self.check_templates_in(child, f"{where}[{i}]", index)
        elif isinstance(node.value, str):
            self.check_template(node, where, node.value, index)

    # -- step kinds ---------------------------------------------------------------------

    def kind_run(self, step: Step, node: _Node, where: str) -> None:
        if isinstance(node.value, str):
            if not node.value.strip():
                self.bad(node, where, "the command must not be empty")
                return
            for match in _EXPR.finditer(node.value):
                self.shell_expression(node, where, match.group(0), match.group(1))
            step.value = node.value
            return
        if not node.is_list:
            self.bad(
                node,
                where,
                f"expected a list of arguments (no shell) or a shell string, got {_kind(node.value)}",
            )
            return
        if not node.value:
            self.bad(node, where, "the argument list must not be empty")
            return
        argv: list[str] = []
        for i, item in enumerate(node.value):
            here = f"{where}[{i}]"
            if item.is_map or item.is_list or item.value is None:
                self.bad(item, here, f"each argument must be a string, got {_kind(item.value)}")
                continue
            text = item.value if isinstance(item.value, str) else str(item.text)
            self.check_template(item, here, text, step.index)
            argv.append(text)
        if argv and not argv[0]:
            self.bad(node.value[0], f"{where}[0]", "the program name must not be empty")
        step.value = argv

    def kind_call(self, step: Step, node: _Node, where: str) -> None:
        target = self.string(node, where)
        if target is None:
            return
        if not _CALLABLE.fullmatch(target.strip()):
            self.bad(
                node, where, f"expected module:function (like mypkg.mail:send), got {target!r}"
            )
            return
        step.value = target.strip()

    def kind_sleep(self, step: Step, node: _Node, where: str) -> None:
        if isinstance(node.value, str) and "${{" in node.value:
            self.check_template(node, where, node.value, step.index)
            step.value = node.value
            return
        duration = self.duration(node, where)
        if duration is not None:
            step.value = node.value

    def kind_sleep_until(self, step: Step, node: _Node, where: str) -> None:
        if isinstance(node.value, str) and "${{" in node.value:
            self.check_template(node, where, node.value, step.index)
            step.value = node.value
            return
        if isinstance(node.value, bool) or not isinstance(node.value, str | int | float):
            self.bad(node, where, f"expected an ISO-8601 time, got {_kind(node.value)}")
            return
        try:
            parse_when(node.value)
        except UsageError as exc:
            self.bad(node, where, str(exc))
            return
        step.value = node.value

    def kind_wait_signal(self, step: Step, node: _Node, where: str) -> None:
        name = self.string(node, where)
        if name is None or not self.no_expression(node, where, "a signal name"):
            return
        if name.startswith("_"):
            self.bad(node, where, f"signal names starting with _ are reserved, got {name!r}")
            return
        if not _SIGNAL_NAME.fullmatch(name):
            self.bad(node, where, f"invalid signal name {name!r}: use letters, digits, _ and -")
            return
        step.value = name

    def kind_workflow(self, step: Step, node: _Node, where: str) -> None:
        target = self.string(node, where)
        if target is None or not self.no_expression(node, where, "a workflow target"):
            return
        step.value = target.strip()

    # -- expressions --------------------------------------------------------------------

    def condition(self, node: _Node, where: str, index: int) -> Condition | None:
        if node.is_map or node.is_list or node.value is None:
            self.bad(node, where, f"expected a condition, got {_kind(node.value)}")
            return None
        try:
            condition = parse_condition(node.value)
        except ExpressionError as exc:
            self.bad(node, where, str(exc))
            return None
        for term in (condition.left, condition.right):
            if term is not None and term.path is not None:
                self.check_reference(node, where, term.path, index)
        return condition

    def check_template(self, node: _Node, where: str, text: str, index: int | None) -> None:
        """Check every `${{ path }}` in `text`; index is the step's, None for workflow env."""
        for match in _EXPR.finditer(text):
            path = parse_path(match.group(1))
            if path is None:
                self.bad(node, where, _bad_expression(match.group(0)))
                continue
            self.check_reference(node, where, path, index)
        rest = _EXPR.sub("", text)
        if "${{" in rest:
            self.bad(node, where, "unclosed `${{`: write ${{ input.NAME }}")

    def check_reference(
        self, node: _Node, where: str, path: tuple[str, ...], index: int | None
    ) -> None:
        problem = self.reference_problem(path, index)
        if problem:
            self.bad(node, where, problem)

    def reference_problem(self, path: tuple[str, ...], index: int | None) -> str | None:
        shown = "${{ " + ".".join(path) + " }}"
        root = path[0]
        if root == "input":
            if len(path) < 2:
                return f"{shown}: name the input, like input.user"
            name = path[1]
            if name not in self.inputs:
                declared = ", ".join(self.inputs) or "none"
                hint = _did_you_mean(name, tuple(self.inputs))
                return f"{shown}: unknown input {name!r}{hint}; declared inputs: {declared}"
            return None
        if root not in ("steps", "signal"):
            hint = _did_you_mean(root, ("input", "steps", "signal"))
            return (
                f"{shown}: unknown value {root!r}{hint}; use input.NAME, "
                "steps.ID.output, steps.ID.json.FIELD, steps.ID.exit_code or signal.NAME"
            )
        if index is None:
            return f"{shown}: the workflow's env can only use input values"
        if root == "signal":
            return self.signal_problem(shown, path, index)
        if len(path) < 3:
            return f"{shown}: name what you want, like steps.ID.output"
        step_id, attr = path[1], path[2]
        info = self.step_infos.get(step_id)
        if info is None:
            hint = _did_you_mean(step_id, tuple(self.step_infos))
            return f"{shown}: unknown step {step_id!r}{hint}"
        if info.index == index:
            return f"{shown}: a step cannot use its own output"
        if info.index > index:
            return (
                f"{shown}: step {step_id!r} comes later (steps[{info.index}]); "
                "only earlier steps can be used"
            )
        if info.kind is None:
            return None  # that step has its own problem
        if info.kind not in STEP_ATTRS:
            return f"{shown}: step {step_id!r} is a {info.kind} step and has no output"
        attrs = STEP_ATTRS[info.kind]
        if attr not in attrs:
            hint = _did_you_mean(attr, attrs)
            return (
                f"{shown}: {info.kind} steps have no {attr!r}{hint}; available: {', '.join(attrs)}"
            )
        if len(path) > 3 and attr not in DEEP_ATTRS[info.kind]:
            extra = "; use json.FIELD" if info.kind == "run" and attr == "output" else ""
            return f"{shown}: {attr} is a plain value, it has no fields{extra}"
        return None

    def signal_problem(self, shown: str, path: tuple[str, ...], index: int) -> str | None:
        if len(path) < 2:
            return f"{shown}: name the signal, like signal.approved"
        name = path[1]
        indices = self.signals.get(name)
        if not indices:
            hint = _did_you_mean(name, tuple(self.signals))
            return f"{shown}: no step waits for signal {name!r}{hint}"
        if min(indices) >= index:
            return (
                f"{shown}: signal {name!r} is waited for later (steps[{min(indices)}]); "
                "only signals received by earlier steps can be used"
            )
        return None

    def shell_expression(self, node: _Node, where: str, whole: str, inner: str) -> None:
        path = parse_path(inner)
        if path is None:
            self.bad(node, where, _bad_expression(whole))
            return
        variable = shell_variable(path)
        shown = "${{ " + ".".join(path) + " }}"
        if variable:
            advice = f'use "${variable}" instead of {shown}'
        else:
            advice = f'pass it through the step\'s env (env: {{VALUE: "{shown}"}}) and use "$VALUE"'
        self.bad(
            node,
            where,
            f"{shown} is not allowed in a shell string (values are never pasted into shell "
            f"text); {advice}",
        )


def shell_variable(path: tuple[str, ...]) -> str | None:
    """The FLOWCTL_* variable that carries the value of `path`, when there is one."""
    if path[0] == "input" and len(path) == 2:
        return env_name("input", path[1])
    if path[0] == "signal" and len(path) == 2:
        return env_name("signal", path[1])
    if path[0] == "steps" and len(path) == 3 and path[2] in ("output", "exit_code"):
        return env_name("step", path[1], path[2])
    return None


def parse_path(inner: str) -> tuple[str, ...] | None:
    """`input.user` -> ("input", "user"); None when it is not a plain dotted path."""
    text = inner.strip()
    if not _PATH.fullmatch(text):
        return None
    return tuple(text.split("."))


def _bad_expression(whole: str) -> str:
    return (
        f"{whole!s}: only dotted paths are allowed (like input.user, steps.check.output, "
        "steps.check.json.field or signal.approved.by); no code"
    )


# ---------------------------------------------------------------------------------------
# Conditions


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<expr>\$\{\{.*?\}\})
      | (?P<op>==|!=)
      | (?P<bang>!)
      | (?P<dq>"(?:[^"\\]|\\.)*")
      | (?P<sq>'[^']*')
      | (?P<num>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.]))
      | (?P<word>[A-Za-z_][A-Za-z0-9_.-]*)
    )""",
    re.VERBOSE | re.DOTALL,
)
_WORDS = {"true": True, "false": False, "null": None}


def parse_condition(value: Any) -> Condition:
    """Parse an `if:` condition. Grammar (no code is ever evaluated):

        condition := ["!"] term [("==" | "!=") term]
        term      := "${{ path }}" | path | literal
        path      := input.NAME... | steps.ID.ATTR... | signal.NAME...
        literal   := "double-quoted" | 'single-quoted' | number | true | false | null

    Alone, a term is tested for truthiness: null, false, 0, "", [] and {} are false, and
    so are the strings "false", "0", "no", "off" and "null" (any case, spaces trimmed),
    because command output is text. `==` compares JSON values; a string compared with a
    number or a boolean compares as text ("42" == 42, "true" == true). A YAML `if: true`
    or `if: false` is a literal. `!` negates the whole condition.
    """
    if isinstance(value, bool | int | float):
        return Condition(text=str(value), left=Term(literal=value))
    if not isinstance(value, str):
        raise ExpressionError(f"expected a condition, got {_kind(value)}")
    text = value.strip()
    if not text:
        raise ExpressionError("the condition is empty")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExpressionError(f"cannot read the condition {text!r} at {text[pos:]!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    negate = False
    if tokens and tokens[0][0] == "bang":
        negate = True
        tokens = tokens[1:]
    if not tokens:
        raise ExpressionError(f"{text!r}: `!` needs something to negate")
    left = _term(tokens[0], text)
    if len(tokens) == 1:
        return Condition(text=text, left=left, negate=negate)
    if len(tokens) != 3 or tokens[1][0] != "op":
        raise ExpressionError(
            f"{text!r}: expected `VALUE`, `VALUE == VALUE` or `VALUE != VALUE` "
            "(no and/or; use separate steps)"
        )
    right = _term(tokens[2], text)
    return Condition(text=text, left=left, op=tokens[1][1], right=right, negate=negate)


def _term(token: tuple[str, str], text: str) -> Term:
    kind, raw = token
    if kind == "expr":
        path = parse_path(raw[3:-2])
        if path is None:
            raise ExpressionError(_bad_expression(raw))
        return Term(path=path)
    if kind == "dq":
        return Term(literal=json.loads(raw))
    if kind == "sq":
        return Term(literal=raw[1:-1])
    if kind == "num":
        number = float(raw)
        return Term(literal=int(raw) if re.fullmatch(r"-?\d+", raw) else number)
    if kind == "word":
        if raw in _WORDS:
            return Term(literal=_WORDS[raw])
        if raw.split(".")[0] in ("input", "steps", "signal"):
            path = parse_path(raw)
            if path is None:
                raise ExpressionError(f"{raw!r} is not a valid path")
            return Term(path=path)
        raise ExpressionError(
            f"{text!r}: {raw!r} is neither a value path (input.X, steps.ID.output, signal.X) "
            f"nor a literal; quote strings like '{raw}'"
        )
    raise ExpressionError(f"{text!r}: unexpected {raw!r}")


def truthy(value: Any) -> bool:
    """Truthiness of a condition value (see `parse_condition`)."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


def values_equal(a: Any, b: Any) -> bool:
    """Equality for `==`: JSON equality, with strings compared as text to numbers/booleans."""
    if isinstance(a, str) and not isinstance(b, str):
        a, b = b, a
    if isinstance(b, str) and not isinstance(a, str):
        if isinstance(a, bool):
            return b.strip().lower() == ("true" if a else "false")
        if isinstance(a, int | float):
            try:
                return float(b.strip()) == a
            except ValueError:
                return False
        return False
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


# ---------------------------------------------------------------------------------------
# Inputs


def convert_inputs(wf: YamlWorkflow, raw: dict[str, Any] | None) -> dict[str, Any]:
    """Check `raw` against the declared inputs: defaults, required, unknown, type conversion."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"the input of workflow {wf.name!r} must be a JSON object")
    for name in raw:
        if name not in wf.inputs:
            declared = ", ".join(wf.inputs) or "none"
            hint = _did_you_mean(str(name), tuple(wf.inputs))
            raise InputError(
                f"unknown input {name!r} for workflow {wf.name!r}{hint}; declared inputs: "
                f"{declared}"
            )
    result: dict[str, Any] = {}
    for name, spec in wf.inputs.items():
        if name in raw and raw[name] is not None:
            result[name] = convert_value(name, spec.type, raw[name])
        elif name in raw and not spec.required:
            result[name] = None
        elif spec.default is not None or not spec.required:
            result[name] = copy.deepcopy(spec.default)
        else:
            raise InputError(
                f"missing required input {name!r} ({spec.type}) for workflow {wf.name!r}: "
                f"pass -i {name}=VALUE"
            )
    return result


def convert_value(name: str, kind: str, value: Any) -> Any:
    """Strings are converted to the declared type; other values must already have it."""
    given = f"got {value!r} ({_json_kind(value)})"
    wrong = InputError(f"input {name!r} must be {_TYPE_WORDS[kind]}, {given}")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise wrong
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
            return int(value)
        raise wrong
    if kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise wrong from None
            if number == number and abs(number) != float("inf"):
                return number
        raise wrong
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _TRUE_INPUT:
                return True
            if word in _FALSE_INPUT:
                return False
        raise wrong
    wanted: type = list if kind == "list" else dict
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise wrong from None
    if isinstance(value, wanted):
        return value
    raise wrong


_TYPE_WORDS = {
    "str": "a string (str)",
    "int": "a whole number (int)",
    "float": "a number (float)",
    "bool": "true or false (bool: true/false, yes/no, 1/0)",
    "list": "a JSON list (list)",
    "dict": "a JSON object (dict)",
}


# ---------------------------------------------------------------------------------------
# Running


def parse_when(value: Any) -> datetime | float:
    """A sleep_until value: an ISO-8601 time with a UTC offset, or epoch seconds."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | datetime):
        raise UsageError(f"expected an ISO-8601 time, got {_kind(value)}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        when = value
    else:
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise UsageError(
                f"{value!r} is not an ISO-8601 time; write it like "
                "2030-01-31T09:00:00+01:00 or 2030-01-31T08:00:00Z"
            ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise UsageError(f"{str(value)!r} has no UTC offset; add one, like +01:00 or Z")
    return when


def to_text(value: Any) -> str:
    """How a value is written into an argument or an environment variable."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _merged_retry(
    defaults: dict[str, Any] | None, step: dict[str, Any] | None
) -> dict[str, Any] | None:
    if defaults is None and step is None:
        return None
    return {**(defaults or {}), **(step or {})}


def _error_info(exc: BaseException) -> tuple[str, str]:
    """(type, message) of a step error, the same on first run and on replay."""
    if isinstance(exc, StepFailedError):
        return exc.type_name, exc.message
    return str(getattr(exc, "error_type", type(exc).__name__)), str(exc)


class _Runner:
    """One pass of a YAML workflow's handler (replayed from the top on every resume)."""

    def __init__(self, wf: YamlWorkflow, ctx: StepContext, inputs: dict[str, Any]) -> None:
        self.wf = wf
        self.ctx = ctx
        self.inputs = inputs
        self.records: dict[str, dict[str, Any]] = {}
        self.signals: dict[str, Any] = {}

    def run(self) -> dict[str, Any]:
        failed: dict[str, dict[str, Any]] = {}
        for step in self.wf.steps:
            self.ctx.check()
            if step.condition is not None and not self.test(step.condition):
                self.records[step.id] = _record(None, skipped=True)
                continue
            try:
                output = self.execute(step)
            except (NonDeterminismError, DurableCallError):
                raise
            except Exception as exc:
                if not step.continue_on_error:
                    raise
                kind, message = _error_info(exc)
                exit_code = getattr(exc, "exit_code", None)
                exit_code = exit_code if isinstance(exit_code, int) else None
                self.records[step.id] = {
                    **_record(None),
                    "exit_code": exit_code,
                    "failed": True,
                    "error": message,
                }
                failed[step.id] = {"type": kind, "message": message, "exit_code": exit_code}
                continue
            if output is not None:
                self.records[step.id] = output
        result: dict[str, Any] = {
            "steps": {
                step_id: record["output"]
                for step_id, record in self.records.items()
                if not record["skipped"]
            }
        }
        if failed:
            result["failed"] = failed
        return result

    # -- values -------------------------------------------------------------------------

    def lookup(self, path: tuple[str, ...]) -> Any:
        shown = "${{ " + ".".join(path) + " }}"
        root = path[0]
        if root == "input":
            if path[1] not in self.inputs:
                raise ExpressionError(f"{shown}: unknown input {path[1]!r}")
            value = self.inputs[path[1]]
            rest = path[2:]
        elif root == "steps":
            record = self.records.get(path[1])
            if record is None:
                raise ExpressionError(f"{shown}: step {path[1]!r} has not run yet")
            if path[2] not in record:
                raise ExpressionError(f"{shown}: steps have no {path[2]!r}")
            value = record[path[2]]
            if value is None and len(path) > 3:
                why = "was skipped" if record["skipped"] else "failed" if record["failed"] else ""
                if why:
                    raise ExpressionError(f"{shown}: step {path[1]!r} {why}, it has no {path[2]}")
            rest = path[3:]
        elif root == "signal":
            value = self.signals.get(path[1])
            rest = path[2:]
        else:
            raise ExpressionError(f"{shown}: unknown value {root!r}")
        for depth, key in enumerate(rest):
            here = ".".join(path[: len(path) - len(rest) + depth])
            if isinstance(value, dict):
                if key not in value:
                    keys = ", ".join(map(str, value)) or "none"
                    raise ExpressionError(f"{shown}: {here} has no key {key!r}; keys: {keys}")
                value = value[key]
            elif isinstance(value, list) and re.fullmatch(r"\d+", key):
                if int(key) >= len(value):
                    raise ExpressionError(f"{shown}: {here} has {len(value)} items, no index {key}")
                value = value[int(key)]
            else:
                raise ExpressionError(
                    f"{shown}: {here} is {_json_kind(value)}, it has no field {key!r}"
                )
        return value

    def render(self, value: Any) -> Any:
        """Substitute `${{ }}`: a whole-value expression keeps its JSON type."""
        if isinstance(value, str):
            if "${{" not in value:
                return value
            whole = _WHOLE_EXPR.fullmatch(value)
            if whole and "${{" not in whole.group(1):
                return self.lookup(self.path(whole.group(0), whole.group(1)))
            return _EXPR.sub(
                lambda m: to_text(self.lookup(self.path(m.group(0), m.group(1)))), value
            )
        if isinstance(value, list):
            return [self.render(item) for item in value]
        if isinstance(value, dict):
            return {key: self.render(item) for key, item in value.items()}
        return value

    def text(self, value: Any) -> str:
        return to_text(self.render(value))

    @staticmethod
    def path(whole: str, inner: str) -> tuple[str, ...]:
        path = parse_path(inner)
        if path is None:
            raise ExpressionError(_bad_expression(whole))
        return path

    def test(self, condition: Condition) -> bool:
        left = self.term(condition.left)
        if condition.op is None:
            outcome = truthy(left)
        else:
            assert condition.right is not None
            same = values_equal(left, self.term(condition.right))
            outcome = same if condition.op == "==" else not same
        return not outcome if condition.negate else outcome

    def term(self, term: Term) -> Any:
        return self.lookup(term.path) if term.path is not None else term.literal

    def flowctl_env(self) -> dict[str, str]:
        env = {
            "FLOWCTL_RUN_ID": str(self.ctx.run_id),
            "FLOWCTL_WORKFLOW": str(self.wf.name),
        }
        for name, value in self.inputs.items():
            env[env_name("input", name)] = to_text(value)
        for step_id, record in self.records.items():
            if record["skipped"]:
                continue
            env[env_name("step", step_id, "output")] = to_text(record["output"])
            if record.get("exit_code") is not None:
                env[env_name("step", step_id, "exit_code")] = str(record["exit_code"])
        for name, payload in self.signals.items():
            env[env_name("signal", name)] = json.dumps(payload, ensure_ascii=False)
        return env

    # -- steps --------------------------------------------------------------------------

    def execute(self, step: Step) -> dict[str, Any] | None:
        """Run one step; returns its record for `${{ steps.ID.* }}` (None for sleeps)."""
        ctx = self.ctx
        if step.kind == "run":
            return self.run_step(step)
        if step.kind == "call":
            return self.call_step(step)
        if step.kind in ("sleep", "sleep_until"):
            value = self.render(step.value)
            try:
                when = parse_duration(value) if step.kind == "sleep" else parse_when(value)
            except UsageError as exc:
                raise UsageError(f"step {step.id!r}: {step.kind}: {exc}") from None
            if isinstance(when, timedelta):
                ctx.sleep(when)
            else:
                ctx.sleep_until(when)
            return None
        if step.kind == "wait_signal":
            timeout = step.timeout
            if step.on_timeout == "continue":
                payload = ctx.wait_signal(step.value, timeout=timeout, default=None)
            else:
                payload = ctx.wait_signal(step.value, timeout=timeout)
            self.signals[step.value] = payload
            return _record(payload)
        if step.kind == "workflow":
            child_input = self.render(step.with_) if step.with_ is not None else None
            if child_input is not None and not isinstance(child_input, dict):
                raise ExpressionError(f"step {step.id!r}: `with` must give a mapping")
            return _record(ctx.child(self.child_target(step.value), child_input))
        raise AssertionError(f"unknown step kind {step.kind}")

    def run_step(self, step: Step) -> dict[str, Any]:
        ctx = self.ctx
        command: list[str] | str = (
            step.value if isinstance(step.value, str) else [self.text(arg) for arg in step.value]
        )
        env = dict(os.environ)
        env.update({key: self.text(value) for key, value in self.wf.env.items()})
        env.update({key: self.text(value) for key, value in step.env.items()})
        env.update(self.flowctl_env())
        cwd = ctx.cwd
        if step.cwd is not None:
            cwd = os.path.join(ctx.cwd or os.getcwd(), self.text(step.cwd))
        options = self.wf.step_options(step)
        timeout = options.timeout.total_seconds() if options.timeout is not None else None

        def run() -> dict[str, Any]:
            result = run_command(
                command, env=env, cwd=cwd, timeout=timeout, should_stop=ctx.interruption
            )
            return result.to_json()

        result = ctx.step(step.id, with_options(run, options))
        record = _record(str(result.get("stdout", "")).strip())
        record["json"] = result.get("json")
        record["exit_code"] = result.get("exit_code")
        return record

    def call_step(self, step: Step) -> dict[str, Any]:
        kwargs = self.render(step.with_) if step.with_ is not None else {}
        if not isinstance(kwargs, dict):
            raise ExpressionError(f"step {step.id!r}: `with` must give a mapping")
        target, folder = step.value, self.ctx.cwd

        def call() -> Any:
            return load_callable(target, folder)(**kwargs)

        return _record(self.ctx.step(step.id, with_options(call, self.wf.step_options(step))))

    def child_target(self, target: str) -> str:
        """File targets are relative to the folder holding the workflow file."""
        file_part = target.split(":", 1)[0] if ".py:" in target else target
        is_file = file_part.endswith((".yaml", ".yml", ".py"))
        if is_file and not os.path.isabs(file_part) and self.ctx.cwd:
            return os.path.join(self.ctx.cwd, target)
        return target


def _record(output: Any, *, skipped: bool = False) -> dict[str, Any]:
    return {
        "output": output,
        "json": output,
        "exit_code": None,
        "failed": False,
        "error": None,
        "skipped": skipped,
    }


def load_callable(target: str, folder: str | None) -> Callable[..., Any]:
    """Import `module:function`, looking in the workflow's folder first."""
    module_name, _, attr = target.partition(":")
    if folder and folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r} for call {target!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"{target!r}: module {module_name!r} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------
# Small helpers


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


def _kind(value: Any) -> str:
    """A YAML-ish description of a value's type, for messages."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return type(value).__name__
