"""Plain str/int/bool/list[str] options converted without pydantic.

Typer >= 0.2x converts every option value through a pydantic TypeAdapter, and importing
pydantic costs more than the rest of `flowctl ls` together (issue 17, item 4). flowctl's
options are all plain strings, whole numbers with a range, flags and repeated strings, so
`install()` gives those a converter written out here and leaves every other annotation to
Typer. The invariant kept: a value flowctl's CLI accepts, or rejects, is the same with
either converter (tests/test_startup_imports.py checks both sides); only the wording of a
rejection is flowctl's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_PLAIN = (str, int, bool)


def _whole(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.lstrip("+-").isdigit():
        raise ValueError
    return int(text)


def _plain(kind: Any, value: Any, low: float | None, high: float | None) -> Any:
    """`value` as a `kind` option (str, bool or a whole number in low..high); a refusal is
    a ValueError whose text is the one line the user is shown."""
    if kind is str:
        return value if isinstance(value, str) else str(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "t", "yes", "y", "on"):
            return True
        if text in ("0", "false", "f", "no", "n", "off"):
            return False
        raise ValueError(f"{value!r} is not true or false")
    try:
        number = _whole(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None
    if low is not None and number < low:
        raise ValueError(f"must be at least {low}, got {number}")
    if high is not None and number > high:
        raise ValueError(f"must be at most {high}, got {number}")
    return number


def install() -> None:
    """Route plain annotations through `_convert`; a no-op on a Typer without pydantic."""
    try:
        from typer import core as typer_core
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
    except ImportError:  # pragma: no cover - a Typer that does not use pydantic
        return
    core: Any = typer_core  # build_runtime_param is Typer's private name for this step
    if getattr(core.build_runtime_param, "_flowctl", False):
        return
    typer_build = core.build_runtime_param

    class PlainParam(RuntimeParam):  # RuntimeParam's dataclass fields and methods, as they are:
        # no @dataclass here, which would generate them again (an exec each) on every start
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, list | tuple):
                return [self._one(v, param, ctx) for v in value]
            return self._one(value, param, ctx)

        def _one(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            try:
                return _plain(self.annotation, value, info.min, info.max)
            except ValueError as e:
                raise BadParameter(str(e), ctx=ctx, param=param) from None

    def build(descriptor: Any) -> Any:
        info = descriptor.parameter_info
        kind = descriptor.annotation
        if descriptor.is_list:
            args: tuple[Any, ...] = tuple(getattr(kind, "__args__", ()))
            kind = args[0] if len(args) == 1 else None
        plain = (
            kind in _PLAIN
            and descriptor.file_annotation is None
            and info.parser is None
            and not info.clamp
        )
        if not plain:
            return typer_build(descriptor)
        return PlainParam(annotation=kind, parameter_info=info)

    build._flowctl = True  # type: ignore[attr-defined]
    core.build_runtime_param = build
    _TYPER_BUILD.append(typer_build)


_TYPER_BUILD: list[Any] = []  # Typer's own builder, once install() has replaced it


def installed() -> bool:
    """Whether plain options currently bypass Typer's pydantic converter."""
    from typer import core

    return bool(getattr(getattr(core, "build_runtime_param", None), "_flowctl", False))


@contextmanager
def typers_converter() -> Iterator[None]:
    """Typer's own converter for the duration (the test that both agree uses it)."""
    from typer import core as typer_core

    core: Any = typer_core
    ours = core.build_runtime_param
    if _TYPER_BUILD:
        core.build_runtime_param = _TYPER_BUILD[0]
    try:
        yield
    finally:
        core.build_runtime_param = ours
