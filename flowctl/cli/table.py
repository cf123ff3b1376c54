"""The one table renderer of the CLI (`ls`, `agenda`, `schedule ls`, `workflows`, ...).

Widths: in a terminal a table fits the terminal's width (COLUMNS overrides it, as for any
program): when the natural widths do not fit, the widest cuttable column gives way first,
down to a floor, and a cut cell ends with an ellipsis (…). Columns in `keep` (ids, names,
statuses, times: what a reader copies or scans) are never cut. When even the floors do not
fit, the least important columns are left out whole (`order` ranks the columns, most
important first; by default left to right), rather than cutting what matters or letting
the terminal wrap every line; a line that still does not fit is cut at the width. When stdout is not a terminal (a pipe, a file, a
script) nothing is cut: every cell is printed whole, so `flowctl ls | grep` sees the full
text. Cell widths are measured, and cells cut, in terminal cells (a CJK character is two)
by Rich's cell functions (rich.cells): a cell is text, never markup.

Only rich.cells is imported, when a table is printed: Rich's Console and Table cost ~40 ms
of CPU for a 50-row `flowctl ls` (measured), half the start-up budget, for layout this
module does in a few lines; `flowctl --help` loads no Rich at all
(tests/test_startup_imports.py).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Collection, Sequence

import typer

GAP = 2  # spaces between columns
FLOOR = 8  # a cut column keeps at least this many cells (or its header, if longer)


def terminal_width() -> int | None:
    """The width to fit, or None for "never cut" (stdout is not a terminal)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size(fallback=(100, 24)).columns


def fit(natural: Sequence[int], floors: Sequence[int], width: int | None) -> list[int]:
    """Column widths that fit `width` (gaps included): the widest cuttable column shrinks
    one cell at a time until the table fits or every cuttable column is at its floor
    (`floors[i] >= natural[i]` marks a column that is never cut). Pure."""
    widths = list(natural)
    if width is None:
        return widths
    room = width - GAP * (len(widths) - 1)
    while sum(widths) > room:
        cuttable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not cuttable:
            break  # as narrow as it goes: the terminal wraps what is left
        widest = max(cuttable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def shown(floors: Sequence[int], width: int | None, order: Sequence[int]) -> list[int]:
    """The columns to print, in table order: taken by importance (`order`, most important
    first) while their floors and gaps fit `width`; one that does not fit is left out and
    a smaller, less important one may still fit. The most important column is always
    shown. Pure."""
    if width is None:
        return list(range(len(floors)))
    taken: list[int] = []
    for i in order:
        if not taken or sum(floors[j] + GAP for j in taken) + floors[i] <= width:
            taken.append(i)
    return sorted(taken)


def render(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    keep: Collection[int] = (0,),
    width: int | None = None,
    order: Sequence[int] | None = None,
) -> str:
    """The table as text, lines right-stripped, for `width` cells (None: nothing cut, no
    column left out); `order` ranks the columns for leaving out (default: left to right)."""
    from rich.cells import cell_len, set_cell_size

    natural = [max([cell_len(h), *(cell_len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    floors = [
        n if i in keep else min(n, max(FLOOR, cell_len(h)))
        for i, (n, h) in enumerate(zip(natural, headers, strict=True))
    ]
    cols = shown(floors, width, range(len(headers)) if order is None else order)
    widths = fit([natural[i] for i in cols], [floors[i] for i in cols], width)

    def cell(text: str, w: int) -> str:
        if cell_len(text) > w:  # cut: the last cell that fits becomes the ellipsis
            return set_cell_size(text, w - 1) + "…"
        return set_cell_size(text, w)

    gap = " " * GAP
    out = []
    for line in [headers, *rows]:
        text = gap.join(cell(line[i], w) for i, w in zip(cols, widths, strict=True)).rstrip()
        out.append(cell(text, width) if width is not None and cell_len(text) > width else text)
    return "\n".join(out)


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    keep: Collection[int] = (0,),
    order: Sequence[int] | None = None,
) -> None:
    """Print `rows` under `headers` on stdout, fitted to the terminal (see the module)."""
    typer.echo(render(headers, rows, keep=keep, width=terminal_width(), order=order))


def cut_notice(
    shown: int, total: int | None, what: str, *, flag: str = "--limit/-n", scope: str = ""
) -> None:
    """Say on stderr that a list is cut, so stdout stays the list (or one JSON document):
    `flowctl: showing 200 of 5,123 runs; use --limit/-n for more`. `total` None: more
    exist, uncounted (`of more than 200`)."""
    of = f"{total:,}" if total is not None else f"more than {shown:,}"
    typer.echo(f"flowctl: showing {shown:,} of {of} {what}{scope}; use {flag} for more", err=True)
