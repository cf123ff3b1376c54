"""Workflow definitions: the @workflow decorator, and loading `file.py:fn`, `module:fn`,
a YAML file or a workflow name from the workflows folder."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, overload

from flowctl.durations import Duration, parse_duration
from flowctl.errors import FlowctlError, InputError, TargetError
from flowctl.retry import RetryPolicy
from flowctl.store import NewRun

F = TypeVar("F", bound=Callable[..., Any])

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class WorkflowOptions:
    """Per-workflow defaults, overridable per run from the CLI or client."""

    name: str
    max_attempts: int | None = None
    timeout: timedelta | None = None
    retry: RetryPolicy | None = None  # backoff between run attempts


@overload
def workflow(name: F) -> F: ...
@overload
def workflow(
    name: str | None = None,
    *,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    retry: RetryPolicy | None = None,
) -> Callable[[F], F]: ...
def workflow(
    name: Any = None,
    *,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    retry: RetryPolicy | None = None,
) -> Any:
    """Mark a function `fn(ctx, **input)` as a workflow: `@workflow`, `@workflow("name")`."""

    def mark(fn: F, wf_name: str | None) -> F:
        fn.__flowctl_workflow__ = WorkflowOptions(  # type: ignore[attr-defined]
            name=wf_name or fn.__name__,
            max_attempts=max_attempts,
            timeout=parse_duration(timeout) if timeout is not None else None,
            retry=retry,
        )
        return fn

    if callable(name):
        return mark(name, None)
    return lambda fn: mark(fn, name)


@dataclass
class WorkflowDef:
    """A loaded workflow: what ops needs to start a run and the engine needs to run it."""

    name: str
    kind: str  # "python" | "yaml"
    target: str  # canonical target stored with the run
    handler: Callable[..., Any]
    source: str | None = None
    source_hash: str | None = None
    source_path: str | None = None
    cwd: str | None = None
    max_attempts: int | None = None
    timeout: timedelta | None = None
    retry: RetryPolicy | None = None
    validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    schedule: Any = None
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def check_input(self, raw: dict[str, Any]) -> dict[str, Any]:
        return self.validate(raw) if self.validate is not None else raw

    def check_binds(self, input: dict[str, Any]) -> None:
        """Raise InputError unless a stored run's input binds to the handler as it is now
        (checked before it runs: the handler may have changed since the run was started)."""
        self.check_input(dict(input))
        try:
            sig = inspect.signature(self.handler)
        except (TypeError, ValueError):
            return  # a callable without a signature: nothing to check it against
        try:
            sig.bind(None, **input)
        except TypeError as e:
            raise InputError(
                f"the input of run of workflow {self.name} does not fit: {e}"
            ) from None

    def new_run(
        self,
        input: dict[str, Any],
        *,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
        key: str | None = None,
        parent_run_id: str | None = None,
        schedule: str | None = None,
        scheduled_at: datetime | None = None,
    ) -> NewRun:
        """The row for a new run of this workflow: its pinned source and its defaults,
        overridden by what the caller gives. `input` must already be checked."""
        from flowctl.ids import new_run_id

        budget = timeout if timeout is not None else self.timeout
        return NewRun(
            run_id=new_run_id(),
            workflow=self.name,
            target=self.target,
            kind=self.kind,
            input=input,
            source=self.source,
            source_hash=self.source_hash,
            source_path=self.source_path,
            cwd=self.cwd,
            run_at=run_at,
            max_attempts=max_attempts or self.max_attempts or 3,
            backoff=self.retry.to_json() if self.retry else None,
            deadline=deadline,
            timeout=budget.total_seconds() if budget is not None else None,
            key=key,
            parent_run_id=parent_run_id,
            schedule=schedule,
            scheduled_at=scheduled_at,
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------
# Python workflows

_import_lock = threading.RLock()


def _import_file(path: Path) -> Any:
    """Import a .py file as a module whose name is stable for that path."""
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:8]
    mod_name = f"flowctl_user.{resolved.stem}_{digest}"
    with _import_lock:
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        if "flowctl_user" not in sys.modules:
            import types

            pkg = types.ModuleType("flowctl_user")
            pkg.__path__ = []
            sys.modules["flowctl_user"] = pkg
        folder = str(resolved.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(mod_name, resolved)
        if spec is None or spec.loader is None:
            raise TargetError(f"cannot import {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except FlowctlError:
            del sys.modules[mod_name]
            raise
        except Exception as e:
            del sys.modules[mod_name]
            raise TargetError(f"importing {path} failed: {type(e).__name__}: {e}") from None
        return module


def _python_def(fn: Any, target: str, source_path: Path | None, cwd: str | None) -> WorkflowDef:
    if not callable(fn):
        raise TargetError(f"{target} is not a function")
    opts: WorkflowOptions | None = getattr(fn, "__flowctl_workflow__", None)
    name = opts.name if opts else getattr(fn, "__name__", target)
    source = source_hash = None
    if source_path is not None:
        try:
            source = source_path.read_text()
            source_hash = _sha256(source)
        except OSError:
            pass
    return WorkflowDef(
        name=name,
        kind="python",
        target=target,
        handler=fn,
        source=source,
        source_hash=source_hash,
        source_path=str(source_path) if source_path else None,
        cwd=cwd,
        max_attempts=opts.max_attempts if opts else None,
        timeout=opts.timeout if opts else None,
        retry=opts.retry if opts else None,
        validate=lambda raw: _check_python_input(fn, name, raw),
        description=(inspect.getdoc(fn) or "").splitlines()[0] if inspect.getdoc(fn) else "",
    )


def _check_python_input(fn: Callable[..., Any], name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Inputs must fit the handler's keyword parameters, so a typo fails before the run exists."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return raw
    params = list(sig.parameters.values())[1:]  # skip ctx
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = {
        p.name: p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    listing = (
        ", ".join(
            f"{p.name}{'' if p.default is not inspect.Parameter.empty else ' (required)'}"
            for p in named.values()
        )
        or "no inputs"
    )
    if not accepts_any:
        unknown = [k for k in raw if k not in named]
        if unknown:
            import difflib

            hint = difflib.get_close_matches(unknown[0], list(named), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise InputError(
                f"workflow {name} has no input {unknown[0]!r}{extra}; it takes: {listing}"
            )
    missing = [n for n, p in named.items() if p.default is inspect.Parameter.empty and n not in raw]
    if missing:
        raise InputError(
            f"workflow {name} needs input {missing[0]!r} (pass -i {missing[0]}=VALUE); it takes: {listing}"
        )
    return raw


# ---------------------------------------------------------------------------
# Resolving targets


def _yaml_def(path: Path, text: str | None = None) -> WorkflowDef:
    from flowctl import yamlflow

    resolved = path.resolve()
    if text is None:
        try:
            text = resolved.read_text()
        except FileNotFoundError:
            raise TargetError(f"workflow file {path} does not exist") from None
        except OSError as e:
            raise TargetError(f"cannot read {path}: {e.strerror}") from None
    wf = yamlflow.load_yaml(text, str(path))
    return WorkflowDef(
        name=wf.name,
        kind="yaml",
        target=str(resolved),
        handler=wf.handler,
        source=text,
        source_hash=_sha256(text),
        source_path=str(resolved),
        cwd=str(resolved.parent),
        max_attempts=wf.max_attempts,
        validate=lambda raw: yamlflow.convert_inputs(wf, raw),
        schedule=wf.schedule,
        description=wf.description or "",
    )


def load_target(
    target: str, *, workflows_dir: str | Path | None = None, cwd: str | None = None
) -> WorkflowDef:
    """Resolve what the user typed: `file.py:fn`, `pkg.module:fn`, `file.yaml`, or a name."""
    target = target.strip()
    if not target:
        raise TargetError(
            "a workflow target is required: file.py:function, module:function, file.yaml or a name"
        )
    base = Path(cwd) if cwd else Path.cwd()
    if target.endswith(YAML_SUFFIXES):
        path = Path(target)
        return _yaml_def(path if path.is_absolute() else base / path)
    if ":" in target:
        left, _, fn_name = target.rpartition(":")
        if not fn_name.isidentifier():
            raise TargetError(f"{target!r}: after ':' must come a function name")
        if left.endswith(".py") or "/" in left:
            path = Path(left) if Path(left).is_absolute() else base / left
            if not path.is_file():
                raise TargetError(f"workflow file {left} does not exist")
            module = _import_file(path)
            fn = getattr(module, fn_name, None)
            if fn is None:
                raise TargetError(f"{left} has no function {fn_name!r}{_suggest(module, fn_name)}")
            return _python_def(fn, f"{path.resolve()}:{fn_name}", path.resolve(), str(base))
        with _import_lock:
            if str(base) not in sys.path:
                sys.path.insert(0, str(base))
            try:
                module = importlib.import_module(left)
            except ImportError as e:
                raise TargetError(f"cannot import module {left!r}: {e}") from None
            except Exception as e:
                raise TargetError(f"importing {left} failed: {type(e).__name__}: {e}") from None
        fn = getattr(module, fn_name, None)
        if fn is None:
            raise TargetError(
                f"module {left} has no function {fn_name!r}{_suggest(module, fn_name)}"
            )
        module_file: str | None = getattr(module, "__file__", None)
        source_path = Path(module_file) if module_file else None
        return _python_def(fn, target, source_path, str(base))
    if workflows_dir is not None:
        found = discover(workflows_dir).get(target)
        if found is not None:
            return found
    folder = f" in {workflows_dir}" if workflows_dir else ""
    raise TargetError(
        f"unknown workflow {target!r}{folder}: give file.py:function, module:function, a .yaml file,"
        " or a name listed by `flowctl workflows`"
    )


def _suggest(module: Any, name: str) -> str:
    import difflib

    names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
    hint = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def discover(workflows_dir: str | Path) -> dict[str, WorkflowDef]:
    """Every workflow in a folder: YAML files by their `name`, Python @workflow functions."""
    folder = Path(workflows_dir)
    found: dict[str, WorkflowDef] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        if path.suffix in YAML_SUFFIXES:
            try:
                wf = _yaml_def(path)
            except FlowctlError:
                continue
            found.setdefault(wf.name, wf)
        elif path.suffix == ".py" and not path.name.startswith("_"):
            try:
                module = _import_file(path)
            except FlowctlError:
                continue
            for attr in vars(module).values():
                opts = getattr(attr, "__flowctl_workflow__", None)
                if (
                    isinstance(opts, WorkflowOptions)
                    and getattr(attr, "__module__", None) == module.__name__
                ):
                    fn_name = attr.__name__
                    found.setdefault(
                        opts.name,
                        _python_def(
                            attr,
                            f"{path.resolve()}:{fn_name}",
                            path.resolve(),
                            str(folder.resolve()),
                        ),
                    )
    return found


class Loader:
    """Loads the handler of a stored run, caching by target and pinned source."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str | None], WorkflowDef] = {}
        self._lock = threading.Lock()

    def for_run(
        self, target: str, kind: str, cwd: str | None, source: str | None, source_hash: str | None
    ) -> WorkflowDef:
        key = (target, source_hash if kind == "yaml" else None)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        if kind == "yaml":
            # The run's pinned text, not the file on disk: editing the file never breaks a run in flight.
            if source is None:
                raise TargetError(f"run of {target} has no pinned YAML source")
            wf = _yaml_def(Path(target), source)
        else:
            wf = load_target(target, cwd=cwd)
        with self._lock:
            self._cache[key] = wf
        return wf
