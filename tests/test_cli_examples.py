"""Every command's help ends with an Examples block (issue 17, item 3): whole lines that a
narrow terminal does not rewrap, and run ids shaped like the ones flowctl makes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from flowctl import cli
from flowctl.cli.lazy import build_all
from flowctl.ids import new_run_id


def _commands() -> Iterator[tuple[list[str], Any]]:
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    yield from walk(build_all(get_command(cli.app)), [])  # built: stand-ins have no options


_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, as flowctl.ids writes ids
COMMANDS = dict((" ".join(p), c) for p, c in _commands())
RUN_ID = re.compile(f"[{_ALPHABET}]{{16}}")
# a word that could be meant as a run id (or a prefix of one): letters and digits of the
# alphabet, both kinds present, 4 or more characters (`7d`, `user-42`, `nightly` are not)
ID_LIKE = re.compile(rf"(?=[{_ALPHABET}]*\d)(?=[{_ALPHABET}]*[a-z])[{_ALPHABET}]{{4,}}")


def _examples(path: str, columns: int) -> list[str]:
    args = [*path.split(), "--help"] if path else ["--help"]
    # CliRunner forces click's help width to 80 whatever COLUMNS says; terminal_width is
    # what a terminal of that width gives the help formatter
    out = CliRunner().invoke(cli.app, args, terminal_width=columns).output
    assert "Examples:\n" in out, f"`flowctl {path} --help` has no Examples block"
    boxes = {len(line) for line in out.splitlines() if line.startswith("╭")}
    assert boxes == {columns}, f"help drawn {boxes} wide in a {columns}-column terminal"
    block = out.split("Examples:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_id_shape_is_the_one_flowctl_makes() -> None:
    assert RUN_ID.fullmatch(new_run_id()) and ID_LIKE.fullmatch(new_run_id())
    assert not ID_LIKE.fullmatch("nightly") and not ID_LIKE.fullmatch("7d")


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: p or "flowctl")
def test_every_command_has_whole_examples_with_real_looking_ids(path: str) -> None:
    usage = CliRunner().invoke(cli.app, [*path.split(), "-h"]).output.splitlines()[0]
    assert "......" not in usage and "...]..." not in usage, usage  # RUN..., not RUN......
    wide, narrow = _examples(path, 100), _examples(path, 50)
    assert wide == narrow, "an example was rewrapped in a narrow terminal"
    for line in wide:
        words = line.split()
        assert "flowctl" in words[:2], line  # a command, perhaps after one VAR=value
        for word in words:
            if ID_LIKE.fullmatch(word):
                assert RUN_ID.fullmatch(word), f"{word!r} does not look like a run id: {line}"
    takes_run = any("RUN" in str(p.metavar or "") for p in COMMANDS[path].params)
    if takes_run:  # a command on a run shows a whole run id
        assert any(RUN_ID.fullmatch(w) for line in wide for w in line.split()), wide
