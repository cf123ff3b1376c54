"""How the TUI's list fits its pane: which columns show, and how wide, so that no cell is
clipped by the pane's edge (a clip shows no ellipsis; a cut cell ends with one).

The rule of the CLI's tables (flowctl/cli/table.py), in cells: the widest cuttable column
gives way first, one cell at a time, down to a floor (its label, or FLOOR, whichever is
longer). Only free text is cuttable (names, input, errors): a time, a count or a status
cut short says nothing, so such a column is `whole`, and columns in `keep` (the run id:
what an operator copies) are never cut. When even the floors do not fit, the rightmost
column that may go is hidden, then the next, and the list says which (the detail pane
shows every field). Pure: the app measures, this decides.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

FLOOR = 8  # a cut column keeps at least this many cells (or its label's, if longer)
SLACK = 2  # cells a live cell (a countdown) may grow by before the next fit


@dataclass(frozen=True)
class Fit:
    widths: tuple[int | None, ...]  # per column: its width in cells, or None: hidden

    @property
    def hidden(self) -> tuple[int, ...]:
        return tuple(i for i, w in enumerate(self.widths) if w is None)


def fit(
    labels: Sequence[int],
    natural: Sequence[int],
    width: int | None,
    *,
    keep: Collection[int] = (0,),
    whole: Collection[int] = (),
    least: Mapping[int, int] | None = None,
    padding: int = 1,
) -> Fit:
    """Column widths for a table `width` cells wide (None or 0: not laid out yet, nothing
    cut). `labels[i]` is column i's label width, `natural[i]` its widest cell or label;
    `least[i]` raises column i's floor above FLOOR; each shown column costs 2 * `padding`
    cells beside its width."""
    if not width:
        return Fit(tuple(natural))
    least = least or {}
    floors = [
        n if i in keep or i in whole else min(n, max(least.get(i, FLOOR), labels[i]))
        for i, n in enumerate(natural)
    ]
    shown = list(range(len(natural)))
    while True:
        widths = {i: natural[i] for i in shown}
        room = width - 2 * padding * len(shown)
        while sum(widths.values()) > room:
            cuttable = [i for i in shown if widths[i] > floors[i]]
            if not cuttable:
                break
            widest = max(cuttable, key=lambda i: (widths[i], i))  # a tie: the rightmost
            widths[widest] -= 1
        optional = [i for i in shown if i not in keep]
        if sum(widths.values()) <= room or not optional:
            return Fit(tuple(widths.get(i) for i in range(len(natural))))
        shown.remove(optional[-1])  # even the floors do not fit: the rightmost goes


def natural_widths(
    labels: Sequence[int], limits: Sequence[int | None], rows: Sequence[Sequence[int]]
) -> list[int]:
    """Each column's natural width: its widest cell or its label. A column with a limit
    (a live countdown) gets SLACK cells more, up to its limit, so that it can tick to a
    longer text ("59s ago" to "1m00s ago") without being cut before the next fit."""
    out = []
    for i, limit in enumerate(limits):
        widest = max([0, *(row[i] for row in rows)])
        if limit is None:
            out.append(max(labels[i], widest))
        else:
            out.append(max(labels[i], min(limit, widest + SLACK)))
    return out
