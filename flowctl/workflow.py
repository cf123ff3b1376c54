"""The @workflow decorator: what a Python workflow says about itself (its name, attempts,
execution budget, retry policy, secret inputs and notifications).

Loading a workflow to run it (`file.py:fn`, `module:fn`, a YAML file, a name in the
workflows folder) is flowctl.runtime.targets' job. This module is a leaf: a workflow
file's `from flowctl import workflow` loads no engine, store or YAML parser.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, overload

from flowctl.durations import Duration, parse_duration
from flowctl.errors import UsageError
from flowctl.flow.spec import Concurrency, Debounce, parse_concurrency, parse_debounce
from flowctl.retry import RetryPolicy

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class WorkflowOptions:
    """Per-workflow defaults, overridable per run from the CLI or client."""

    name: str
    max_attempts: int | None = None
    timeout: timedelta | None = None
    retry: RetryPolicy | None = None  # backoff between run attempts
    secret_inputs: tuple[str, ...] = ()  # shown as *** everywhere; the handler gets them as given
    notify: dict[str, Any] | None = None  # override of [notify], pinned by each run
    concurrency: Concurrency | None = None  # at most N runs at once (per key)
    debounce: Debounce | None = None  # starts with one key collapse while it is quiet


@overload
def workflow(name: F) -> F: ...
@overload
def workflow(
    name: str | None = None,
    *,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    retry: RetryPolicy | None = None,
    secret_inputs: list[str] | tuple[str, ...] = (),
    notify: dict[str, Any] | bool | None = None,
    concurrency: int | dict[str, Any] | None = None,
    debounce: dict[str, Any] | None = None,
) -> Callable[[F], F]: ...
def workflow(
    name: Any = None,
    *,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    retry: RetryPolicy | None = None,
    secret_inputs: list[str] | tuple[str, ...] = (),
    notify: dict[str, Any] | bool | None = None,
    concurrency: int | dict[str, Any] | None = None,
    debounce: dict[str, Any] | None = None,
) -> Any:
    """Mark a function `fn(ctx, **input)` as a workflow: `@workflow`, `@workflow("name")`.

    `secret_inputs=["token"]`: those inputs are shown as *** by ls, show, --json and the
    TUI, and never match `ls --search`; the handler gets them unchanged.
    `notify={"on": ["dead", "timed_out"], "webhook": URL, "command": [...]}` overrides
    flowctl.toml's [notify] for this workflow's runs, key by key; `notify=False` silences it.
    `concurrency=2` or `{"limit": 1, "key": "${{ input.user }}"}`: at most that many runs
    at once (per value of the key); `debounce={"period": "2s", "key": ...}`: starts with
    one key within the period collapse into one run, with the newest input.
    """
    from flowctl.notify import override_json, parse_notify

    if notify is True:
        raise UsageError("notify must be a table like {'on': ['dead']} or False, not True")
    parse_notify(notify, "@workflow(notify=...)", override=True)
    pinned = override_json(notify)
    flow = None if concurrency is None else parse_concurrency(concurrency, "concurrency")
    quiet = None if debounce is None else parse_debounce(debounce, "debounce")
    if isinstance(secret_inputs, str) or not all(isinstance(k, str) for k in secret_inputs):
        raise UsageError(
            f"secret_inputs must be a list of input names, like ['token'], got {secret_inputs!r}"
        )

    def mark(fn: F, wf_name: str | None) -> F:
        _check_secret_names(fn, secret_inputs)
        fn.__flowctl_workflow__ = WorkflowOptions(  # type: ignore[attr-defined]
            name=wf_name or fn.__name__,
            max_attempts=max_attempts,
            timeout=parse_duration(timeout) if timeout is not None else None,
            retry=retry,
            secret_inputs=tuple(secret_inputs),
            notify=pinned,
            concurrency=flow,
            debounce=quiet,
        )
        return fn

    if callable(name):
        return mark(name, None)
    return lambda fn: mark(fn, name)


def _check_secret_names(fn: Callable[..., Any], names: tuple[str, ...] | list[str]) -> None:
    """A secret name that is no input of the handler is a typo that would leave the real
    input in sight: refuse it when the workflow is defined."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params]
    for key in names:
        if key not in known:
            raise UsageError(
                f"secret_inputs names {key!r}, which is not an input of"
                f" {getattr(fn, '__name__', fn)}; its inputs: {', '.join(known) or 'none'}"
            )
