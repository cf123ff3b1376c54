"""The worker protocol's values as JSON lines: no pickle ever crosses the pipe.

A message is one JSON object on one line. The values the engine hands the store and
gets back (runs, journal entries, leases, datetimes, statuses) are tagged objects, so
each side rebuilds the same types; user values (inputs, results, errors) are plain
JSON, which the store would require of them anyway. A dict that is not plain (a key
that is not a string, or that starts with "$") is sent as a list of pairs, so no user
value is ever mistaken for a tag.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from flowctl import errors
from flowctl.engine import Outcome
from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus, from_us, to_us
from flowctl.store.records import Claim, Lease, NewRun
from flowctl.transitions import Applied

_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls for cls in (Run, JournalEntry, Lease, Claim, NewRun, Applied, Outcome)
}
_ENUMS: dict[str, type[StrEnum]] = {cls.__name__: cls for cls in (RunStatus, CallKind, EntryState)}
_FIELDS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in _TYPES.items()}


# Values that are their own JSON form (exact types: a StrEnum is a str subclass and is
# tagged, a bool travels as itself). A run's row is mostly these, so the containers below
# test them inline instead of recursing once per field: 55 encode and 72 decode calls per
# three-step run were half the daemon process's Python work under --workers.
_PLAIN = frozenset({str, int, float, bool, type(None)})
_NESTED = frozenset({dict, list})


def encode(value: Any) -> Any:
    """`value` as JSON-ready data; raises TypeError for what JSON cannot carry."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, StrEnum) and kind.__name__ in _ENUMS:
        return {"$e": kind.__name__, "v": value.value}
    if isinstance(value, str):  # another StrEnum (an error's kind) travels as its text
        return str(value)
    if isinstance(value, list):
        return [v if type(v) in _PLAIN else encode(v) for v in value]
    if isinstance(value, dict):
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: v if type(v) in _PLAIN else encode(v) for k, v in value.items()}
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: encode(v) for k, v in value.items()}  # keys of a str subclass
        return {"$map": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"$tup": [v if type(v) in _PLAIN else encode(v) for v in value]}
    if isinstance(value, datetime):
        return {"$dt": to_us(value)}
    name = kind.__name__
    if name in _TYPES and kind is _TYPES[name]:
        fields = [getattr(value, f) for f in _FIELDS[name]]
        return {"$t": name, "f": [v if type(v) in _PLAIN else encode(v) for v in fields]}
    raise TypeError(f"Object of type {name} is not JSON serializable")


def decode(data: Any) -> Any:
    """The inverse of encode()."""
    if type(data) is list:
        return [decode(v) if type(v) in _NESTED else v for v in data]
    if type(data) is not dict:
        return data
    if "$t" in data:
        name = data["$t"]
        values = [decode(v) if type(v) in _NESTED else v for v in data["f"]]
        return _TYPES[name](**dict(zip(_FIELDS[name], values, strict=True)))
    if "$dt" in data:
        return from_us(data["$dt"])
    if "$e" in data:
        return _ENUMS[data["$e"]](data["v"])
    if "$tup" in data:
        return tuple(decode(v) if type(v) in _NESTED else v for v in data["$tup"])
    if "$map" in data:
        return {decode(k): decode(v) for k, v in data["$map"]}
    return {k: decode(v) if type(v) in _NESTED else v for k, v in data.items()}


# One encoder and decoder for every line: json.dumps with arguments of its own builds a
# new JSONEncoder per call, and json.loads of bytes guesses their encoding each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder()


def dumps_line(message: dict[str, Any]) -> bytes:
    """One message as one line of JSON, ASCII only (NaN refused, as the store refuses it)."""
    return _ENCODER.encode(message).encode() + b"\n"


def loads_line(line: bytes) -> dict[str, Any]:
    message = _DECODER.decode(line.decode())
    if not isinstance(message, dict):
        raise ValueError(f"not a message: {line[:80]!r}")
    return message


def error_message(exc: BaseException) -> dict[str, str]:
    """An exception a store call raised in the owner, for the worker to raise again."""
    return {"type": type(exc).__name__, "message": str(exc)}


def rebuild_error(err: dict[str, str]) -> BaseException:
    """The store's error as the worker raises it: the same FlowctlError subclass when it
    is one (SerializationError, DiskFullError, ...), else a DatabaseError naming it."""
    cls = getattr(errors, err.get("type", ""), None)
    message = err.get("message", "")
    if isinstance(cls, type) and issubclass(cls, errors.FlowctlError):
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        return exc
    return errors.DatabaseError(f"the daemon could not write: {err.get('type')}: {message}")
