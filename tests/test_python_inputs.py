"""A Python workflow's string inputs are converted to the handler's int/float/bool
annotations, as a YAML workflow's are: `-i n=2` must not hand `n: int` the text "2" (a
new user's pass: the repo's own examples/quote.py died on `-i fail_rate=0`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.errors import InputError
from flowctl.runtime.targets import load_target

FLOW = """{future}
from flowctl import workflow

@workflow(secret_inputs=["pin"])
def typed(ctx, n: int = 0, rate: float = 0.5, loud: bool = False, name: str = "x", pin: int = 0,
          raw=None):
    return [n, rate, loud, name, pin, raw]
"""


@pytest.fixture(params=["", "from __future__ import annotations"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = tmp_path / "typed.py"
    path.write_text(FLOW.format(future=request.param))
    return f"{path}:typed"


def test_string_inputs_become_the_annotated_number_or_flag(target: str) -> None:
    wf = load_target(target)
    got = wf.check_input({"n": "2", "rate": "0", "loud": "yes", "name": "7", "raw": "3"})
    assert got == {"n": 2, "rate": 0.0, "loud": True, "name": "7", "raw": "3"}
    assert type(got["rate"]) is float
    # Values that already have a type are left as the caller gave them.
    assert wf.check_input({"n": 5, "rate": 1}) == {"n": 5, "rate": 1}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"n": "two"}, "input 'n' must be a whole number (int), got 'two' (str)"),
        ({"rate": "fast"}, "input 'rate' must be a number (float), got 'fast' (str)"),
        ({"loud": "maybe"}, "input 'loud' must be "),
        ({"pin": "12x4"}, "input 'pin' must be a whole number (int), got *** (str)"),
    ],
)
def test_a_string_that_does_not_read_as_the_annotated_type_is_refused(
    target: str, given: dict[str, str], message: str
) -> None:
    with pytest.raises(InputError) as exc:
        load_target(target).check_input(given)
    assert str(exc.value).startswith(message)
    assert "12x4" not in str(exc.value)


def test_a_number_too_large_to_convert_is_one_clear_refusal(target: str) -> None:
    wf = load_target(target)
    with pytest.raises(InputError, match="input 'n' has 5,000 digits; a whole number has at most"):
        wf.check_input({"n": "9" * 5000})
    with pytest.raises(InputError, match="must be a whole number"):
        wf.check_input({"n": "\u0663"})  # an Arabic-Indic digit is no ASCII digit
    with pytest.raises(InputError, match="must be a number"):
        wf.check_input({"rate": "1_000.5"})


OPTIONAL = """{future}
from typing import Annotated, Optional
from flowctl import workflow

@workflow
def opt(ctx, a: Optional[int] = None, b: "int | None" = None, c: Annotated[float, "x"] = 0.0,
        d: "int | str" = 0):
    return [a, b, c, d]
"""


@pytest.mark.parametrize("future", ["", "from __future__ import annotations"])
def test_an_optional_or_annotated_number_is_converted_too(tmp_path: Path, future: str) -> None:
    path = tmp_path / "opt.py"
    path.write_text(OPTIONAL.format(future=future))
    wf = load_target(f"{path}:opt")
    assert wf.check_input({"a": "4", "b": "5", "c": "1.5", "d": "6"}) == {
        "a": 4,
        "b": 5,
        "c": 1.5,
        "d": "6",  # a union of two types: left as given
    }
    with pytest.raises(InputError, match="input 'a' must be a whole number"):
        wf.check_input({"a": "x"})
