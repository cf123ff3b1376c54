"""A recorded traceback (issue 40, item 2): Python's own text without 3.11's column
markers (finding them parsed each line's source: most of a failed try's cost), bounded
in frames and in chained exceptions."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from flowctl.runtime.recorded import error_dict, format_traceback

MARKERS = re.compile(r"^\s*[\^~]+\s*$")  # a line of Python 3.11's column markers


def deep(n: int) -> None:
    if n == 0:
        raise KeyError("missing")
    deep(n - 1)


def chained() -> None:
    try:
        deep(2)
    except KeyError as e:
        raise ValueError("wrapped") from e


def python_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return "".join(line for line in text.splitlines(True) if not MARKERS.match(line))


def caught(fn: object, *args: object) -> BaseException:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as e:
        return e
    raise AssertionError("it did not raise")


def test_it_is_pythons_text_without_the_column_markers() -> None:
    for exc in (caught(deep, 3), caught(chained)):
        assert format_traceback(exc) == python_text(exc)

    def during() -> None:
        try:
            chained()
        except ValueError:
            print(1 / 0)

    exc = caught(during)
    assert format_traceback(exc) == python_text(exc)
    assert "During handling of the above exception" in format_traceback(exc)


def test_it_keeps_the_innermost_frames_of_a_deep_stack() -> None:
    text = format_traceback(caught(deep, 200))
    assert text.count('  File "') == 40
    assert "earlier frame(s) left out" in text
    assert text.endswith("KeyError: 'missing'\n")


def test_it_keeps_the_last_exceptions_of_a_long_chain() -> None:
    def link(n: int) -> None:
        if n == 0:
            raise OSError("root")
        try:
            link(n - 1)
        except Exception as e:
            raise RuntimeError(f"level {n}") from e

    text = format_traceback(caught(link, 10))
    assert text.count("Traceback (most recent call last)") == 4
    assert "level 10" in text and "root" not in text


def test_error_dict_records_it_bounded() -> None:
    exc = caught(deep, 2)
    assert error_dict(exc)["traceback"] == format_traceback(exc)
    deepest = error_dict(caught(deep, 900))["traceback"]
    assert deepest.count('  File "') == 40 and len(deepest) < 8000


def test_a_steps_traceback_starts_at_the_users_code_not_flowctls() -> None:
    """The frames of flowctl calling a step's body (the engine, the batch runner) say
    nothing to the user: the recorded text starts at the user's first frame. flowctl's
    frames are made here by code compiled under a file name in flowctl's package."""
    import flowctl

    own = Path(flowctl.__file__).parent / "runtime" / "caller.py"
    space: dict[str, object] = {}
    source = (
        "def catch(fn, *a):\n    try:\n        fn(*a)\n    except BaseException as e:\n"
        "        return e\n\n\ndef boom():\n    raise ValueError('inside')\n"
    )
    exec(compile(source, str(own), "exec"), space)
    exc = space["catch"](deep, 1)  # type: ignore[operator]
    assert str(own) in python_text(exc)  # Python's own text starts in flowctl's frame
    text = format_traceback(exc)
    assert str(own) not in text and text.count('  File "') == 2
    assert text.splitlines()[1].endswith(", in deep") and text.endswith("KeyError: 'missing'\n")
    boom = space["boom"]
    own_only = space["catch"](boom)  # type: ignore[operator]
    assert format_traceback(own_only).count('  File "') == 2  # nothing but flowctl's: kept
    assert format_traceback(own_only).endswith("ValueError: inside\n")


class Outer:
    class Inner(Exception):
        pass


class NoStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_its_last_line_is_pythons_for_every_kind_of_exception() -> None:
    """The last line is written without traceback's machinery (a third of the cost):
    the same text as Python's, whatever the exception."""
    noted = ValueError("with a note")
    noted.add_note("a note")
    kinds: list[BaseException] = [
        KeyError("k"),
        ValueError(),
        Outer.Inner("nested"),
        NoStr(),
        noted,
        SyntaxError("bad", ("f.py", 1, 2, "x y")),
        SystemExit(3),
    ]
    for exc in kinds:
        raised = caught(lambda e=exc: (_ for _ in ()).throw(e))
        ours = "".join(x for x in format_traceback(raised).splitlines(True) if not MARKERS.match(x))
        assert ours == python_text(raised), type(exc).__name__  # a SyntaxError keeps its caret
