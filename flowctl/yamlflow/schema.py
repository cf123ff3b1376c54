"""What a YAML workflow may contain, and the checks that report every mistake at its place.

The loader in `flowctl.yamlflow` turns YAML text into a tree of `Node`s that remember
their line and column; `build_workflow` walks that tree, records each problem with its
field path (`steps[2].retry.backoff`) and a did-you-mean hint, and builds the validated
`YamlWorkflow`. References inside `${{ }}` are checked against the declared inputs, the
earlier steps and the waited-for signals, with the rules of `flowctl.yamlflow.expressions`.
No YAML here: the tree is plain Python.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from flowctl.durations import parse_duration
from flowctl.errors import DurationError, InputError, UsageError
from flowctl.inputs import convert_value
from flowctl.retry import RetryPolicy
from flowctl.yamlflow.branching import STEP_KINDS as STEP_KINDS
from flowctl.yamlflow.branching import for_each_value, parallel_block
from flowctl.yamlflow.expressions import (
    Condition,
    ExpressionError,
    StepRef,
    bad_expression,
    describe,
    did_you_mean,
    env_name,
    expressions_in,
    has_unclosed,
    parse_condition,
    parse_path,
    reference_problem,
    shell_variable,
)
from flowctl.yamlflow.flowblocks import FLOW_TOP_KEYS, flow_blocks, step_limit
from flowctl.yamlflow.steps import (
    Defaults,
    InputSpec,
    Step,
    YamlWorkflow,
    merged_retry,
    parse_sleep_until,
)
from flowctl.yamlflow.tree import Node, Problems, plain, schedule_places, to_plain

INPUT_TYPES = ("str", "int", "float", "bool", "list", "dict")
TOP_KEYS = (
    "name",
    "description",
    "input",
    "env",
    "defaults",
    "schedule",
    "max_attempts",
    "notify",
    *FLOW_TOP_KEYS,
    "steps",
)
STEP_OPTIONS: tuple[str, ...] = ("retry", "timeout", "env", "cwd", "continue_on_error", "with")
STEP_OPTIONS += ("on_timeout", "for_each", "max_concurrency", "limit")  # limit: flowblocks
STEP_KEYS = (*STEP_KINDS, "id", "if", *STEP_OPTIONS)
# Which options each step kind takes (`id` and `if` are taken by every kind).
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "run": ("retry", "timeout", "env", "cwd", "continue_on_error", "for_each", "max_concurrency"),
    "call": ("with", "retry", "timeout", "continue_on_error", "for_each", "max_concurrency"),
    "sleep": (),
    "sleep_until": (),
    "wait_signal": ("timeout", "on_timeout"),
    "workflow": ("with", "continue_on_error", "for_each", "max_concurrency"),
    "parallel": ("continue_on_error", "max_concurrency"),
}
KIND_OPTIONS["run"] += ("limit",)  # a named limit each start takes (flowctl.yamlflow.flowblocks)
KIND_OPTIONS["call"] += ("limit",)
INPUT_KEYS = ("type", "default", "required", "description", "secret")
RETRY_KEYS = ("max_attempts", "backoff", "multiplier", "max_backoff", "jitter")
DEFAULTS_KEYS = ("retry", "timeout")
ON_TIMEOUT = ("fail", "continue")

_TYPE_ALIASES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "mapping": "dict",
}

_STEP_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
_INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIGNAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_CALLABLE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


# ---------------------------------------------------------------------------------------
# Validation


def build_workflow(root: Node, problems: Problems, path: str, text: str) -> YamlWorkflow:
    """Check a mapping node as a workflow; problems are added to `problems`, not raised."""
    return _Validator(problems, path, text).workflow(root)


class _Validator:
    def __init__(self, problems: Problems, path: str, text: str) -> None:
        self.problems = problems
        self.path = path
        self.text = text
        self.inputs: dict[str, InputSpec] = {}
        self.step_infos: dict[str, StepRef] = {}
        self.signals: dict[str, list[int]] = {}
        self.loop_steps: set[int] = set()
        self.id_places: dict[
            str, str
        ] = {}  # step id -> where it is given  # indices of the steps with a for_each
        self.default_retry: dict[str, Any] | None = None
        self.schedule_places: list[dict[str, tuple[int, int]]] = []

    # -- small helpers ------------------------------------------------------------------

    def bad(self, node: Node, where: str, message: str, *, key: bool = False) -> None:
        self.problems.at(node, where, message, key=key)

    def check_keys(self, node: Node, allowed: tuple[str, ...], where: str) -> None:
        for key, child in node.value.items():
            if key in allowed:
                continue
            here = f"{where}.{key}" if where else key
            hint = did_you_mean(key, allowed)
            extra = hint or f"; allowed: {', '.join(allowed)}"
            self.bad(child, here, f"unknown key {key!r}{extra}", key=True)

    def string(self, node: Node, where: str, *, allow_empty: bool = False) -> str | None:
        if not isinstance(node.value, str):
            self.bad(node, where, f"expected a string, got {describe(node.value)}")
            return None
        if not allow_empty and not node.value.strip():
            self.bad(node, where, "must not be empty")
            return None
        return node.value

    def no_expression(self, node: Node, where: str, what: str) -> bool:
        if isinstance(node.value, str) and "${{" in node.value:
            self.bad(node, where, f"{what} must be fixed text; `${{{{ }}}}` is not allowed here")
            return False
        return True

    def duration(self, node: Node, where: str) -> timedelta | None:
        if isinstance(node.value, bool) or not isinstance(node.value, str | int | float):
            self.bad(node, where, f"expected a duration like 30s or 5m, got {describe(node.value)}")
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

    def integer(self, node: Node, where: str, minimum: int) -> int | None:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            self.bad(node, where, f"expected a whole number, got {describe(node.value)}")
            return None
        if node.value < minimum:
            self.bad(node, where, f"must be at least {minimum}, got {node.value}")
            return None
        return node.value

    def number(self, node: Node, where: str, low: float, high: float | None) -> float | None:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            self.bad(node, where, f"expected a number, got {describe(node.value)}")
            return None
        if node.value < low or (high is not None and node.value > high):
            bounds = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
            self.bad(node, where, f"must be {bounds}, got {node.value}")
            return None
        return float(node.value)

    def boolean(self, node: Node, where: str) -> bool | None:
        if not isinstance(node.value, bool):
            self.bad(node, where, f"expected true or false, got {describe(node.value)}")
            return None
        return node.value

    # -- the workflow -------------------------------------------------------------------

    def workflow(self, root: Node) -> YamlWorkflow:
        top: dict[str, Node] = root.value
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
        notify = self.notify_block(top["notify"]) if "notify" in top else None
        flow = flow_blocks(self, top, to_plain)
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
            schedule_places=self.schedule_places,
            max_attempts=max_attempts,
            notify=notify,
            **flow,
        )

    def notify_block(self, node: Node) -> dict[str, Any] | None:
        """`notify:` overrides flowctl.toml's [notify] for this workflow (`false` silences it)."""
        from flowctl.notify import checked_override

        pinned, problem = checked_override(plain(node))
        if problem:
            self.bad(node, "notify", problem)
        return pinned

    def input_block(self, node: Node) -> None:
        if not node.is_map:
            self.bad(
                node, "input", f"expected a mapping of input names, got {describe(node.value)}"
            )
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

    def input_type(self, node: Node, where: str) -> str | None:
        if not isinstance(node.value, str):
            allowed = ", ".join(INPUT_TYPES)
            self.bad(node, where, f"expected a type ({allowed}), got {describe(node.value)}")
            return None
        if node.value in INPUT_TYPES:
            return node.value
        alias = _TYPE_ALIASES.get(node.value.lower())
        hint = f" (did you mean {alias!r}?)" if alias else did_you_mean(node.value, INPUT_TYPES)
        self.bad(node, where, f"unknown type {node.value!r}{hint}; types: {', '.join(INPUT_TYPES)}")
        return None

    def input_spec(self, name: str, node: Node, where: str) -> InputSpec | None:
        if not node.is_map:
            kind = self.input_type(node, where)
            return InputSpec(name=name, type=kind) if kind else None
        spec: dict[str, Node] = node.value
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
            raw = to_plain(spec["default"])
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
        secret = False
        if "secret" in spec:
            flag = self.boolean(spec["secret"], f"{where}.secret")
            if flag is None:
                return None
            secret = flag
        return InputSpec(
            name=name,
            type=kind,
            required=required,
            default=default,
            description=description,
            secret=secret,
        )

    def env_block(self, node: Node, where: str, index: int | None) -> dict[str, str]:
        if not node.is_map:
            self.bad(node, where, f"expected a mapping of NAME: value, got {describe(node.value)}")
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
                self.bad(child, here, f"expected a string, got {describe(child.value)}")
                continue
            text = child.value if isinstance(child.value, str) else str(child.text)
            self.check_template(child, here, text, index)
            env[key] = text
        return env

    def retry_block(self, node: Node, where: str) -> dict[str, Any] | None:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            count = self.integer(node, where, 1)
            return {"max_attempts": count} if count is not None else None
        if not node.is_map:
            self.bad(
                node,
                where,
                f"expected a number of attempts or a mapping ({', '.join(RETRY_KEYS)}), "
                f"got {describe(node.value)}",
            )
            return None
        self.check_keys(node, RETRY_KEYS, where)
        spec: dict[str, Node] = node.value
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

    def defaults_block(self, node: Node) -> Defaults:
        if not node.is_map:
            self.bad(node, "defaults", f"expected a mapping, got {describe(node.value)}")
            return Defaults()
        self.check_keys(node, DEFAULTS_KEYS, "defaults")
        spec: dict[str, Node] = node.value
        retry = self.retry_block(spec["retry"], "defaults.retry") if "retry" in spec else None
        timeout = self.duration(spec["timeout"], "defaults.timeout") if "timeout" in spec else None
        self.default_retry = retry
        return Defaults(retry=retry, timeout=timeout)

    def schedule_block(self, node: Node) -> Any:
        items = node.value if node.is_list else [node]
        self.schedule_places = []
        for i, item in enumerate(items):
            if not item.is_map:
                where = f"schedule[{i}]" if node.is_list else "schedule"
                self.bad(item, where, f"expected a mapping, got {describe(item.value)}")
            self.schedule_places.append(schedule_places(item))
        return to_plain(node)

    # -- steps --------------------------------------------------------------------------

    def steps_block(self, node: Node) -> list[Step]:
        if not node.is_list:
            self.bad(node, "steps", f"expected a list of steps, got {describe(node.value)}")
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

    def collect_ids(self, nodes: list[Node]) -> None:
        """First pass: every step's id, kind and signal, so references can be checked."""
        seen_env: dict[str, str] = {}
        for index, node in enumerate(nodes):
            self.collect_id(node, f"steps[{index}]", index, seen_env)
            block = node.value.get("parallel") if node.is_map else None
            if block is not None and block.is_list:
                for j, inner in enumerate(block.value):
                    where = f"steps[{index}].parallel[{j}]"
                    if inner.is_map and "id" not in inner.value:
                        self.bad(inner, where, "a step in a parallel block needs an `id`")
                        continue
                    self.collect_id(inner, where, index, seen_env)

    def collect_id(self, node: Node, where: str, index: int, seen_env: dict[str, str]) -> None:
        """One step's id, kind and signal (a step of a parallel block takes its block's
        index: later steps may use its output, its siblings may not)."""
        if not node.is_map:
            return
        spec: dict[str, Node] = node.value
        if "for_each" in spec:
            self.loop_steps.add(index)
        kinds = [key for key in spec if key in STEP_KINDS]
        kind = kinds[0] if len(kinds) == 1 else None
        step_id = f"step-{index + 1}"
        id_node = spec.get("id")
        if id_node is not None:
            given = self.string(id_node, f"{where}.id")
            if given is None:
                return
            if not _STEP_ID.fullmatch(given):
                self.bad(
                    id_node,
                    f"{where}.id",
                    f"invalid step id {given!r}: use letters, digits, _ and - (at most 64)",
                )
                return
            step_id = given
        if step_id in self.step_infos:
            first = self.id_places.get(step_id, f"steps[{self.step_infos[step_id].index}]")
            auto = "" if id_node is not None else " (the automatic id of this step)"
            self.bad(
                id_node or node,
                f"{where}.id",
                f"duplicate step id {step_id!r}{auto}; {first} already uses it",
            )
            return
        variable = env_name("step", step_id)
        if variable in seen_env:
            self.bad(
                id_node or node,
                f"{where}.id",
                f"step ids {step_id!r} and {seen_env[variable]!r} would share the "
                f"environment variables {variable}_*; rename one",
            )
        seen_env[variable] = step_id
        if kind == "wait_signal" and isinstance(spec["wait_signal"].value, str):
            self.signals.setdefault(spec["wait_signal"].value, []).append(index)
        self.step_infos[step_id] = StepRef(kind, index)
        self.id_places[step_id] = where

    def step(self, node: Node, index: int, where: str | None = None) -> Step | None:
        where = where or f"steps[{index}]"
        if not node.is_map:
            self.bad(node, where, f"expected a mapping (one step), got {describe(node.value)}")
            return None
        spec: dict[str, Node] = node.value
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

    def step_options(self, step: Step, spec: dict[str, Node], where: str) -> None:
        index = step.index
        applies = KIND_OPTIONS[step.kind]
        if "if" in spec:
            step.condition = self.condition(spec["if"], f"{where}.if", index)
        if "retry" in spec and "retry" in applies:
            step.retry = self.retry_block(spec["retry"], f"{where}.retry")
            merged = merged_retry(self.default_retry, step.retry)
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
        if "for_each" in spec and "for_each" in applies:
            step.for_each = self.for_each(spec["for_each"], f"{where}.for_each", index)
        if "max_concurrency" in spec and "max_concurrency" in applies:
            node = spec["max_concurrency"]
            step.max_concurrency = self.integer(node, f"{where}.max_concurrency", 1)
            if "for_each" not in spec and step.kind != "parallel":
                self.bad(node, f"{where}.max_concurrency", "`max_concurrency` needs a `for_each`")
        step.limit = step_limit(
            self, spec.get("limit") if "limit" in applies else None, where, spec
        )
        if "on_timeout" in spec and "on_timeout" in applies:
            node = spec["on_timeout"]
            if node.value not in ON_TIMEOUT:
                hint = did_you_mean(str(node.value), ON_TIMEOUT)
                self.bad(
                    node,
                    f"{where}.on_timeout",
                    f"expected fail or continue, got {node.text or describe(node.value)!r}{hint}",
                )
            else:
                step.on_timeout = node.value
                if node.value == "continue" and "timeout" not in spec:
                    self.bad(
                        node, f"{where}.on_timeout", "`on_timeout` needs a `timeout` to act on"
                    )

    def with_block(self, node: Node, where: str, index: int, kind: str) -> Any:
        if not node.is_map:
            self.bad(node, where, f"expected a mapping of arguments, got {describe(node.value)}")
            return None
        for key, child in node.value.items():
            if kind == "call" and not key.isidentifier():
                self.bad(
                    child, f"{where}.{key}", f"{key!r} is not a Python argument name", key=True
                )
            self.check_templates_in(child, f"{where}.{key}", index)
        return to_plain(node)

    def check_templates_in(self, node: Node, where: str, index: int) -> None:
        if node.is_map:
            for key, child in node.value.items():
                self.check_templates_in(child, f"{where}.{key}", index)
        elif node.is_list:
            for i, child in enumerate(node.value):
                self.check_templates_in(child, f"{where}[{i}]", index)
        elif isinstance(node.value, str):
            self.check_template(node, where, node.value, index)

    # -- step kinds ---------------------------------------------------------------------

    def kind_run(self, step: Step, node: Node, where: str) -> None:
        if isinstance(node.value, str):
            if not node.value.strip():
                self.bad(node, where, "the command must not be empty")
                return
            for whole, inner in expressions_in(node.value):
                self.shell_expression(node, where, whole, inner)
            step.value = node.value
            return
        if not node.is_list:
            self.bad(
                node,
                where,
                f"expected a list of arguments (no shell) or a shell string, got {describe(node.value)}",
            )
            return
        if not node.value:
            self.bad(node, where, "the argument list must not be empty")
            return
        argv: list[str] = []
        for i, item in enumerate(node.value):
            here = f"{where}[{i}]"
            if item.is_map or item.is_list or item.value is None:
                self.bad(item, here, f"each argument must be a string, got {describe(item.value)}")
                continue
            text = item.value if isinstance(item.value, str) else str(item.text)
            self.check_template(item, here, text, step.index)
            argv.append(text)
        if argv and not argv[0]:
            self.bad(node.value[0], f"{where}[0]", "the program name must not be empty")
        step.value = argv

    def kind_call(self, step: Step, node: Node, where: str) -> None:
        target = self.string(node, where)
        if target is None:
            return
        if not _CALLABLE.fullmatch(target.strip()):
            self.bad(
                node, where, f"expected module:function (like mypkg.mail:send), got {target!r}"
            )
            return
        step.value = target.strip()

    def kind_sleep(self, step: Step, node: Node, where: str) -> None:
        if isinstance(node.value, str) and "${{" in node.value:
            self.check_template(node, where, node.value, step.index)
            step.value = node.value
            return
        duration = self.duration(node, where)
        if duration is not None:
            step.value = node.value

    def kind_sleep_until(self, step: Step, node: Node, where: str) -> None:
        if isinstance(node.value, str) and "${{" in node.value:
            self.check_template(node, where, node.value, step.index)
            step.value = node.value
            return
        if isinstance(node.value, bool) or not isinstance(node.value, str | int | float):
            self.bad(node, where, f"expected an ISO-8601 time, got {describe(node.value)}")
            return
        try:
            parse_sleep_until(node.value)
        except UsageError as exc:
            self.bad(node, where, str(exc))
            return
        step.value = node.value

    def kind_wait_signal(self, step: Step, node: Node, where: str) -> None:
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

    def kind_parallel(self, step: Step, node: Node, where: str) -> None:
        parallel_block(self, step, node, where)

    def for_each(self, node: Node, where: str, index: int) -> Any:
        return for_each_value(self, node, where, index)

    def kind_workflow(self, step: Step, node: Node, where: str) -> None:
        target = self.string(node, where)
        if target is None or not self.no_expression(node, where, "a workflow target"):
            return
        step.value = target.strip()

    # -- expressions --------------------------------------------------------------------

    def condition(self, node: Node, where: str, index: int) -> Condition | None:
        if node.is_map or node.is_list or node.value is None:
            self.bad(node, where, f"expected a condition, got {describe(node.value)}")
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

    def check_template(self, node: Node, where: str, text: str, index: int | None) -> None:
        """Check every `${{ path }}` in `text`; index is the step's, None for workflow env."""
        for whole, inner in expressions_in(text):
            path = parse_path(inner)
            if path is None:
                self.bad(node, where, bad_expression(whole))
                continue
            self.check_reference(node, where, path, index)
        if has_unclosed(text):
            self.bad(node, where, "unclosed `${{`: write ${{ input.NAME }}")

    def check_reference(
        self, node: Node, where: str, path: tuple[str, ...], index: int | None
    ) -> None:
        problem = reference_problem(
            path,
            index,
            inputs=self.inputs,
            steps=self.step_infos,
            signals=self.signals,
            loop=index in self.loop_steps,
        )
        if problem:
            self.bad(node, where, problem)

    def shell_expression(self, node: Node, where: str, whole: str, inner: str) -> None:
        path = parse_path(inner)
        if path is None:
            self.bad(node, where, bad_expression(whole))
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
