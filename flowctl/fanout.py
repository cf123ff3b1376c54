"""Fan-out rules, pure: the largest fan-out, a fan-out's recorded shape, and where a new
attempt cuts a journal that holds fan-out blocks.

A fan-out call (`ctx.map`, `ctx.parallel`, `ctx.children`) takes one call index for its
header (kind `fanout`, the call's shape as its value) and one for each branch right after
it: branch k of a header at index h is at h + 1 + k. The shape is part of the journal, so
a replay that makes the call with another count or order of branches is non-determinism.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

MAX_FANOUT = 10_000  # branches of one fan-out call


def digest(keys: Iterable[str]) -> str:
    """An order-sensitive digest of the branches' keys (12 hex digits)."""
    h = hashlib.sha256()
    for key in keys:
        h.update(key.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:12]


def item_key(item: Any) -> str:
    """What an item of `ctx.map` is known by in the shape: its JSON text, or its type's
    name for a value that is not JSON (its repr could hold an address that changes)."""
    try:
        return json.dumps(item, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return f"<{type(item).__qualname__}>"


def call_key(call: Any) -> str:
    """What a branch of `ctx.parallel` is known by: its function's qualified name (a
    partial's function, a lambda's `<lambda>`)."""
    fn = getattr(call, "func", call)  # functools.partial
    return str(getattr(fn, "__qualname__", type(fn).__qualname__))


def shape(call: str, keys: Sequence[str]) -> dict[str, Any]:
    """The header's value: which call, how many branches, and the digest of their keys."""
    return {"call": call, "count": len(keys), "digest": digest(keys)}


def shape_text(value: Any) -> str:
    """A shape as a message names it: "3 branches (digest 1f2e3d4c5b6a)"."""
    if not isinstance(value, dict):
        return repr(value)
    return f"{value.get('count')} branches (digest {value.get('digest')})"


def same_shape(recorded: Any, now: dict[str, Any]) -> bool:
    return isinstance(recorded, dict) and all(recorded.get(k) == now[k] for k in now)


def children_seen(status: Any, entry: Any) -> int | None:
    """The count of ended child runs a run parking on `ctx.children` saw (its header's
    `ended_seen`), else None. A child that ended after that read found no waiting parent
    to make due, so the parking transaction counts again and, if the count moved, parks
    the parent due now."""
    if str(status) != "waiting" or entry is None or str(entry.kind) != "fanout":
        return None
    seen = entry.value.get("ended_seen") if isinstance(entry.value, dict) else None
    return seen if isinstance(seen, int) else None


def journal_cut(
    errors: Sequence[int], blocks: Sequence[tuple[int, int]]
) -> tuple[int | None, list[int]]:
    """Where a new attempt cuts the journal: (drop every row from this index on, and drop
    these rows too), given the indices of the rows that failed (sorted) and the fan-out
    blocks as (header index, count).

    Without fan-out the cut is at the first failed row: it and everything after it run
    again. A failed row inside a block drops the block's failed rows and everything after
    the block, so the branches that have a result keep it and never run again.
    """
    if not errors:
        return None, []
    first = errors[0]
    for header, count in blocks:
        end = header + count
        if header < first <= end:
            return end + 1, [e for e in errors if header < e <= end]
    return first, []
