"""Concurrency and debounce keys: a template such as `"${{ input.user }}"` rendered
against a run's input when it is created, and the stored key that names both the
workflow and the rendered value (so two workflows never share a key)."""

from __future__ import annotations

import json
import re
from typing import Any

from flowctl.errors import InputError, UsageError

_EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
_PATH = re.compile(r"^input(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def check_template(template: str, field: str) -> None:
    """UsageError unless every `${{ ... }}` in `template` is an input path."""
    found = _EXPR.findall(template)
    if not found:
        raise UsageError(
            f'{field} must use the input, such as "${{{{ input.user }}}}", got {template!r}',
            field=field,
        )
    for inner in found:
        if not _PATH.match(inner):
            raise UsageError(
                f"{field}: ${{{{ {inner} }}}} is not an input path such as input.user",
                field=field,
            )


def render(template: str, input: Any, field: str) -> str:
    """`template` with each `${{ input.a.b }}` replaced by that value of `input` (text as
    is, anything else as JSON). InputError, one line, if a value is missing or null."""

    def value(m: re.Match[str]) -> str:
        path = m.group(1).split(".")[1:]
        here: Any = input
        for part in path:
            if not isinstance(here, dict) or here.get(part) is None:
                raise InputError(
                    f"{field} {template!r} does not render: the input has no"
                    f" {'.'.join(['input', *path])}",
                    field=field,
                )
            here = here[part]
        return here if isinstance(here, str) else json.dumps(here, sort_keys=True)

    return _EXPR.sub(value, template)


def label(template: str) -> str:
    """What a key template is per, as `why` says it: `${{ input.user }}` is per user."""
    return "+".join(m.removeprefix("input.") for m in _EXPR.findall(template)) or template


def flow_key(workflow: str, rendered: str | None, per: str = "") -> str:
    """The stored key: the workflow alone, or `["workflow", "per", "value"]`."""
    return workflow if rendered is None else json.dumps([workflow, per, rendered])


def key_parts(key: str) -> tuple[str, str, str | None]:
    """(workflow, what the key is per, rendered value or None) of a stored key."""
    if key.startswith("["):
        try:
            wf, per, value = json.loads(key)
            return str(wf), str(per), str(value)
        except (ValueError, TypeError):
            pass
    return key, "", None
