"""YAML workflows: validation messages, inputs, substitution, injection safety, conditions, steps.

Handlers run under a FakeContext (below) that implements the replay Context's interface
without the engine; the engine integration is tested elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowctl.durations import parse_duration
from flowctl.errors import (
    CommandFailedError,
    CommandTimeoutError,
    InputError,
    SignalTimeoutError,
    UsageError,
    ValidationError,
)
from flowctl.retry import StepOptions, options_of
from flowctl.yamlflow import (
    ExpressionError,
    YamlWorkflow,
    convert_inputs,
    env_name,
    load_yaml,
    load_yaml_file,
    parse_condition,
    truthy,
    values_equal,
)

ROOT = Path(__file__).resolve().parent.parent
MISSING: Any = object()


class FakeContext:
    """Just enough of the replay Context: steps run once and are recorded, waits are canned."""

    def __init__(
        self,
        cwd: Path | str | None = None,
        signals: dict[str, Any] | None = None,
        children: dict[str, Any] | None = None,
    ) -> None:
        self.run_id = "run-123"
        self.workflow = "test"
        self.input: dict[str, Any] = {}
        self.attempt = 1
        self.cwd = str(cwd) if cwd is not None else None
        self.signals = signals or {}
        self.children = children or {}
        self.calls: list[tuple[Any, ...]] = []
        self.results: dict[str, Any] = {}
        self.errors: dict[str, BaseException] = {}
        self.options: dict[str, StepOptions] = {}

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        assert name not in self.results and name not in self.errors, f"step {name} ran twice"
        self.calls.append(("step", name))
        self.options[name] = options_of(fn)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self.errors[name] = exc
            raise
        self.results[name] = json.loads(json.dumps(result))  # must be JSON
        return self.results[name]

    def sleep(self, duration: Any) -> None:
        self.calls.append(("sleep", parse_duration(duration)))

    def sleep_until(self, when: datetime | float) -> None:
        self.calls.append(("sleep_until", when))

    def wait_signal(self, name: str, timeout: Any = None, default: Any = MISSING) -> Any:
        self.calls.append(("signal", name, timeout))
        if name in self.signals:
            return self.signals[name]
        if default is not MISSING:
            return default
        raise SignalTimeoutError(f"no signal {name!r} within {timeout}")

    def child(self, target: str, input: dict[str, Any] | None = None) -> Any:
        self.calls.append(("child", target, input))
        return self.children.get(target, {"child": "done"})

    def now(self) -> datetime:
        return datetime(2030, 1, 1, tzinfo=UTC)

    @property
    def cancelled(self) -> bool:
        return False

    def check(self) -> None:
        return None

    def interruption(self) -> BaseException | None:
        return None


def wf(text: str, path: str = "wf.yaml") -> YamlWorkflow:
    return load_yaml(textwrap.dedent(text), path)


def problems(text: str) -> list[str]:
    with pytest.raises(ValidationError) as info:
        wf(text)
    assert info.value.exit_code == 2
    return info.value.problems


def one_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


def run(workflow: YamlWorkflow, ctx: FakeContext | None = None, **inputs: Any) -> dict[str, Any]:
    return workflow.handler(ctx or FakeContext(), **inputs)


# ---------------------------------------------------------------------------------------
# Validation: one class of mistake at a time


def test_unknown_step_key_with_did_you_mean() -> None:
    found = one_problem(
        """\
        steps:
          - id: a
            run: [echo, hi]
            tiemout: 5s
        """
    )
    assert found == (
        "wf.yaml:4:5: steps[0].tiemout: unknown key 'tiemout' (did you mean 'timeout'?)"
    )


def test_unknown_top_level_key_with_did_you_mean() -> None:
    found = one_problem(
        """\
        inputs: {user: str}
        steps:
          - run: [echo, hi]
        """
    )
    assert found == "wf.yaml:1:1: inputs: unknown key 'inputs' (did you mean 'input'?)"


def test_unknown_key_without_a_close_match_lists_the_allowed_ones() -> None:
    found = one_problem(
        """\
        steps:
          - run: [echo, hi]
            zzz: 1
        """
    )
    assert found.startswith("wf.yaml:3:5: steps[0].zzz: unknown key 'zzz'; allowed: run, call")


def test_wrong_types() -> None:
    found = problems(
        """\
        name: t
        max_attempts: lots
        steps:
          - id: a
            run: {program: echo}
          - id: b
            run: [echo]
            retry: {max_attempts: three}
            continue_on_error: "yes please"
        """
    )
    assert found == [
        "wf.yaml:2:15: max_attempts: expected a whole number, got a string ('lots')",
        "wf.yaml:5:10: steps[0].run: expected a list of arguments (no shell) or a shell string, "
        "got a mapping",
        "wf.yaml:8:27: steps[1].retry.max_attempts: expected a whole number, "
        "got a string ('three')",
        "wf.yaml:9:24: steps[1].continue_on_error: expected true or false, "
        "got a string ('yes please')",
    ]


def test_bad_duration_quotes_the_duration_error() -> None:
    found = problems(
        """\
        steps:
          - sleep: soon
          - run: [echo]
            timeout: 5 parsecs
        """
    )
    assert len(found) == 2
    assert found[0].startswith("wf.yaml:2:12: steps[0].sleep: invalid duration 'soon': use seconds")
    assert found[1].startswith(
        "wf.yaml:4:14: steps[1].timeout: invalid duration '5 parsecs': use seconds"
    )


def test_duplicate_step_id() -> None:
    found = one_problem(
        """\
        steps:
          - id: check
            run: [echo, 1]
          - id: check
            run: [echo, 2]
        """
    )
    assert found == (
        "wf.yaml:4:9: steps[1].id: duplicate step id 'check'; steps[0] already uses it"
    )


def test_unknown_step_reference_with_did_you_mean() -> None:
    found = one_problem(
        """\
        steps:
          - id: check
            run: [echo, hi]
          - run: [echo, "${{ steps.chek.output }}"]
        """
    )
    assert found == (
        "wf.yaml:4:17: steps[1].run[1]: ${{ steps.chek.output }}: unknown step 'chek' "
        "(did you mean 'check'?)"
    )


def test_forward_step_reference() -> None:
    found = one_problem(
        """\
        steps:
          - run: [echo, "${{ steps.later.output }}"]
          - id: later
            run: [echo, hi]
        """
    )
    assert found == (
        "wf.yaml:2:17: steps[0].run[1]: ${{ steps.later.output }}: step 'later' comes later "
        "(steps[1]); only earlier steps can be used"
    )


def test_unknown_input_reference() -> None:
    found = one_problem(
        """\
        input: {user: str}
        steps:
          - run: [echo, "${{ input.usr }}"]
        """
    )
    assert found == (
        "wf.yaml:3:17: steps[0].run[1]: ${{ input.usr }}: unknown input 'usr' "
        "(did you mean 'user'?); declared inputs: user"
    )


def test_expression_in_a_shell_string_names_the_env_var() -> None:
    found = one_problem(
        """\
        input: {user: str}
        steps:
          - run: echo "hello ${{ input.user }}"
        """
    )
    assert found.startswith("wf.yaml:3:10: steps[0].run: ${{ input.user }} is not allowed in a")
    assert found.endswith('use "$FLOWCTL_INPUT_USER" instead of ${{ input.user }}')


def test_expression_in_a_shell_string_for_a_step_output_and_a_json_field() -> None:
    found = problems(
        """\
        steps:
          - id: check
            run: [echo, '{"a": 1}']
          - run: 'echo ${{ steps.check.output }} ${{ steps.check.json.a }}'
        """
    )
    assert len(found) == 2
    assert 'use "$FLOWCTL_STEP_CHECK_OUTPUT" instead' in found[0]
    assert 'env: {VALUE: "${{ steps.check.json.a }}"}' in found[1]


def test_yaml_syntax_error_has_line_and_column() -> None:
    found = one_problem(
        """\
        steps:
          - run: [echo, hi
          - sleep: 5s
        """
    )
    assert found == (
        "wf.yaml:3:10: yaml: syntax error: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 2, column 10)"
    )


def test_yaml_tab_error() -> None:
    found = one_problem("steps:\n\t- run: [echo]\n")
    assert found.startswith("wf.yaml:2:1: yaml: syntax error:")


def test_yaml_quoting_hints() -> None:
    bang = one_problem("input: {f: bool}\nsteps:\n  - run: [echo]\n    if: !${{ input.f }}\n")
    assert bang.startswith("wf.yaml:4:11: yaml: syntax error:")
    assert bang.endswith('quote a value that starts with ! (like "!${{ input.flag }}")')
    flow = one_problem("steps:\n  - call: a:b\n    with: {a: ${{ input.n }}}\n")
    assert flow.endswith("put a value containing ${{ }} in quotes")
    on_key = one_problem("steps:\n  - run: [echo]\n    on: 1\n")
    assert on_key == (
        "wf.yaml:3:5: yaml: keys must be strings, got 'on'; YAML reads on/off/yes/no as "
        "true/false, so quote it"
    )


def test_duplicate_yaml_keys() -> None:
    found = one_problem(
        """\
        steps:
          - run: [echo]
            run: [true]
        """
    )
    assert found == "wf.yaml:3:5: yaml: duplicate key 'run'"


def test_all_problems_are_reported_at_once_in_file_order() -> None:
    found = problems(
        """\
        nme: x
        input:
          count: integer
        steps:
          - run: [echo]
            retry: {backof: 1s}
          - wait_signal: _internal
          - call: not-a-callable
          - sleep_until: 2030-01-01T09:00:00
          - id: Bad Id!
            sleep: 1s
        """
    )
    assert [p.split(": ")[0] for p in found] == [
        "wf.yaml:1:1",
        "wf.yaml:3:10",
        "wf.yaml:6:13",
        "wf.yaml:7:18",
        "wf.yaml:8:11",
        "wf.yaml:9:18",
        "wf.yaml:10:9",
    ]
    assert "(did you mean 'name'?)" in found[0]
    assert "input.count: unknown type 'integer' (did you mean 'int'?)" in found[1]
    assert "(did you mean 'backoff'?)" in found[2]
    assert "reserved" in found[3]
    assert "expected module:function" in found[4]
    assert "has no UTC offset" in found[5]
    assert "invalid step id 'Bad Id!'" in found[6]


def test_step_kind_mistakes() -> None:
    found = problems(
        """\
        steps:
          - id: nothing
          - run: [echo]
            call: mod:fn
          - run: [echo]
            with: {a: 1}
          - wait_signal: ok
            on_timeout: ignore
          - sleep: 5s
            timeout: 1s
        """
    )
    assert found == [
        "wf.yaml:2:5: steps[0]: a step needs one of: run, call, sleep, sleep_until, "
        "wait_signal, workflow, parallel",
        "wf.yaml:4:5: steps[1].call: a step takes exactly one of run, call, sleep, sleep_until, "
        "wait_signal, workflow, parallel; this one has run and call",
        "wf.yaml:6:5: steps[2].with: `with` does not apply to run steps (only to call and "
        "workflow)",
        "wf.yaml:8:17: steps[3].on_timeout: expected fail or continue, got 'ignore'",
        "wf.yaml:10:5: steps[4].timeout: `timeout` does not apply to sleep steps (only to run "
        "and call and wait_signal)",
    ]


def test_expressions_are_paths_not_code() -> None:
    found = one_problem(
        """\
        input: {user: str}
        steps:
          - run: [echo, "${{ input.user + __import__('os').system('id') }}"]
        """
    )
    assert "only dotted paths are allowed" in found and "no code" in found


def test_references_to_outputless_steps_and_signals() -> None:
    found = problems(
        """\
        steps:
          - id: nap
            sleep: 1s
          - run: [echo, "${{ steps.nap.output }}", "${{ signal.approved.by }}"]
          - wait_signal: approved
          - id: r
            run: [echo]
          - run: [echo, "${{ steps.r.stdout }}", "${{ steps.r.output.x }}"]
        """
    )
    assert len(found) == 4
    assert "step 'nap' is a sleep step and has no output" in found[0]
    assert "signal 'approved' is waited for later (steps[2])" in found[1]
    assert "run steps have no 'stdout'" in found[2]
    assert "output is a plain value, it has no fields; use json.FIELD" in found[3]


def test_workflow_env_can_only_use_inputs() -> None:
    found = one_problem(
        """\
        input: {user: str}
        env:
          USER_ID: "${{ input.user }}"
          OTHER: "${{ steps.a.output }}"
        steps:
          - id: a
            run: [echo]
        """
    )
    assert found.startswith("wf.yaml:4:10: env.OTHER: ${{ steps.a.output }}: the workflow's env")


def test_empty_and_shapeless_files() -> None:
    assert one_problem("") == (
        "wf.yaml:1:1: workflow: the file is empty; expected a mapping with `steps:`"
    )
    assert one_problem("- a\n- b\n").startswith("wf.yaml:1:1: workflow: expected a mapping")
    assert one_problem("name: x\n") == "wf.yaml:1:1: steps: missing `steps:` (a list of steps)"
    assert one_problem("steps: []\n") == "wf.yaml:1:8: steps: needs at least one step"


def test_input_spec_mistakes() -> None:
    found = problems(
        """\
        input:
          count: {type: int, default: many}
          flag: {type: bool, default: true, required: true}
          user:
        steps:
          - run: [echo]
        """
    )
    assert len(found) == 3
    assert "input.count.default: input 'count' must be a whole number (int)" in found[0]
    assert "input.flag.required: an input with a default is not required" in found[1]
    assert "input.user: expected a type (str, int, float, bool, list, dict)" in found[2]


def test_validation_error_message_is_one_line_with_a_count() -> None:
    with pytest.raises(ValidationError) as info:
        wf("steps:\n  - sleep: x\n  - sleep: y\n")
    assert str(info.value).endswith("(and 1 more)")
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------
# The model


def test_workflow_fields_and_pinning_hash() -> None:
    text = "description: hi\nmax_attempts: 5\nschedule: {cron: '0 9 * * *'}\nsteps:\n  - sleep: 1\n"
    workflow = load_yaml(text, "some/dir/nightly.yaml")
    assert workflow.name == "nightly"  # the file stem when `name` is absent
    assert workflow.description == "hi"
    assert workflow.max_attempts == 5
    assert workflow.schedule == {"cron": "0 9 * * *"}
    assert workflow.text == text
    assert workflow.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert workflow.steps[0].id == "step-1" and workflow.steps[0].auto_id


def test_env_name() -> None:
    assert env_name("input", "user") == "FLOWCTL_INPUT_USER"
    assert env_name("step", "check-mail", "exit_code") == "FLOWCTL_STEP_CHECK_MAIL_EXIT_CODE"


def test_env_name_collisions_are_refused() -> None:
    found = one_problem(
        """\
        steps:
          - id: check-a
            run: [echo]
          - id: check_a
            run: [echo]
        """
    )
    assert "would share the environment variables FLOWCTL_STEP_CHECK_A_*" in found


# ---------------------------------------------------------------------------------------
# Inputs


TYPED = """\
input:
  name: str
  count: int
  ratio: {type: float, default: 0.5}
  verbose: {type: bool, default: false}
  tags: {type: list, default: []}
  meta: {type: dict, required: false}
steps:
  - run: [echo]
"""


def test_convert_inputs_applies_types_and_defaults() -> None:
    workflow = wf(TYPED)
    assert convert_inputs(workflow, {"name": "ana", "count": "42"}) == {
        "name": "ana",
        "count": 42,
        "ratio": 0.5,
        "verbose": False,
        "tags": [],
        "meta": None,
    }
    converted = convert_inputs(
        workflow,
        {
            "name": "42",
            "count": 7,
            "ratio": "2",
            "verbose": "yes",
            "tags": '["a", "b"]',
            "meta": '{"k": 1}',
        },
    )
    assert converted == {
        "name": "42",
        "count": 7,
        "ratio": 2.0,
        "verbose": True,
        "tags": ["a", "b"],
        "meta": {"k": 1},
    }
    for word, expected in (("true", True), ("0", False), ("No", False), ("1", True)):
        assert convert_inputs(workflow, {"name": "x", "count": 1, "verbose": word})["verbose"] is (
            expected
        )


def test_convert_inputs_defaults_are_copies() -> None:
    workflow = wf(TYPED)
    first = convert_inputs(workflow, {"name": "a", "count": 1})
    first["tags"].append("changed")
    assert convert_inputs(workflow, {"name": "a", "count": 1})["tags"] == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"count": 1}, "missing required input 'name' (str)"),
        (
            {"name": "a", "count": "forty"},
            "input 'count' must be a whole number (int), got 'forty'",
        ),
        ({"name": "a", "count": True}, "input 'count' must be a whole number (int), got True"),
        ({"name": 5, "count": 1}, "input 'name' must be a string (str), got 5 (int)"),
        ({"name": "a", "count": 1, "verbose": "maybe"}, "input 'verbose' must be true or false"),
        ({"name": "a", "count": 1, "tags": "[1,"}, "input 'tags' must be a JSON list (list)"),
        ({"name": "a", "count": 1, "meta": "[1]"}, "input 'meta' must be a JSON object (dict)"),
        ({"name": "a", "count": 1, "cuont": 2}, "unknown input 'cuont' for workflow 'wf' (did"),
    ],
)
def test_convert_inputs_rejects(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        convert_inputs(wf(TYPED), raw)
    assert message in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_input_did_you_mean() -> None:
    with pytest.raises(InputError, match=r"did you mean 'count'\?"):
        convert_inputs(wf(TYPED), {"name": "a", "count": 1, "cuont": 2})


# ---------------------------------------------------------------------------------------
# Substitution and injection safety


def test_a_value_fills_exactly_one_argument(tmp_path: Path) -> None:
    workflow = wf(
        """\
        input: {x: str, n: int, tags: {type: list, default: [a, b]}}
        steps:
          - id: show
            run: [printf, "%s|", "${{ input.x }}", "pre-${{ input.n }}-post", "${{ input.tags }}"]
        """
    )
    result = run(workflow, FakeContext(cwd=tmp_path), x="a b; c * $HOME", n="3")
    assert result == {"steps": {"show": 'a b; c * $HOME|pre-3-post|["a","b"]|'}}


@pytest.mark.parametrize("evil", ['"; touch pwned #', "$(touch pwned)", "`touch pwned`"])
def test_injection_is_inert(tmp_path: Path, evil: str) -> None:
    workflow = wf(
        """\
        input: {user: str}
        steps:
          - id: shell
            run: echo "$FLOWCTL_INPUT_USER"
          - id: argv
            run: [echo, "${{ input.user }}"]
          - id: argv_sh
            run: [sh, -c, 'echo "$1"', sh, "${{ input.user }}"]
        """
    )
    ctx = FakeContext(cwd=tmp_path)
    result = run(workflow, ctx, user=evil)
    assert not (tmp_path / "pwned").exists()
    assert result["steps"] == {"shell": evil, "argv": evil, "argv_sh": evil}
    assert ctx.results["shell"]["stdout"] == evil + "\n"


def test_with_values_keep_json_types_and_call_steps(tmp_path: Path) -> None:
    (tmp_path / "yamlflow_helpers_t1.py").write_text(
        "def add(a, b, label=''):\n    return {'sum': a + b, 'label': label}\n"
    )
    workflow = wf(
        """\
        input: {n: int}
        steps:
          - id: total
            call: yamlflow_helpers_t1:add
            with: {a: "${{ input.n }}", b: 2, label: "n=${{ input.n }}"}
          - id: echo
            run: [echo, "${{ steps.total.output.sum }}", "${{ steps.total.json.label }}"]
          - id: env
            run: echo "$FLOWCTL_STEP_TOTAL_OUTPUT"
        """
    )
    result = run(workflow, FakeContext(cwd=tmp_path), n="40")
    assert result["steps"] == {
        "total": {"sum": 42, "label": "n=40"},
        "echo": "42 n=40",
        "env": '{"sum":42,"label":"n=40"}',
    }


def test_exported_variables(tmp_path: Path) -> None:
    workflow = wf(
        """\
        input: {user_name: str, n: {type: int, default: 3}}
        env: {GREETING: "hi ${{ input.user_name }}", PLAIN: 5}
        steps:
          - id: first
            run: [echo, '{"k": [1, 2]}']
          - wait_signal: go
          - id: dump
            run: env
            env: {FROM_JSON: "${{ steps.first.json.k.1 }}"}
        """
    )
    ctx = FakeContext(cwd=tmp_path, signals={"go": {"by": "ana"}})
    result = run(workflow, ctx, user_name="ana")
    env = dict(line.split("=", 1) for line in result["steps"]["dump"].splitlines() if "=" in line)
    assert env["FLOWCTL_RUN_ID"] == "run-123"
    assert env["FLOWCTL_INPUT_USER_NAME"] == "ana"
    assert env["FLOWCTL_INPUT_N"] == "3"
    assert env["FLOWCTL_STEP_FIRST_OUTPUT"] == '{"k": [1, 2]}'
    assert env["FLOWCTL_STEP_FIRST_EXIT_CODE"] == "0"
    assert env["FLOWCTL_SIGNAL_GO"] == '{"by": "ana"}'
    assert env["GREETING"] == "hi ana"
    assert env["PLAIN"] == "5"
    assert env["FROM_JSON"] == "2"
    assert "PATH" in env


def test_step_cwd_defaults_to_the_workflow_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    workflow = wf(
        """\
        steps:
          - id: here
            run: [pwd]
          - id: sub
            run: [pwd]
            cwd: sub
        """
    )
    result = run(workflow, FakeContext(cwd=tmp_path))
    assert result["steps"] == {"here": str(tmp_path), "sub": str(tmp_path / "sub")}


# ---------------------------------------------------------------------------------------
# Conditions


def test_condition_grammar() -> None:
    cond = parse_condition("${{ steps.check.json.replied }} == false")
    assert cond.left.path == ("steps", "check", "json", "replied")
    assert cond.op == "==" and cond.right is not None and cond.right.literal is False
    assert parse_condition("! input.flag").negate
    assert parse_condition("input.n != 3").right.literal == 3  # type: ignore[union-attr]
    assert parse_condition("input.s == 'a b'").right.literal == "a b"  # type: ignore[union-attr]
    assert parse_condition('input.s == "x\\"y"').right.literal == 'x"y'  # type: ignore[union-attr]
    assert parse_condition(True).left.literal is True
    for bad in ("input.a and input.b", "foo == 1", "input.a ==", "== 1", "!", "${{ 1 + 1 }}"):
        with pytest.raises(ExpressionError):
            parse_condition(bad)


def test_truthiness_and_equality() -> None:
    for value in (None, False, 0, "", " false ", "0", "no", "NULL", [], {}):
        assert not truthy(value), value
    for value in (True, 1, "yes", "ok", [0], {"a": 1}):
        assert truthy(value), value
    assert values_equal("42", 42) and values_equal(42, "42.0")
    assert values_equal("true", True) and not values_equal(1, True)
    assert not values_equal(None, "") and values_equal(None, None)
    assert values_equal({"a": [1]}, {"a": [1]})


def test_if_runs_or_skips_steps(tmp_path: Path) -> None:
    workflow = wf(
        """\
        input: {flag: bool, who: {type: str, default: ana}}
        steps:
          - id: check
            run: [echo, '{"replied": false, "count": 2}']
          - id: when_flag
            if: ${{ input.flag }}
            run: [echo, flag]
          - id: when_not_flag
            if: "!${{ input.flag }}"
            run: [echo, not-flag]
          - id: not_replied
            if: ${{ steps.check.json.replied }} == false
            run: [echo, follow-up]
          - id: count_is_two
            if: steps.check.json.count == "2"
            run: [echo, two]
          - id: named
            if: input.who != 'ana'
            run: [echo, not-ana]
          - id: after
            run: [echo, "[${{ steps.named.output }}]"]
        """
    )
    ctx = FakeContext(cwd=tmp_path)
    result = run(workflow, ctx, flag="false")
    assert result["steps"] == {
        "check": '{"replied": false, "count": 2}',
        "when_not_flag": "not-flag",
        "not_replied": "follow-up",
        "count_is_two": "two",
        "after": "[]",
    }
    assert [c[1] for c in ctx.calls] == [
        "check",
        "when_not_flag",
        "not_replied",
        "count_is_two",
        "after",
    ]  # skipped steps record nothing


def test_if_references_are_validated() -> None:
    found = one_problem(
        """\
        steps:
          - if: steps.later.output == 1
            run: [echo]
          - id: later
            run: [echo]
        """
    )
    assert found.startswith("wf.yaml:2:9: steps[0].if: ${{ steps.later.output }}: step 'later'")


@pytest.mark.parametrize(
    ("condition", "read"),
    [
        ("steps.a.output > 3", "cannot read the condition 'steps.a.output > 3' at '> 3': "),
        ("steps.a.output = 1", "cannot read the condition 'steps.a.output = 1' at '= 1': "),
        ("steps.a.output == 1 and 2", "'steps.a.output == 1 and 2': "),
        ("steps.a.output ==", "'steps.a.output ==': "),
    ],
)
def test_a_condition_it_cannot_read_lists_the_operators(condition: str, read: str) -> None:
    """Issue 39: the error named no operator, and the README had no `if:` grammar."""
    found = one_problem(
        f"""\
        steps:
          - id: a
            run: [echo]
          - if: {condition}
            run: [echo]
        """
    )
    assert found == (
        f"wf.yaml:4:9: steps[1].if: {read}an `if:` is `VALUE`, `!VALUE`, `VALUE == VALUE` or"
        " `VALUE != VALUE`; the operators are ==, != and a leading ! (no <, >, and/or: use"
        " separate steps)"
    )
    readme = (ROOT / "README.md").read_text()
    assert "`VALUE == VALUE` or `VALUE != VALUE` — those are all the operators" in readme


# ---------------------------------------------------------------------------------------
# Step kinds and options


def test_failing_step_raises_command_failed(tmp_path: Path) -> None:
    workflow = wf("steps:\n  - id: bad\n    run: echo oops >&2; exit 3\n")
    with pytest.raises(CommandFailedError) as info:
        run(workflow, FakeContext(cwd=tmp_path))
    assert info.value.exit_code == 3
    assert info.value.error_fields() == {"exit_code": 3, "stderr_tail": "oops\n"}


def test_continue_on_error_records_the_failure(tmp_path: Path) -> None:
    workflow = wf(
        """\
        steps:
          - id: bad
            run: exit 3
            continue_on_error: true
          - id: next
            run: echo "code=$FLOWCTL_STEP_BAD_EXIT_CODE"
          - id: cond
            if: steps.bad.failed
            run: [echo, "${{ steps.bad.exit_code }}"]
        """
    )
    result = run(workflow, FakeContext(cwd=tmp_path))
    assert result["steps"] == {"bad": None, "next": "code=3", "cond": "3"}
    assert result["failed"] == {
        "bad": {"type": "CommandFailed", "message": "command exited with code 3", "exit_code": 3}
    }


def test_retry_and_timeout_options_merge_over_defaults(tmp_path: Path) -> None:
    workflow = wf(
        """\
        defaults:
          retry: {max_attempts: 4, backoff: 2s}
          timeout: 1m
        steps:
          - id: a
            run: [true]
          - id: b
            run: [true]
            retry: 7
            timeout: 5s
          - id: c
            run: [true]
            retry: {multiplier: 3, jitter: 0.1}
        """
    )
    ctx = FakeContext(cwd=tmp_path)
    run(workflow, ctx)
    a, b, c = ctx.options["a"], ctx.options["b"], ctx.options["c"]
    assert (a.retry.max_attempts, a.retry.initial, a.timeout) == (
        4,
        timedelta(seconds=2),
        timedelta(minutes=1),
    )
    assert (b.retry.max_attempts, b.retry.initial, b.timeout) == (
        7,
        timedelta(seconds=2),
        timedelta(seconds=5),
    )
    assert (c.retry.max_attempts, c.retry.multiplier, c.retry.jitter) == (4, 3.0, 0.1)


def test_no_retry_by_default(tmp_path: Path) -> None:
    ctx = FakeContext(cwd=tmp_path)
    run(wf("steps:\n  - id: a\n    run: [true]\n"), ctx)
    assert ctx.options["a"].retry.max_attempts == 1 and ctx.options["a"].timeout is None


def test_step_timeout_kills_the_command(tmp_path: Path) -> None:
    workflow = wf("steps:\n  - id: slow\n    run: [sleep, 30]\n    timeout: 200ms\n")
    with pytest.raises(CommandTimeoutError, match=r"did not finish within its timeout of 0\.2s"):
        run(workflow, FakeContext(cwd=tmp_path))


def test_sleeps_signals_and_children(tmp_path: Path) -> None:
    workflow = wf(
        """\
        input: {at: str}
        steps:
          - sleep: 1h30m
          - sleep_until: "2030-01-31T09:00:00+01:00"
          - sleep_until: "${{ input.at }}"
          - id: approval
            wait_signal: approved
            timeout: 7d
          - id: maybe
            wait_signal: other
            timeout: 1s
            on_timeout: continue
          - id: child
            workflow: sub/child.yaml
            with: {by: "${{ signal.approved.by }}", whole: "${{ signal.approved }}"}
          - id: named
            workflow: other-workflow
        """
    )
    ctx = FakeContext(cwd=tmp_path, signals={"approved": {"by": "ana"}})
    result = run(workflow, ctx, at="2030-02-01T00:00:00Z")
    assert ctx.calls == [
        ("sleep", timedelta(hours=1, minutes=30)),
        ("sleep_until", datetime(2030, 1, 31, 8, 0, tzinfo=UTC)),
        ("sleep_until", datetime(2030, 2, 1, tzinfo=UTC)),
        ("signal", "approved", timedelta(days=7)),
        ("signal", "other", timedelta(seconds=1)),
        ("child", str(tmp_path / "sub/child.yaml"), {"by": "ana", "whole": {"by": "ana"}}),
        ("child", "other-workflow", None),
    ]
    assert result["steps"] == {
        "approval": {"by": "ana"},
        "maybe": None,
        "child": {"child": "done"},
        "named": {"child": "done"},
    }


def test_signal_timeout_fails_by_default() -> None:
    workflow = wf("steps:\n  - wait_signal: approved\n    timeout: 1s\n")
    with pytest.raises(SignalTimeoutError):
        run(workflow)


def test_sleep_until_without_offset_is_a_clear_runtime_error() -> None:
    workflow = wf('input: {at: str}\nsteps:\n  - sleep_until: "${{ input.at }}"\n')
    with pytest.raises(UsageError, match="has no UTC offset"):
        run(workflow, at="2030-01-01T09:00:00")


def test_missing_json_field_is_a_clear_runtime_error(tmp_path: Path) -> None:
    workflow = wf(
        """\
        steps:
          - id: a
            run: [echo, '{"x": 1}']
          - run: [echo, "${{ steps.a.json.y }}"]
        """
    )
    with pytest.raises(ExpressionError, match="has no key 'y'; keys: x"):
        run(workflow, FakeContext(cwd=tmp_path))


# ---------------------------------------------------------------------------------------
# The shipped examples


def test_followup_example_follows_up_only_without_a_reply() -> None:
    workflow = load_yaml_file(ROOT / "workflows" / "followup.yaml")
    assert workflow.name == "trial-followup"
    assert convert_inputs(workflow, {"user": "42"}) == {"user": "42"}
    silent = FakeContext(cwd=ROOT / "workflows")
    result = workflow.handler(silent, user="42")
    assert result["steps"] == {
        "welcome": "welcome 42",
        "reply": None,
        "followup": "following up with 42",
    }
    assert ("signal", "replied", timedelta(hours=72)) in silent.calls
    replied = FakeContext(cwd=ROOT / "workflows", signals={"replied": {"text": "thanks"}})
    result = workflow.handler(replied, user="42")
    assert result["steps"]["reply"] == {"text": "thanks"}
    assert "followup" not in result["steps"]


def test_report_example_runs_end_to_end() -> None:
    workflow = load_yaml_file(ROOT / "examples" / "report.yaml")
    ctx = FakeContext(cwd=ROOT / "examples")
    result = workflow.handler(ctx)
    facts = ctx.results["collect"]["json"]
    assert set(facts) == {"date", "time", "weekday"}
    assert result["steps"]["summary"] == (
        f"Report for team ops on {facts['date']} ({facts['weekday']})"
    )
