"""The CLI's own input syntax: `-i key=value` (a string), `-i key:=JSON` (a typed value)
and `--input JSON` (the whole object), for `run`, `fork`, `rerun` and `schedule add`.

It is the CLI's, so its errors name its flags; the HTTP API and the Client take the input
as one object and never parse this syntax.
"""

from __future__ import annotations

from typing import Any

from flowctl.errors import InputError
from flowctl.limits import loads_json


def parse_inputs(pairs: list[str] | None = None, input_json: str | None = None) -> dict[str, Any]:
    """`--input JSON` first, then `-i key=value` (string) and `-i key:=JSON` (typed) on top.

    One name given twice (twice with -i, or in --input and with -i) is refused rather
    than one value silently winning.
    """
    data: dict[str, Any] = {}
    given: set[str] = set()
    if input_json is not None:
        loaded = loads_json(input_json, "--input")
        if not isinstance(loaded, dict):
            raise InputError(
                f"--input must be a JSON object like '{{\"user\": 42}}', got {input_json!r}"
            )
        data.update(loaded)
    for pair in pairs or []:
        if ":=" in pair and (
            pair.find(":=") < pair.find("=") + 1 or "=" not in pair.split(":=")[0]
        ):
            key, _, raw = pair.partition(":=")
            value = loads_json(
                raw,
                f"-i {key.strip()}:=",
                hint=f"; the value after ':=' must be JSON, for a plain string use {key}=VALUE",
            )
        elif "=" in pair:
            key, _, value = pair.partition("=")
        else:
            raise InputError(
                f"-i {pair!r}: use key=value for a string or key:=JSON for a typed value"
            )
        key = key.strip()
        if not key:
            raise InputError(f"-i {pair!r}: the input name before '=' is empty")
        if key in given:
            raise InputError(f"input {key!r} is given twice with -i: give each input once")
        if key in data:
            raise InputError(f"input {key!r} is given in --input and with -i: give each input once")
        given.add(key)
        data[key] = value
    return data
