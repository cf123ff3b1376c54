"""The position-tracking tree the YAML loader builds: values with their line and column,
and the problems found in one file, reported at file:line:column."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Node:
    """A parsed YAML value with its place, so every problem can point at file:line:column."""

    value: Any  # dict[str, Node] | list[Node] | a scalar
    text: str | None  # a scalar's source text
    line: int
    column: int
    key_line: int = 0
    key_column: int = 0

    @property
    def is_map(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_list(self) -> bool:
        return isinstance(self.value, list)


class Problems:
    """Every problem found in one file, so they are all reported at once, in file order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[tuple[int, int, str, str]] = []

    def add(self, line: int, column: int, where: str, message: str) -> None:
        self.items.append((line, column, where, message))

    def at(self, node: Node, where: str, message: str, *, key: bool = False) -> None:
        if key and node.key_line:
            self.add(node.key_line, node.key_column, where, message)
        else:
            self.add(node.line, node.column, where, message)

    def lines(self) -> list[str]:
        ordered = sorted(self.items, key=lambda item: (item[0], item[1]))
        return [f"{self.path}:{line}:{col}: {where}: {msg}" for line, col, where, msg in ordered]


def to_plain(node: Node) -> Any:
    """The node tree as plain JSON-like Python values."""
    if node.is_map:
        return {key: to_plain(child) for key, child in node.value.items()}
    if node.is_list:
        return [to_plain(child) for child in node.value]
    return node.value


def schedule_places(entry: Node) -> dict[str, tuple[int, int]]:
    """Where one `schedule:` entry and each of its fields stand, so the schedule checks (run
    later, against the cron and time zone code) can point at file:line:column too. Keys:
    "" the entry, FIELD its value, "key:FIELD" the key itself."""
    places = {"": (entry.line, entry.column)}
    if entry.is_map:
        for key, child in entry.value.items():
            places[key] = (child.line, child.column)
            places[f"key:{key}"] = (child.key_line, child.key_column)
    return places


def plain(node: Node) -> Any:
    """A Node tree as plain Python values."""
    value = node.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, list) else value
