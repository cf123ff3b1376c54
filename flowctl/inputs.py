"""Workflow inputs: a given value converted to its declared type, and a Python workflow's
input check.

A YAML workflow declares each input's type (`convert_value`); a Python handler's keys must
fit its keyword parameters (so a typo fails before the run exists) and its string inputs
are converted to its int/float/bool annotations the same way (`python_validator`). A leaf:
both kinds of workflow use it, and it knows neither.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from flowctl.errors import InputError
from flowctl.model import SECRET_MASK

_TRUE_INPUT = frozenset({"true", "1", "yes", "y", "on"})
_FALSE_INPUT = frozenset({"false", "0", "no", "n", "off"})


def convert_value(name: str, kind: str, value: Any, *, secret: bool = False) -> Any:
    """Strings are converted to the declared type; other values must already have it.
    A secret value is never quoted in the error: it reaches logs and schedule history."""
    given = f"got {SECRET_MASK if secret else repr(value)} ({json_type(value)})"
    wrong = InputError(f"input {name!r} must be {_TYPE_WORDS[kind]}, {given}")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise wrong
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
            try:
                return int(value)
            except ValueError:  # more digits than Python converts (4,300)
                raise InputError(
                    f"input {name!r} has {len(value.strip()):,} digits; a whole number has at"
                    " most 4,300"
                ) from None
        raise wrong
    if kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise InputError(f"input {name!r} is too large for a number (float)") from None
        if isinstance(value, str) and "_" not in value:
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


# A parameter annotated with one of these (the type, or its name under postponed
# annotations) takes a string input converted to it, as a YAML input of that type does:
# `-i n=2` gives a handler annotated `n: int` the number 2, not the text "2".
_CONVERTED = {
    int: "int",
    float: "float",
    bool: "bool",
    "int": "int",
    "float": "float",
    "bool": "bool",
}


def _kind_of(annotation: Any) -> str | None:
    """int/float/bool for an annotation of one of them, also optional (`int | None`,
    `Optional[int]`) or `Annotated[int, ...]`, as an object or as the text postponed
    annotations leave; None for anything else (its input is left as given)."""
    import types
    import typing

    if isinstance(annotation, str):
        text = annotation.replace(" ", "").replace("typing.", "").strip("'\"")
        for wrap in ("Optional[", "Annotated["):
            if text.startswith(wrap) and text.endswith("]"):
                text = text[len(wrap) : -1].split(",")[0]
        parts = [t for t in text.split("|") if t != "None"]
        return _CONVERTED.get(parts[0]) if len(parts) == 1 else None
    if isinstance(annotation, type):
        return _CONVERTED.get(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated and args:
        return _kind_of(args[0])
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _kind_of(rest[0]) if len(rest) == 1 else None
    return None


def python_validator(
    fn: Callable[..., Any], name: str, secret: Iterable[str] = ()
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The input check of a Python workflow, with the handler's signature read once (and
    what the check needs of it: `start_many` checks thousands of inputs with it)."""
    try:
        sig: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    kinds: dict[str, str] = {}
    for p in list(sig.parameters.values())[1:] if sig is not None else ():
        kind = _kind_of(p.annotation)
        if kind is not None:
            kinds[p.name] = kind
    hidden = frozenset(secret)
    if sig is None:
        return lambda raw: _converted(raw, kinds, hidden)
    shape = _Shape(sig, name)
    return lambda raw: _converted(shape.check(raw), kinds, hidden)


def _converted(
    raw: dict[str, Any], kinds: dict[str, str], secret: frozenset[str]
) -> dict[str, Any]:
    """String inputs converted to their parameter's int/float/bool annotation (InputError
    naming the input when one does not read as that type); other values are left as given."""
    if not kinds:
        return raw
    todo = [k for k, v in raw.items() if isinstance(v, str) and k in kinds]
    if not todo:
        return raw
    out = dict(raw)
    for key in todo:
        out[key] = convert_value(key, kinds[key], raw[key], secret=key in secret)
    return out


class _Shape:
    """The handler's keyword parameters (after ctx), read once from its signature."""

    def __init__(self, sig: inspect.Signature, name: str) -> None:
        params = list(sig.parameters.values())[1:]  # skip ctx
        self.name = name
        self.accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self.named = {p.name: p for p in params if p.kind in keyword}
        self.required = [n for n, p in self.named.items() if p.default is inspect.Parameter.empty]

    def listing(self) -> str:
        return (
            ", ".join(
                f"{p.name}{'' if p.default is not inspect.Parameter.empty else ' (required)'}"
                for p in self.named.values()
            )
            or "no inputs"
        )

    def check(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Inputs must fit the handler's keyword parameters, so a typo fails before the
        run exists."""
        if not self.accepts_any:
            unknown = [k for k in raw if k not in self.named]
            if unknown:
                import difflib

                hint = difflib.get_close_matches(unknown[0], list(self.named), n=1)
                extra = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise InputError(
                    f"workflow {self.name} has no input {unknown[0]!r}{extra};"
                    f" it takes: {self.listing()}"
                )
        missing = [n for n in self.required if n not in raw]
        if missing:
            first, listing = missing[0], self.listing()
            raise InputError(
                lambda f: (
                    f"workflow {self.name} needs input {first!r} (give"
                    f" {f('input.' + first)}); it takes: {listing}"
                ),
                field=f"input.{first}",
            )
        return raw


def json_type(value: Any) -> str:
    """The JSON-ish type name of a value (null, bool, int, float, str, list, dict)."""
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
