"""The bounds on what a user may hand flowctl, checked in one place so that no input reaches
a traceback: text must be UTF-8, JSON must be shallow enough to walk and free of numbers
Python refuses or JSON cannot carry, times must lie in a range every later computation
can add a duration to. Each check raises a one-line UsageError (exit 2) before anything is
written. A leaf: stdlib only.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Any

from flowctl.errors import InputError, UsageError

# JSON deeper than this is refused: real inputs are a few levels deep, and every later walk
# (storing, rendering, expressions) recurses.
MAX_JSON_DEPTH = 64
# Times outside these years are refused: far beyond any real plan, and far enough inside
# datetime's own range (years 1-9999) that adding a deadline, a lease or a 10-year sleep
# never overflows.
MIN_YEAR = 1970
MAX_YEAR = 9000
# Upper bounds for integer options (attempts, list sizes, counts, concurrency): above
# these a value is a typo, and far above them it overflows SQLite's 64-bit integers.
MAX_COUNT = 1_000_000
# Checkpoints and timeline events one page of `flowctl show` (and the HTTP run detail) holds
# by default, the newest of each: a 100,000-step run is read a page at a time.
SHOW_STEPS = 50
# An idempotency key is the caller's own name for a run, looked up exactly: longer than this
# it is not a name but a mistake (a file's contents pasted in).
MAX_KEY = 1_000
# Search text is matched against run ids, keys and workflow names, none longer than this;
# SQLite itself refuses a LIKE pattern over 50,000 bytes.
MAX_SEARCH = 1_000
# Free bytes a daemon keeps on a SQLite database's filesystem: below this it starts no new
# run, so runs in flight can finish and the WAL can still be moved into the database.
ROOM_RESERVE = 2 * 1024 * 1024


def is_utf8(text: str) -> bool:
    """False when `text` holds lone surrogates: bytes that were not UTF-8, smuggled in by
    Python's surrogateescape decoding of argv, environment variables and file names."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_bytes(text: str) -> str:
    """`text` with its undecodable bytes written as \\xNN, for an error message."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding produces: show it as \udNNN
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def check_utf8(text: str, what: str) -> str:
    if not is_utf8(text):
        raise UsageError(f"{what} '{shown_bytes(text)}' is not valid UTF-8; give UTF-8 text")
    return text


def one_line(text: str) -> str:
    """`text` with every unprintable character (newlines, escapes, bidi controls, bytes
    that were not UTF-8) written as its Python escape: what the CLI prints is one line,
    whatever a message quotes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


# A colour or style sequence (SGR: ESC [ digits and ; m), the one escape kept in output.
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def terminal_safe(line: str) -> str:
    """One line of a step's recorded output as it may reach a terminal: colours (SGR) and
    tabs kept, every other control character (ESC starting anything else, BEL, CR, C1,
    bidi controls) written as its Python escape. A step's output is untrusted: an OSC or
    cursor sequence in it would retitle the operator's terminal, hide lines, or worse."""
    if line.isprintable():
        return line
    out: list[str] = []
    pos = 0
    for match in _SGR.finditer(line):
        out.append(_escaped(line[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(_escaped(line[pos:]))
    return "".join(out)


def _escaped(text: str) -> str:
    return "".join(ch if ch.isprintable() or ch == "\t" else repr(ch)[1:-1] for ch in text)


def lone_surrogate(value: Any) -> str | None:
    """The first lone UTF-16 surrogate in `value` (a string, or any JSON value), escaped as
    `\\ud800`, or None. Such a string is no Unicode text: no store, HTTP response or
    terminal (UTF-8 all) can take it, so every place that keeps or reads values refuses it."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return e.object[e.start : e.end].encode("unicode_escape").decode("ascii")
    return None


MAX_MESSAGE = 1000  # characters of one error line the CLI prints


def clip_middle(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` in at most about `limit` characters: a message that quotes a huge value (a
    100,000-character id) keeps its start and its end, where the hint says what is
    accepted, and says how much of the middle it cut."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}…({len(text) - head - tail:,} characters cut)…{text[-tail:]}"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a JSON number")
    return value


def loads_json(text: str, what: str, *, hint: str = "") -> Any:
    """Parse JSON a user gave; InputError naming `what` for bad JSON, NaN/Infinity, numbers
    of more than 4,300 digits or beyond a float, and nesting deeper than MAX_JSON_DEPTH."""
    check_utf8(text, what)
    depth = _nesting(text)
    if depth > MAX_JSON_DEPTH:
        raise InputError(f"{what} is nested {depth} levels deep; at most {MAX_JSON_DEPTH}")
    try:
        value = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as e:
        raise InputError(
            f"{what} is not valid JSON ({e.msg} at column {e.colno}): {_short(text)!r}{hint}"
        ) from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"{what} is not usable JSON: {_short(str(e))}") from None
    if "\\ud" in text.lower():  # an escaped surrogate: paired (an emoji), or not (no text)
        bad = lone_surrogate(value)
        if bad is not None:
            raise InputError(
                f"{what} holds a lone UTF-16 surrogate ('{bad}'), which is not text: give"
                " valid Unicode"
            )
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose key appears twice is refused, not settled by the last one (as `-i`
    given twice is refused): one of the two values the user wrote would be lost."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {one_line(key)!r} appears twice in one object: give it once")
        out[key] = value
    return out


def _nesting(text: str) -> int:
    """The deepest bracket nesting outside strings: cheap, and it runs before the parser
    could recurse."""
    deepest = depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def check_time(value: datetime, what: str) -> datetime:
    """An aware time within MIN_YEAR..MAX_YEAR, in UTC."""
    utc = value.astimezone(UTC)
    if not MIN_YEAR <= utc.year <= MAX_YEAR:
        raise UsageError(
            f"{what}: {value.isoformat()} is out of range; use a year between {MIN_YEAR} and {MAX_YEAR}"
        )
    return utc


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_search(search: str | None) -> None:
    """Search text is at most MAX_SEARCH characters (it matches ids, keys and names)."""
    if search is not None and len(search) > MAX_SEARCH:
        raise UsageError(
            f"search text is {len(search):,} characters long: at most {MAX_SEARCH:,} are"
            " accepted (it matches run ids, keys and workflow names)"
        )
