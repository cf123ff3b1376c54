"""A validated YAML workflow and how it runs: the step model, inputs, and the handler.

`flowctl.yamlflow` builds a `YamlWorkflow` from a file; this module is what runs it. Its
`handler` executes the steps in order under the replay Context, each executed step being
one durable call, so a crash never re-runs a finished step. Values between steps are
resolved by `flowctl.yamlflow.expressions`. No YAML here: a loaded workflow runs without the parser.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from flowctl.durations import parse_duration
from flowctl.errors import (
    DurableCallError,
    InputError,
    NonDeterminismError,
    StepFailedError,
    UsageError,
    mark_non_retryable,
)
from flowctl.flow.spec import Concurrency, Debounce
from flowctl.inputs import convert_value
from flowctl.retry import NO_RETRY, RetryPolicy, StepOptions, blocking, with_options
from flowctl.yamlflow.commands import run_command
from flowctl.yamlflow.expressions import (
    STEP_ATTRS,
    Condition,
    ExpressionError,
    Scope,
    describe,
    did_you_mean,
    env_name,
    step_record,
    to_text,
)

FindWorkflow = Callable[[str, str], str | None]
"""The target of the workflow of a name in a folder, if there is one: handed to a YAML
workflow by whoever loads it (flowctl.runtime.targets.find_workflow), since finding
workflows is not this package's job."""


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
    def map(
        self, name: str, fn: Callable[..., Any], items: Any, *, max_concurrency: int | None = None
    ) -> list[Any]: ...
    def parallel(
        self, name: str, calls: Any, *, max_concurrency: int | None = None
    ) -> list[Any]: ...
    def children(
        self, target: str, inputs: Any, *, max_concurrency: int | None = None
    ) -> list[Any]: ...
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
    secret: bool = False  # shown as *** everywhere; steps get the value as given


@dataclass(frozen=True)
class Defaults:
    """Step options that apply to every run/call step unless the step says otherwise."""

    retry: dict[str, Any] | None = None
    timeout: timedelta | None = None


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
    for_each: Any = None  # a list expression or a YAML list: run once per element
    max_concurrency: int | None = None
    branches: list[Step] = field(default_factory=list)  # a parallel block's steps
    limit: str | None = None  # the named limit each start of it takes

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
    schedule_places: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    max_attempts: int | None = None
    notify: dict[str, Any] | None = None  # `notify:`, checked; pinned by each run
    concurrency: Concurrency | None = None  # `concurrency:`: runs at once (per key)
    debounce: Debounce | None = None  # `debounce:`: starts collapsed while a key is quiet
    # Finds the workflow a `workflow:` step names (handed in by load_yaml's caller).
    find_workflow: FindWorkflow | None = field(default=None, repr=False, compare=False)

    def handler(self, ctx: StepContext, /, **input: Any) -> dict[str, Any]:
        """Run the steps in order; each executed step is one durable call."""
        return _Runner(self, ctx, convert_inputs(self, input)).run()

    def step_options(self, step: Step) -> StepOptions:
        """The step's retry/timeout merged over the workflow's `defaults`."""
        retry = merged_retry(self.defaults.retry, step.retry)
        policy = RetryPolicy.make(**retry) if retry is not None else NO_RETRY
        timeout = step.timeout if step.timeout is not None else self.defaults.timeout
        if step.kind not in ("run", "call"):
            timeout = None
        return StepOptions(retry=policy, timeout=timeout, limit=step.limit)


def merged_retry(
    defaults: dict[str, Any] | None, step: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A step's `retry` keys laid over the workflow's `defaults.retry`; None if neither."""
    if defaults is None and step is None:
        return None
    return {**(defaults or {}), **(step or {})}


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
            hint = did_you_mean(str(name), tuple(wf.inputs))
            raise InputError(
                f"unknown input {name!r} for workflow {wf.name!r}{hint}; declared inputs: "
                f"{declared}"
            )
    result: dict[str, Any] = {}
    for name, spec in wf.inputs.items():
        if name in raw and raw[name] is not None:
            result[name] = convert_value(name, spec.type, raw[name], secret=spec.secret)
        elif name in raw and not spec.required:
            result[name] = None
        elif spec.default is not None or not spec.required:
            result[name] = copy.deepcopy(spec.default)
        else:
            raise _missing(wf.name, name, spec.type)
    return result


def _missing(workflow: str, name: str, type_: str) -> InputError:
    """A required input not given: the field `input.NAME`, each front end's way to give it
    (the CLI: `-i NAME=VALUE`)."""
    return InputError(
        lambda f: (
            f"missing required input {name!r} ({type_}) for workflow {workflow!r}:"
            f" give {f('input.' + name)}"
        ),
        field=f"input.{name}",
    )


# ---------------------------------------------------------------------------------------
# Running


def parse_sleep_until(value: Any) -> datetime | float:
    """A sleep_until value: an ISO-8601 time with a UTC offset, or epoch seconds."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | datetime):
        raise UsageError(f"expected an ISO-8601 time, got {describe(value)}")
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
        self.scope = Scope(inputs)

    def run(self) -> dict[str, Any]:
        records = self.scope.steps
        failed: dict[str, dict[str, Any]] = {}
        for step in self.wf.steps:
            self.ctx.check()
            if step.condition is not None and not self.scope.test(step.condition):
                records[step.id] = step_record(None, skipped=True)
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
                records[step.id] = {
                    **step_record(None),
                    "exit_code": exit_code,
                    "failed": True,
                    "error": message,
                }
                failed[step.id] = {"type": kind, "message": message, "exit_code": exit_code}
                continue
            if output is not None:
                records[step.id] = output
        result: dict[str, Any] = {
            "steps": {
                step_id: record["output"]
                for step_id, record in records.items()
                if not record["skipped"]
            }
        }
        if failed:
            result["failed"] = failed
        return result

    def flowctl_env(self) -> dict[str, str]:
        """The FLOWCTL_* variables every run step gets (see `flowctl.yamlflow.expressions`).

        Each value is one the OS can pass (see `env_value`): an earlier step's binary or
        huge output must not make every later command fail to start.
        """
        env = {
            "FLOWCTL_RUN_ID": str(self.ctx.run_id),
            "FLOWCTL_WORKFLOW": str(self.wf.name),
        }
        values: list[tuple[str, str]] = []
        for name, value in self.scope.inputs.items():
            values.append((env_name("input", name), to_text(value)))
        for step_id, record in self.scope.steps.items():
            if record["skipped"]:
                continue
            values.append((env_name("step", step_id, "output"), to_text(record["output"])))
            if record.get("exit_code") is not None:
                env[env_name("step", step_id, "exit_code")] = str(record["exit_code"])
        for name, payload in self.scope.signals.items():
            values.append((env_name("signal", name), json.dumps(payload, ensure_ascii=False)))
        for key, text in values:
            passed = env_value(key, text)
            if passed is not None:
                env[key] = passed
        return env

    # -- steps --------------------------------------------------------------------------

    def execute(self, step: Step) -> dict[str, Any] | None:
        """Run one step; returns its record for `${{ steps.ID.* }}` (None for sleeps)."""
        ctx = self.ctx
        if step.kind == "parallel":
            self.parallel_block(step)
            return None
        if step.for_each is not None:
            return self.for_each_step(step)
        if step.kind == "run":
            return self.run_step(step)
        if step.kind == "call":
            return self.call_step(step)
        if step.kind in ("sleep", "sleep_until"):
            value = self.scope.render(step.value)
            try:
                when = parse_duration(value) if step.kind == "sleep" else parse_sleep_until(value)
            except UsageError as exc:
                # Rendered from the input and recorded results: a retry renders it again.
                raise mark_non_retryable(
                    UsageError(f"step {step.id!r}: {step.kind}: {exc}")
                ) from None
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
            self.scope.signals[step.value] = payload
            return step_record(payload)
        if step.kind == "workflow":
            child_input = self.scope.render(step.with_) if step.with_ is not None else None
            if child_input is not None and not isinstance(child_input, dict):
                raise ExpressionError(f"step {step.id!r}: `with` must give a mapping")
            return step_record(ctx.child(self.child_target(step.value), child_input))
        raise AssertionError(f"unknown step kind {step.kind}")

    def run_step(self, step: Step) -> dict[str, Any]:
        return _run_record(self.ctx.step(step.id, self.run_body(step, self.scope)))

    def run_body(self, step: Step, scope: Scope) -> Callable[[], dict[str, Any]]:
        """The body of a run step, its values rendered in `scope`, with its options."""
        ctx = self.ctx
        text = scope.text
        command: list[str] | str = (
            step.value if isinstance(step.value, str) else [text(arg) for arg in step.value]
        )
        env = dict(os.environ)
        env.update({key: text(value) for key, value in self.wf.env.items()})
        env.update({key: text(value) for key, value in step.env.items()})
        env.update(self.flowctl_env())
        if scope.loop is not None:
            env["FLOWCTL_ITEM"] = to_text(scope.loop["item"])
            env["FLOWCTL_INDEX"] = str(scope.loop["index"])
        cwd = ctx.cwd
        if step.cwd is not None:
            cwd = os.path.join(ctx.cwd or os.getcwd(), text(step.cwd))
        options = self.wf.step_options(step)
        timeout = options.timeout.total_seconds() if options.timeout is not None else None

        def run() -> dict[str, Any]:
            result = run_command(
                command, env=env, cwd=cwd, timeout=timeout, should_stop=ctx.interruption
            )
            return result.to_json()

        return with_options(blocking(run), options)

    def call_step(self, step: Step) -> dict[str, Any]:
        return step_record(self.ctx.step(step.id, self.call_body(step, self.scope)))

    def call_body(self, step: Step, scope: Scope) -> Callable[[], Any]:
        """The body of a call step, its arguments rendered in `scope`, with its options."""
        kwargs = scope.render(step.with_) if step.with_ is not None else {}
        if not isinstance(kwargs, dict):
            raise ExpressionError(f"step {step.id!r}: `with` must give a mapping")
        target, folder = step.value, self.ctx.cwd

        def call() -> Any:
            return load_callable(target, folder)(**kwargs)

        return with_options(blocking(call), self.wf.step_options(step))

    # -- parallel branches ----------------------------------------------------------------

    def body(self, step: Step, scope: Scope) -> Callable[[], Any]:
        return self.run_body(step, scope) if step.kind == "run" else self.call_body(step, scope)

    def parallel_block(self, step: Step) -> None:
        """The block's steps run concurrently (ctx.parallel): each one's record under its
        own id afterwards."""
        calls = [self.body(branch, self.scope) for branch in step.branches]
        results = self.ctx.parallel(step.id, calls, max_concurrency=step.max_concurrency)
        for branch, result in zip(step.branches, results, strict=True):
            self.scope.steps[branch.id] = _record(branch.kind, result)

    def for_each_step(self, step: Step) -> dict[str, Any]:
        """The step once per element of its for_each list (`${{ item }}`, `${{ index }}`),
        concurrently; its record holds the list of their outputs."""
        items = self.scope.render(step.for_each)
        if not isinstance(items, list):
            raise ExpressionError(
                f"step {step.id!r}: for_each must give a list, got {describe(items)}"
            )
        limit = step.max_concurrency
        if step.kind == "workflow":
            inputs = [self.child_input(step, self.scope.branch(x, i)) for i, x in enumerate(items)]
            target = self.child_target(step.value)
            return step_record(self.ctx.children(target, inputs, max_concurrency=limit))
        calls = [self.body(step, self.scope.branch(x, i)) for i, x in enumerate(items)]
        results = self.ctx.parallel(step.id, calls, max_concurrency=limit)
        records = [_record(step.kind, r) for r in results]
        record = step_record([r["output"] for r in records])
        record["json"] = [r["json"] for r in records]
        return record

    def child_input(self, step: Step, scope: Scope) -> dict[str, Any]:
        child_input = scope.render(step.with_) if step.with_ is not None else {}
        if not isinstance(child_input, dict):
            raise ExpressionError(f"step {step.id!r}: `with` must give a mapping")
        return child_input

    def child_target(self, target: str) -> str:
        return child_target(target, self.ctx.cwd, self.wf.find_workflow)


def _run_record(result: dict[str, Any]) -> dict[str, Any]:
    record = step_record(str(result.get("stdout", "")).strip())
    record["json"] = result.get("json")
    record["exit_code"] = result.get("exit_code")
    return record


def _record(kind: str, result: Any) -> dict[str, Any]:
    return _run_record(result) if kind == "run" else step_record(result)


# Linux passes no environment string ("NAME=value") longer than this (MAX_ARG_STRLEN).
ENV_STRING_MAX = 128 * 1024


def env_value(key: str, text: str) -> str | None:
    """`text` as an automatic FLOWCTL_* variable can carry it: NUL bytes dropped (no
    environment string can hold one; a shell's `$(...)` drops them too), and None (the
    variable left out) when it is longer than the OS passes in one variable. The whole
    value stays in `${{ steps.ID.output }}` and in `flowctl show --json`."""
    if "\0" in text:
        text = text.replace("\0", "")
    if len(key) + 1 + len(text.encode("utf-8", "surrogateescape")) >= ENV_STRING_MAX:
        return None
    return text


def child_target(target: str, folder: str | None, find: FindWorkflow | None = None) -> str:
    """What a `workflow:` step's target names, as its run starts it: a file relative to the
    folder holding the workflow file; a bare name, the workflow `find` gives for that name
    in that folder (as `flowctl run NAME` finds it in the workflows folder); anything else,
    or a name nothing finds, as given."""
    file_part = target.split(":", 1)[0] if ".py:" in target else target
    is_file = file_part.endswith((".yaml", ".yml", ".py"))
    if is_file and not os.path.isabs(file_part) and folder:
        return os.path.join(folder, target)
    if not is_file and ":" not in target and folder and find is not None:
        found = find(target, folder)
        if found is not None:
            return found
    return target


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
