"""Errors as JSON, and back: how a raised exception is recorded in the journal and the
timeline, and rebuilt when a replay re-raises it."""

from __future__ import annotations

import json
import linecache
import os
import time
import traceback
from types import TracebackType
from typing import Any

from flowctl.errors import StepFailedError, is_non_retryable, mark_non_retryable


def error_dict(exc: BaseException, *, with_traceback: bool = True) -> dict[str, Any]:
    """How a raised exception is recorded: type, message, traceback, plus its own fields.

    An error type with `keeps_traceback = False` (a YAML command that failed) is recorded
    without one: the frames would be flowctl's, not the user's.
    """
    cls = type(exc)
    err: dict[str, Any] = {
        "type": getattr(exc, "error_type", cls.__name__),
        "message": str(exc),
        "py_type": f"{cls.__module__}:{cls.__qualname__}",
    }
    # The constructor arguments, when JSON: KeyError('k') prints as "'k'", so the message
    # alone cannot rebuild it, nor an error made from several arguments. Strings, ints,
    # booleans and None (nearly every error's) are JSON as they are; the rest are made so
    # by a round trip, or left out.
    args = list(exc.args)
    if all(type(a) in _AS_JSON for a in args):
        err["args"] = args
    else:
        try:
            err["args"] = json.loads(json.dumps(args, allow_nan=False))
        except (TypeError, ValueError):
            pass
    fields = getattr(exc, "error_fields", None)
    if callable(fields):
        err.update(fields())
    if is_non_retryable(exc):
        err["non_retryable"] = True
    if with_traceback and getattr(exc, "keeps_traceback", True) and exc.__traceback__ is not None:
        err["traceback"] = format_traceback(exc)[-TRACEBACK_CHARS:]
    return err


_AS_JSON = frozenset({str, int, bool, type(None)})  # a JSON round trip gives these back
TRACEBACK_CHARS = 8000  # a recorded traceback's end, kept whole up to this size
_FRAMES = 40  # frames kept per exception: the innermost, where it was raised
_CHAIN = 4  # exceptions of a chain (`raise ... from`, raised while handling) kept
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def format_traceback(exc: BaseException) -> str:
    """The traceback as Python prints it, bounded (the innermost _FRAMES frames of each of
    the last _CHAIN exceptions of its chain, from the first frame that is not flowctl's
    own), without the column markers Python 3.11 adds:
    finding them parses each line's source, about 25x the cost of the rest (a failed try
    is recorded on the daemon's hot path)."""
    chain: list[tuple[BaseException, str]] = []  # newest first, with the link to the next
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < _CHAIN:
        seen.add(id(current))
        if current.__cause__ is not None:
            chain.append((current, _CAUSE))
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            chain.append((current, _CONTEXT))
            current = current.__context__
        else:
            chain.append((current, ""))
            current = None
    parts: list[str] = []
    for i in range(len(chain) - 1, -1, -1):
        one, _ = chain[i]
        parts.append(_one_traceback(one))
        if i > 0:
            parts.append(chain[i - 1][1])
    return "".join(parts)


# flowctl's own source files: the frames of a step's traceback before the user's code
# (the engine calling the body) say nothing to the user and are left out.
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _one_traceback(exc: BaseException) -> str:
    frames: list[tuple[str, int, str]] = []
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    first = next((i for i, f in enumerate(frames) if not f[0].startswith(_OWN)), 0)
    frames = frames[first:]  # from the user's first frame (all, if none is the user's)
    out = []
    if frames:
        out.append("Traceback (most recent call last):\n")
        if len(frames) > _FRAMES:
            out.append(f"  ... {len(frames) - _FRAMES} earlier frame(s) left out\n")
            frames = frames[-_FRAMES:]
        for filename in {f[0] for f in frames}:
            _fresh(filename)  # a file edited since it was read
        for filename, lineno, name in frames:
            out.append(f'  File "{filename}", line {lineno}, in {name}\n')
            line = linecache.getline(filename, lineno).strip()
            if line:
                out.append(f"    {line}\n")
    out.append(_exception_only(exc))
    return "".join(out)


def _exception_only(exc: BaseException) -> str:
    """The traceback's last line, as traceback.format_exception_only writes it: that
    builds a TracebackException for it, a third of a failed try's formatting. Its own
    text for what has more than one line (a SyntaxError, notes)."""
    cls = type(exc)
    if issubclass(cls, SyntaxError) or getattr(exc, "__notes__", None):
        return "".join(traceback.format_exception_only(cls, exc))
    name = cls.__qualname__
    if cls.__module__ not in ("__main__", "builtins"):
        name = f"{cls.__module__}.{name}"
    try:
        text = str(exc)
    except Exception:
        text = "<exception str() failed>"
    return f"{name}: {text}\n" if text else f"{name}\n"


_CHECKED: dict[str, float] = {}  # source file -> when linecache last checked it (monotonic)
_RECHECK = 1.0  # seconds: a file is looked at again for an edit at most this often


def _fresh(filename: str) -> None:
    """linecache.checkcache(filename) (a stat), at most every _RECHECK seconds per file:
    a step failing in a loop would stat its source on every try."""
    now = time.monotonic()
    if now - _CHECKED.get(filename, -_RECHECK) < _RECHECK:
        return
    if len(_CHECKED) > 4096:
        _CHECKED.clear()
    _CHECKED[filename] = now
    linecache.checkcache(filename)


def rebuild_error(err: dict[str, Any]) -> Exception:
    """The recorded error as the same exception type when it can be rebuilt, else
    StepFailedError; one recorded as non-retryable stays so on replay."""
    exc = _rebuild(err)
    return mark_non_retryable(exc) if err.get("non_retryable") is True else exc


def _rebuild(err: dict[str, Any]) -> Exception:
    from flowctl.errors import CommandFailedError, CommandTimeoutError

    type_name = str(err.get("type", "Error"))
    message = str(err.get("message", ""))
    if type_name == "CommandFailed":
        return CommandFailedError(int(err.get("exit_code", 1)), str(err.get("stderr_tail", "")))
    if type_name == "CommandTimeout":
        return CommandTimeoutError(float(err.get("timeout", 0)), str(err.get("stderr_tail", "")))
    py_type = err.get("py_type")
    cls: Any = None
    if isinstance(py_type, str) and ":" in py_type:
        module_name, _, qualname = py_type.partition(":")
        import sys

        module = sys.modules.get(module_name)
        if module is None and module_name == "builtins":
            import builtins as module
        if module is not None:
            cls = module
            for part in qualname.split("."):
                cls = getattr(cls, part, None)
                if cls is None:
                    break
    if isinstance(cls, type) and issubclass(cls, Exception):
        # Rebuilt only when the new exception says exactly what the recorded one said, so a
        # type whose constructor means something else falls back to StepFailedError.
        attempts: list[list[Any]] = [[message]]
        if isinstance(err.get("args"), list):
            attempts.insert(0, err["args"])
        for args in attempts:
            try:
                exc = cls(*args)
            except Exception:
                continue
            if str(exc) == message:
                return exc
    return StepFailedError(type_name, message)


def error_line(error: dict[str, Any]) -> str:
    msg = str(error.get("message") or "").splitlines()
    return f"{error.get('type')}: {msg[0]}" if msg else str(error.get("type"))


__all__ = ["error_dict", "error_line", "rebuild_error"]
