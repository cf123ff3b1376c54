"""Finding and loading workflows: `file.py:fn`, `module:fn`, a YAML file, or a name in the
workflows folder, made into the `WorkflowDef` that starts and runs them.

The one module that imports user code and builds YAML workflows: a YAML workflow is
handed `find_workflow` from here for its `workflow: NAME` steps (flowctl.yamlflow never
imports this module), and the engine's `Loader` loads a stored run's handler through it.
flowctl.yamlflow is imported where it is used: a Python workflow never loads the YAML
parser.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from flowctl.errors import FlowctlError, InputError, TargetError, UnknownWorkflowError
from flowctl.flow.spec import Concurrency, Debounce, flow_fields
from flowctl.inputs import python_validator
from flowctl.retry import RetryPolicy
from flowctl.store import NewRun
from flowctl.workflow import WorkflowOptions

YAML_SUFFIXES = (".yaml", ".yml")


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
    secret_inputs: tuple[str, ...] = ()
    schedule: Any = None
    schedule_places: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    notify: dict[str, Any] | None = None  # `notify:` / @workflow(notify=...), checked
    concurrency: Concurrency | None = None  # `concurrency:` / @workflow(concurrency=...)
    debounce: Debounce | None = None  # `debounce:` / @workflow(debounce=...)
    # The handler's signature, computed once per def (inspect.signature costs ~50 µs and
    # a def is reused for every run of its target); None: it has none to check against.
    _signature: inspect.Signature | bool | None = field(
        default=False, init=False, repr=False, compare=False
    )
    # The input key sets already found to bind (a Python handler's check depends on the
    # keys only, and nearly every run of a workflow passes the same ones): checked once.
    _binds: set[frozenset[str]] = field(default_factory=set, init=False, repr=False, compare=False)

    def check_input(self, raw: dict[str, Any]) -> dict[str, Any]:
        return self.validate(raw) if self.validate is not None else raw

    def signature(self) -> inspect.Signature | None:
        if self._signature is False:
            try:
                self._signature = inspect.signature(self.handler)
            except (TypeError, ValueError):
                self._signature = None
        return self._signature  # type: ignore[return-value]

    def check_binds(self, input: dict[str, Any]) -> None:
        """Raise InputError unless a stored run's input binds to the handler as it is now
        (checked before it runs: the handler may have changed since the run was started)."""
        keys = frozenset(input) if self.kind == "python" else None
        if keys is not None and keys in self._binds:
            return
        self.check_input(dict(input))
        sig = self.signature()
        if sig is None:
            return  # a callable without a signature: nothing to check it against
        try:
            sig.bind(None, **input)
        except TypeError as e:
            raise InputError(
                f"the input of run of workflow {self.name} does not fit: {e}"
            ) from None
        if keys is not None:
            self._binds.add(keys)

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
        run_id: str | None = None,
        traceparent: str | None = None,
        priority: int = 0,
    ) -> NewRun:
        """The row for a new run of this workflow: its pinned source and its defaults,
        overridden by what the caller gives. `input` must already be checked; `run_id`
        is a new one unless given (a batch makes its ids together: ids.new_run_ids)."""
        from flowctl.ids import new_run_id

        budget = timeout if timeout is not None else self.timeout
        flow = flow_fields(self.name, self.concurrency, self.debounce, input)
        return NewRun(
            run_id=run_id or new_run_id(),
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
            secret_keys=self.secret_inputs,
            notify=self.notify,
            traceparent=traceparent,
            priority=priority,
            **flow,
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------
# Python workflows

_import_lock = threading.RLock()
# Each imported workflow file's stamp (see _file_stamp) when it was imported: a long-lived
# process (the daemon, serve) imports a file again once it has been edited.
_imported: dict[str, tuple[int, ...] | None] = {}


def _import_file(path: Path) -> Any:
    """Import a .py file as a module whose name is stable for that path; again, as a new
    module object, when the file has changed since (code already running keeps the
    functions it holds). Modules the file itself imports are not imported again."""
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:8]
    mod_name = f"flowctl_user.{resolved.stem}_{digest}"
    stamp = _file_stamp(str(resolved))
    with _import_lock:
        if mod_name in sys.modules and _imported.get(mod_name) == stamp:
            return sys.modules[mod_name]
        _imported[mod_name] = stamp
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


@contextlib.contextmanager
def fresh_imports(modules: Iterable[str] = ()) -> Iterator[None]:
    """While the block runs, workflow files (and the named `module:fn` modules, with their
    submodules) are imported anew from disk; afterwards the modules this process had
    loaded before are put back, so a daemon in the same process keeps the code it runs.
    (`flowctl check` runs in a process of its own, where every import is fresh anyway.)"""
    roots = ("flowctl_user", *modules)

    def hidden(name: str) -> bool:
        return any(name == r or name.startswith(r + ".") for r in roots)

    with _import_lock:
        saved = {n: m for n, m in sys.modules.items() if hidden(n)}
        stamps = dict(_imported)  # the stamps of the modules put back, not of the fresh ones
        for n in saved:
            del sys.modules[n]
        try:
            yield
        finally:
            for n in [n for n in sys.modules if hidden(n)]:
                del sys.modules[n]
            sys.modules.update(saved)
            _imported.clear()
            _imported.update(stamps)


_CTX_NAMES = frozenset({"ctx", "context", "_ctx"})


def _check_handler(fn: Any, target: str) -> None:
    """A handler is called as `handler(ctx, **input)`: refuse, before any run exists, what
    cannot be called so (a class, a C built-in such as os:system, a value, a function with
    no positional parameter for ctx)."""
    shown = target.rpartition(":")[2] or target
    usage = f"a workflow is a Python function `def {shown}(ctx, **input)`"
    if inspect.isclass(fn):
        raise TargetError(f"{target} is a class, not a function: {usage}")
    if not callable(fn):
        raise TargetError(
            f"{target} is a value of type {type(fn).__name__}, not a function: {usage}"
        )
    if inspect.isbuiltin(fn):
        raise TargetError(f"{target} is a built-in, not a workflow: {usage}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise TargetError(f"{target} has no signature flowctl can read: {usage}") from None
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    if not params or params[0].kind not in positional:
        raise TargetError(f"{target} takes no positional parameter for ctx: {usage}")
    # An undecorated function is taken for a workflow only when its first parameter says it
    # takes the context: a plain helper (`greet(name)`, `json:dumps`) would get the context
    # as its first argument and "complete" with nonsense.
    if getattr(fn, "__flowctl_workflow__", None) is None and params[0].name not in _CTX_NAMES:
        raise TargetError(
            f"{target} is not a workflow: decorate it with @workflow (from flowctl import"
            f" workflow), or name its first parameter ctx; {usage}"
        )


def _python_def(fn: Any, target: str, source_path: Path | None, cwd: str | None) -> WorkflowDef:
    _check_handler(fn, target)
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
        validate=python_validator(fn, name, opts.secret_inputs if opts else ()),
        secret_inputs=opts.secret_inputs if opts else (),
        notify=opts.notify if opts else None,
        concurrency=opts.concurrency if opts else None,
        debounce=opts.debounce if opts else None,
        description=(inspect.getdoc(fn) or "").splitlines()[0] if inspect.getdoc(fn) else "",
    )


# ---------------------------------------------------------------------------
# Resolving targets


def _yaml_def(path: Path, text: str | None = None) -> WorkflowDef:
    from flowctl import yamlflow

    resolved = path.resolve()
    if text is None:
        text = yamlflow.read_yaml_text(path)
    wf = yamlflow.load_yaml(text, str(path), find_workflow=find_workflow)
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
        secret_inputs=tuple(n for n, spec in wf.inputs.items() if spec.secret),
        schedule=wf.schedule,
        schedule_places=wf.schedule_places,
        description=wf.description or "",
        notify=wf.notify,
        concurrency=wf.concurrency,
        debounce=wf.debounce,
    )


def workflows_folder(start: str | Path | None = None) -> Path:
    """The workflows folder `flowctl run NAME` looks in when run from `start` (None: this
    process's folder): the `workflows` key of the flowctl.toml found from `start` upward,
    else this process's (its flowctl.toml's, or ./workflows). A run records the folder it
    was started from (its cwd), so a daemon started anywhere finds the same project."""
    from flowctl.config import find_config, load_config

    found = find_config(Path(start)) if start else None
    return load_config(found).workflows_dir()


def named_workflow(name: str, folder: str | Path | None) -> tuple[WorkflowEntry, Path] | None:
    """The workflow called `name`, and the folder it was found in, as a run whose folder is
    `folder` names it (`ctx.child("kid")`, a YAML `workflow: kid` step): first in the
    project's workflows folder, where `flowctl run kid` finds it; then beside the run's own
    file in `folder`. None when neither has one."""
    for where in (workflows_folder(folder), *([Path(folder)] if folder else [])):
        entry = discover(where).get(name)
        if entry is not None:
            return entry, where
    return None


def find_workflow(name: str, folder: str) -> str | None:
    """The target of the workflow called `name` (named_workflow), if there is one: what a
    YAML workflow's `workflow: NAME` step starts (handed to it by _yaml_def)."""
    found = named_workflow(name, folder)
    return found[0].target if found is not None else None


def load_child(target: str, cwd: str | None) -> WorkflowDef:
    """What `ctx.child(target)` of a run whose folder is `cwd` starts: a name as
    named_workflow finds it, as `flowctl run NAME` loads it; anything else (`file.py:fn`,
    `module:fn`, a .yaml file) as load_target takes it, relative to `cwd`. An unknown name
    is an UnknownWorkflowError naming the project's workflows folder."""
    if _is_name(target):
        found = named_workflow(target.strip(), cwd)
        if found is not None:
            return _load_entry(*found)
        return load_target(target, workflows_dir=workflows_folder(cwd), cwd=cwd)
    return load_target(target, cwd=cwd)


def _is_name(target: str) -> bool:
    """Whether load_target takes `target` for a workflow's name (not a file or module)."""
    target = target.strip()
    return bool(target) and not target.endswith(YAML_SUFFIXES) and ":" not in target


def _load_entry(entry: WorkflowEntry, folder: Path) -> WorkflowDef:
    """A workflow found by name in `folder`, loaded as `flowctl run NAME` loads it."""
    if entry.kind == "yaml":
        return _yaml_def(Path(entry.target))
    return load_target(entry.target, cwd=str(folder.resolve()))


def child_target(target: str, folder: str | None) -> str:
    """What a `workflow:` step's target names, as its run starts it (yamlflow's rule, with
    this module finding names): for `flowctl validate`'s check of a file's children."""
    from flowctl.yamlflow.steps import child_target as resolve

    return resolve(target, folder, find_workflow)


def _kind_of(path: Path, target: str) -> str | None:
    """What is at `path`: "file", "dir", "other", or None when nothing is. A path the OS
    refuses to look at (a name too long, a folder it may not enter) is a TargetError
    saying why, not a traceback: Python 3.11's is_file() raises those."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise TargetError(f"cannot look at workflow target {target!r}: {e.strerror}") from None
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


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
        return _python_target(target, base)
    if workflows_dir is not None:
        entry = discover(workflows_dir).get(target)
        if entry is not None:
            return _load_entry(entry, Path(workflows_dir))
    raise _no_workflow(target, base, workflows_dir)


def _python_target(target: str, base: Path) -> WorkflowDef:
    """`file.py:fn` (a path, relative to `base`) or `pkg.module:fn` (imported, `base`
    first on the path)."""
    left, _, fn_name = target.rpartition(":")
    if not fn_name.isidentifier():
        raise TargetError(f"{target!r}: after ':' must come a function name")
    if not left.strip():
        raise TargetError(
            f"{target!r}: before ':' must come a file or a module, as in"
            f" file.py:{fn_name} or module:{fn_name}"
        )
    if left.endswith(".py") or "/" in left:
        path = Path(left) if Path(left).is_absolute() else base / left
        if _kind_of(path, target) != "file":
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
        raise TargetError(f"module {left} has no function {fn_name!r}{_suggest(module, fn_name)}")
    module_file: str | None = getattr(module, "__file__", None)
    source_path = Path(module_file) if module_file else None
    return _python_def(fn, target, source_path, str(base))


def _no_workflow(target: str, base: Path, workflows_dir: str | Path | None) -> TargetError:
    """Why `target` names no workflow, and what to give instead."""
    if target.endswith(".py"):
        path = Path(target) if Path(target).is_absolute() else base / target
        text = _read_for_discovery(path) if _kind_of(path, target) == "file" else None
        names = [e.target.rpartition(":")[2] for e in _python_entries(path, text or "")]
        form = f"{target}:{names[0]}" if len(names) == 1 else f"{target}:FUNCTION"
        found = f" ({target} has @workflow functions: {', '.join(names)})" if len(names) > 1 else ""
        return TargetError(f"{target!r} names a file, not a function: use {form}{found}")
    as_path = Path(target) if Path(target).is_absolute() else base / target
    kind = _kind_of(as_path, target)
    if kind == "dir":
        return TargetError(
            f"{target!r} is a folder, not a workflow: give file.py:function, a .yaml file"
            " inside it, or a name listed by `flowctl workflows`"
        )
    if kind == "file":
        return TargetError(
            f"{target!r} is not a workflow file: give file.py:function or a .yaml/.yml file"
        )
    if "/" in target or target.startswith("."):
        return TargetError(
            f"{target!r} does not exist: give file.py:function, a .yaml file,"
            " or a name listed by `flowctl workflows`"
        )
    folder = f" in {workflows_dir}" if workflows_dir else ""
    return UnknownWorkflowError(
        f"unknown workflow {target!r}{folder}: give file.py:function, module:function, a .yaml file,"
        " or a name listed by `flowctl workflows`"
    )


class TargetCache:
    """load_target with memory, for a caller that starts many runs (Client.start).

    A target given as a path (`file.py:fn`, `file.yaml`) or a module (`pkg.mod:fn`) is
    loaded once; later calls cost one stat of its file and reuse the def while the file's
    (mtime, size, inode) is unchanged, instead of three path resolutions, a read and a
    sha256 of the file and a signature per call. An edited file is loaded again, so a new
    run still pins the text on disk when it starts. Names looked up in the workflows
    folder are not cached: discovery decides which file a name means.
    """

    def __init__(self) -> None:
        self._entries: dict[
            tuple[str, str | None, str], tuple[tuple[int, ...], str, WorkflowDef]
        ] = {}
        self._lock = threading.Lock()

    def load(
        self, target: str, *, workflows_dir: str | Path | None = None, cwd: str | None = None
    ) -> WorkflowDef:
        key = (
            target,
            None if workflows_dir is None else str(workflows_dir),
            cwd or os.getcwd(),  # a str, as str(Path.cwd()) is, without two Path objects
        )
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and _file_stamp(hit[1]) == hit[0]:
            return hit[2]
        stripped = target.strip()
        cacheable = stripped.endswith(YAML_SUFFIXES) or ":" in stripped
        wf = load_target(target, workflows_dir=workflows_dir, cwd=cwd)
        stamp = _file_stamp(wf.source_path) if cacheable and wf.source_path else None
        if stamp is not None and wf.source_path is not None:
            with self._lock:
                self._entries[key] = (stamp, wf.source_path, wf)
        return wf


def _file_stamp(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)  # once per Client.start: no Path object for it
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def _suggest(module: Any, name: str) -> str:
    import difflib

    names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
    hint = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


# ---------------------------------------------------------------------------
# Discovery: what is in the workflows folder, found by reading, never by running

# Larger files are skipped by discovery (a workflow file is a few KiB).
MAX_DISCOVERY_BYTES = 1024 * 1024

log = logging.getLogger(__name__)
_warned: set[str] = set()


@dataclass(frozen=True)
class WorkflowEntry:
    """A workflow found in the workflows folder: enough to list it and to load it by name.
    Finding it executed nothing: YAML is parsed under the loader's guards, Python is read
    as source (an AST pass for @workflow), and only the one file being run is imported."""

    name: str
    kind: str  # "python" | "yaml"
    target: str  # what load_target takes: the YAML path, or `/abs/file.py:function`
    source_path: str
    description: str = ""


def discover(workflows_dir: str | Path) -> dict[str, WorkflowEntry]:
    """Every workflow in a folder, by name: YAML files by their `name:` (else the file's
    stem), Python functions decorated with @workflow. The first file (sorted) wins a name."""
    folder = Path(workflows_dir)
    found: dict[str, WorkflowEntry] = {}
    if not folder.is_dir():
        return found
    _warn_if_writable_by_others(folder, "workflows folder")
    for path in sorted(folder.iterdir()):
        is_yaml = path.suffix in YAML_SUFFIXES
        is_python = path.suffix == ".py" and not path.name.startswith("_")
        if not (is_yaml or is_python) or not path.is_file():
            continue
        text = _read_for_discovery(path)
        if text is None:
            continue
        _warn_if_writable_by_others(path, "workflow file")
        entries = _yaml_entries(path, text) if is_yaml else _python_entries(path, text)
        for entry in entries:
            first = found.setdefault(entry.name, entry)
            if first is not entry:  # the name runs the first: said, never silently shadowed
                _warn_once(
                    path,
                    "warning: %s also defines workflow %r, which %s defines first and the name"
                    " runs: rename one",
                    entry.name,
                    first.target,
                )
    return found


def _read_for_discovery(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_DISCOVERY_BYTES + 1)
        if len(data) > MAX_DISCOVERY_BYTES:
            _warn_once(
                path, "warning: skipping %s: larger than %d KiB", MAX_DISCOVERY_BYTES // 1024
            )
            return None
        return data.decode("utf-8")
    except UnicodeDecodeError:
        _warn_once(path, "warning: skipping %s: not UTF-8")
        return None
    except OSError:
        return None


def _yaml_entries(path: Path, text: str) -> list[WorkflowEntry]:
    from flowctl import yamlflow

    name, description = yamlflow.peek_yaml(text, str(path))
    if name is None:
        return []
    resolved = str(path.resolve())
    return [WorkflowEntry(name, "yaml", resolved, resolved, description)]


def _python_entries(path: Path, text: str) -> list[WorkflowEntry]:
    """Top-level functions decorated with `@workflow`, `@workflow("name")`,
    `@workflow(name=...)` or `@flowctl.workflow...`, read from the source."""
    import ast

    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:  # said, not silently dropped: its workflows would vanish
        _warn_once(path, "warning: skipping %s: it does not parse (%s at line %s)", e.msg, e.lineno)
        return []
    except (ValueError, RecursionError, MemoryError):
        _warn_once(path, "warning: skipping %s: it does not parse")
        return []
    resolved = path.resolve()
    entries = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            name = _workflow_name(deco, node.name)
            if name is not None:
                doc = (ast.get_docstring(node) or "").strip().splitlines()
                entries.append(
                    WorkflowEntry(
                        name,
                        "python",
                        f"{resolved}:{node.name}",
                        str(resolved),
                        doc[0] if doc else "",
                    )
                )
                break
    return entries


def _workflow_name(deco: Any, fn_name: str) -> str | None:
    """The workflow name a decorator gives, or None when it is not @workflow."""
    import ast

    def is_workflow(expr: ast.expr) -> bool:
        return (isinstance(expr, ast.Name) and expr.id == "workflow") or (
            isinstance(expr, ast.Attribute) and expr.attr == "workflow"
        )

    if is_workflow(deco):
        return fn_name
    if isinstance(deco, ast.Call) and is_workflow(deco.func):
        given: ast.expr | None = deco.args[0] if deco.args else None
        for kw in deco.keywords:
            if kw.arg == "name":
                given = kw.value
        if isinstance(given, ast.Constant) and isinstance(given.value, str) and given.value:
            return given.value
        return fn_name
    return None


def _warn_if_writable_by_others(path: Path, what: str) -> None:
    """Anyone who can write a workflow can run code as whoever runs it: say so, once."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & stat.S_IWOTH:
        _warn_once(
            path,
            f"warning: {what} %s is writable by other users, who could make it run code as you;"
            " fix with: chmod o-w %s",
            path,
        )


def _warn_once(path: Path, message: str, *args: Any) -> None:
    """Log a warning about `path` once per process (discovery runs on every lookup)."""
    key = f"{path.resolve()}\0{message}"
    if key not in _warned:
        _warned.add(key)
        log.warning(message, path, *args)


class Loader:
    """Loads the handler of a stored run, caching by target and pinned source."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str | None], WorkflowDef] = {}
        # A Python file target's def, with its file's stamp when it was loaded.
        self._files: dict[str, tuple[tuple[int, ...] | None, WorkflowDef]] = {}
        self._lock = threading.Lock()

    def for_run(
        self, target: str, kind: str, cwd: str | None, source: str | None, source_hash: str | None
    ) -> WorkflowDef:
        if kind != "yaml" and _is_file_target(target):
            return self._for_file(target, cwd)
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

    def _for_file(self, target: str, cwd: str | None) -> WorkflowDef:
        """A `file.py:fn` run's def: loaded again once the file is edited, so the run
        replays the code on disk (as `show` says), not what this process imported first."""
        path = target.rpartition(":")[0]
        stamp = _file_stamp(path)
        with self._lock:
            hit = self._files.get(target)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        wf = load_target(target, cwd=cwd)
        with self._lock:
            self._files[target] = (stamp, wf)
        return wf


def _is_file_target(target: str) -> bool:
    """Whether a stored Python target names a file (`/abs/file.py:fn`), not a module."""
    left = target.rpartition(":")[0]
    return left.endswith(".py") or "/" in left
