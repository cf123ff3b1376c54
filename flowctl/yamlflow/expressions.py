"""The `${{ }}` value language of YAML workflows: paths, `if:` conditions, env names, text.

Values flow between steps through dotted paths; no code is ever evaluated:

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

Pure: no YAML, no Context. The validator checks these forms when a file is loaded, and
the step runner resolves them while the workflow runs; both share the rules here.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from flowctl.errors import NonRetryableError
from flowctl.inputs import json_type

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

LOOP_NAMES = ("item", "index")  # `${{ item }}`, `${{ index }}` in a for_each step's values
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_WHOLE_EXPR = re.compile(r"\s*\$\{\{(.*?)\}\}\s*", re.DOTALL)
_PATH = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_FALSE_WORDS = frozenset({"", "false", "0", "no", "off", "null"})


class ExpressionError(NonRetryableError):
    """A `${{ }}` value that cannot be resolved while the workflow runs.

    Non-retryable: it is computed from the input and recorded results, which a new attempt
    replays unchanged, so it would fail the same way."""


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


# ---------------------------------------------------------------------------------------
# Paths and templates


def parse_path(inner: str) -> tuple[str, ...] | None:
    """`input.user` -> ("input", "user"); None when it is not a plain dotted path."""
    text = inner.strip()
    if not _PATH.fullmatch(text):
        return None
    return tuple(text.split("."))


def expressions_in(text: str) -> list[tuple[str, str]]:
    """Every `${{ ... }}` in `text`, as (the whole expression, what is inside the braces)."""
    return [(match.group(0), match.group(1)) for match in _EXPR.finditer(text)]


def has_unclosed(text: str) -> bool:
    """Whether `text` has a `${{` left over once every closed expression is removed."""
    return "${{" in _EXPR.sub("", text)


def bad_expression(whole: str) -> str:
    """The message for a `${{ }}` that is not a plain dotted path."""
    return (
        f"{whole!s}: only dotted paths are allowed (like input.user, steps.check.output, "
        "steps.check.json.field or signal.approved.by); no code"
    )


def env_name(*parts: str) -> str:
    """FLOWCTL_<PARTS>: upper-cased, every non-alphanumeric character turned into `_`."""
    return "FLOWCTL_" + "_".join(re.sub(r"[^A-Za-z0-9]", "_", p).upper() for p in parts)


def shell_variable(path: tuple[str, ...]) -> str | None:
    """The FLOWCTL_* variable that carries the value of `path`, when there is one."""
    if path[0] == "input" and len(path) == 2:
        return env_name("input", path[1])
    if path[0] == "signal" and len(path) == 2:
        return env_name("signal", path[1])
    if path[0] == "steps" and len(path) == 3 and path[2] in ("output", "exit_code"):
        return env_name("step", path[1], path[2])
    if path[0] in LOOP_NAMES and len(path) == 1:
        return env_name(path[0])  # FLOWCTL_ITEM, FLOWCTL_INDEX in a for_each branch
    return None


def to_text(value: Any) -> str:
    """How a value is written into an argument or an environment variable."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class StepRef:
    """A step as `${{ steps.ID.* }}` references see it: its kind (None if invalid), its place."""

    kind: str | None
    index: int


def reference_problem(
    path: tuple[str, ...],
    index: int | None,
    *,
    inputs: Collection[str],
    steps: Mapping[str, StepRef],
    signals: Mapping[str, list[int]],
    loop: bool = False,
) -> str | None:
    """Why `path` cannot be used in step `index` (None: the workflow's env); None if it can.

    Inputs can be used anywhere; step values and signals only from earlier steps; `item`
    and `index` only in the values of a `for_each` step (`loop`).
    """
    shown = "${{ " + ".".join(path) + " }}"
    root = path[0]
    if root in LOOP_NAMES:
        if not loop:
            return f"{shown}: {root} is known only in the values of a for_each step"
        if root == "index" and len(path) > 1:
            return f"{shown}: index is a number, it has no fields"
        return None
    if root == "input":
        if len(path) < 2:
            return f"{shown}: name the input, like input.user"
        name = path[1]
        if name not in inputs:
            declared = ", ".join(inputs) or "none"
            hint = did_you_mean(name, tuple(inputs))
            return f"{shown}: unknown input {name!r}{hint}; declared inputs: {declared}"
        return None
    if root not in ("steps", "signal"):
        hint = did_you_mean(root, ("input", "steps", "signal"))
        return (
            f"{shown}: unknown value {root!r}{hint}; use input.NAME, "
            "steps.ID.output, steps.ID.json.FIELD, steps.ID.exit_code or signal.NAME"
        )
    if index is None:
        return f"{shown}: the workflow's env can only use input values"
    if root == "signal":
        return _signal_problem(shown, path, index, signals)
    if len(path) < 3:
        return f"{shown}: name what you want, like steps.ID.output"
    step_id, attr = path[1], path[2]
    info = steps.get(step_id)
    if info is None:
        hint = did_you_mean(step_id, tuple(steps))
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
        hint = did_you_mean(attr, attrs)
        return f"{shown}: {info.kind} steps have no {attr!r}{hint}; available: {', '.join(attrs)}"
    if len(path) > 3 and attr not in DEEP_ATTRS[info.kind]:
        extra = "; use json.FIELD" if info.kind == "run" and attr == "output" else ""
        return f"{shown}: {attr} is a plain value, it has no fields{extra}"
    return None


def _signal_problem(
    shown: str, path: tuple[str, ...], index: int, signals: Mapping[str, list[int]]
) -> str | None:
    if len(path) < 2:
        return f"{shown}: name the signal, like signal.approved"
    name = path[1]
    indices = signals.get(name)
    if not indices:
        hint = did_you_mean(name, tuple(signals))
        return f"{shown}: no step waits for signal {name!r}{hint}"
    if min(indices) >= index:
        return (
            f"{shown}: signal {name!r} is waited for later (steps[{min(indices)}]); "
            "only signals received by earlier steps can be used"
        )
    return None


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
# the whole `if:` grammar, in the words of an error message (README: YAML workflows)
CONDITION_FORMS = (
    "an `if:` is `VALUE`, `!VALUE`, `VALUE == VALUE` or `VALUE != VALUE`; the operators are"
    " ==, != and a leading ! (no <, >, and/or: use separate steps)"
)


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
        raise ExpressionError(f"expected a condition, got {describe(value)}")
    text = value.strip()
    if not text:
        raise ExpressionError("the condition is empty")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExpressionError(
                f"cannot read the condition {text!r} at {text[pos:]!r}: {CONDITION_FORMS}"
            )
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
        raise ExpressionError(f"{text!r}: {CONDITION_FORMS}")
    right = _term(tokens[2], text)
    return Condition(text=text, left=left, op=tokens[1][1], right=right, negate=negate)


def _term(token: tuple[str, str], text: str) -> Term:
    kind, raw = token
    if kind == "expr":
        path = parse_path(raw[3:-2])
        if path is None:
            raise ExpressionError(bad_expression(raw))
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
# Resolving values while a workflow runs


def step_record(output: Any, *, skipped: bool = False) -> dict[str, Any]:
    """What `${{ steps.ID.* }}` sees of a finished (or skipped) step; keys as in STEP_ATTRS."""
    return {
        "output": output,
        "json": output,
        "exit_code": None,
        "failed": False,
        "error": None,
        "skipped": skipped,
    }


@dataclass
class Scope:
    """The values `${{ }}` can name in one pass of a workflow: inputs, step records, signals.

    `steps` maps a step id to its `step_record`; `signals` maps a signal name to the payload
    of the last `wait_signal` for it.
    """

    inputs: dict[str, Any]
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    signals: dict[str, Any] = field(default_factory=dict)
    loop: dict[str, Any] | None = None  # {"item": ..., "index": ...} in a for_each branch

    def branch(self, item: Any, index: int) -> Scope:
        """This scope for one branch of a for_each step: `item` and `index` known too."""
        return Scope(self.inputs, self.steps, self.signals, {"item": item, "index": index})

    def lookup(self, path: tuple[str, ...]) -> Any:
        """The value at a dotted path, or an ExpressionError saying what is missing."""
        shown = "${{ " + ".".join(path) + " }}"
        root = path[0]
        if root == "input":
            if path[1] not in self.inputs:
                raise ExpressionError(f"{shown}: unknown input {path[1]!r}")
            value = self.inputs[path[1]]
            rest = path[2:]
        elif root == "steps":
            record = self.steps.get(path[1])
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
        elif root in LOOP_NAMES and self.loop is not None:
            value = self.loop[root]
            rest = path[1:]
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
                    f"{shown}: {here} is {json_type(value)}, it has no field {key!r}"
                )
        return value

    def render(self, value: Any) -> Any:
        """Substitute `${{ }}`: a whole-value expression keeps its JSON type."""
        if isinstance(value, str):
            if "${{" not in value:
                return value
            whole = _WHOLE_EXPR.fullmatch(value)
            if whole and "${{" not in whole.group(1):
                return self.lookup(_checked_path(whole.group(0), whole.group(1)))
            return _EXPR.sub(
                lambda m: to_text(self.lookup(_checked_path(m.group(0), m.group(1)))), value
            )
        if isinstance(value, list):
            return [self.render(item) for item in value]
        if isinstance(value, dict):
            return {key: self.render(item) for key, item in value.items()}
        return value

    def text(self, value: Any) -> str:
        """`render`, then written as text (for arguments, env values and paths)."""
        return to_text(self.render(value))

    def test(self, condition: Condition) -> bool:
        """Whether an `if:` condition holds."""
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


def _checked_path(whole: str, inner: str) -> tuple[str, ...]:
    path = parse_path(inner)
    if path is None:
        raise ExpressionError(bad_expression(whole))
    return path


# ---------------------------------------------------------------------------------------
# Words for messages


def did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    """` (did you mean 'x'?)` for the closest choice, or "" when none is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


def describe(value: Any) -> str:
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
