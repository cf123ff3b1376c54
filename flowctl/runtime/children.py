"""`ctx.children`: one child run per input, the parent parked `waiting` (no worker held)
while they run; their results in input order.

The call takes a header index (kind `fanout`, its shape) and one step index per child,
named `workflow TARGET[k]`. Child k is started once, keyed by the parent run and its call
index (`child:RUN:INDEX`), so a crash between starting it and journaling it never starts
a second. With `max_concurrency`, at most N children are active; the next starts when the
parent wakes to one's end. A child that ended dead or cancelled is journaled as an error;
once every child has ended, those raise one ParallelError naming each child run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowctl.errors import ParallelError
from flowctl.fanout import shape
from flowctl.model import CallKind, EntryState, JournalEntry, Run, RunStatus
from flowctl.runtime.fanout import Host, failures, header
from flowctl.runtime.suspend import Suspend

# (target, input, key) -> the child's run id: the engine's launcher, idempotent by key.
Start = Callable[[str, dict[str, Any], str], str]


@dataclass
class _Pass:
    """What one replay of the call found: results, failures, children still running."""

    results: list[Any]
    failed: dict[int, JournalEntry] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)
    unstarted: list[int] = field(default_factory=list)


def run_children(
    ctx: Host,
    target: str,
    inputs: list[dict[str, Any]],
    keys: list[str],
    limit: int,
    start: Start,
) -> list[Any]:
    """The results of one child run per input, in order (see module)."""
    name = f"workflow {target}"
    head = header(ctx, "ctx.children", name, keys)
    slots = [ctx._next_call(CallKind.STEP, f"{name}[{k}]") for k in range(len(inputs))]
    open_ = any(e is None or e.state not in (EntryState.DONE, EntryState.ERROR) for _, e in slots)
    # Read only when some child has no ending journaled (a replay of a finished call
    # reads nothing: `flowctl check` replays with no store to read).
    known = {r.key: r for r in ctx._store.children_of(ctx.run_id) if r.key} if open_ else {}
    found = _Pass([None] * len(inputs))
    for k, (index, entry) in enumerate(slots):
        child = known.get(_key(ctx, index))
        _settle(ctx, found, k, (index, f"{name}[{k}]"), entry, child)
    now = found.unstarted[: max(0, limit - len(found.running))]
    for k in now:
        index = slots[k][0]
        child_id = start(target, inputs[k], _key(ctx, index))
        pending = {"child_run_id": child_id}
        ctx._record(ctx._entry(index, CallKind.STEP, f"{name}[{k}]", EntryState.PENDING, pending))
        found.running.append(child_id)
    if found.running:
        ended = sum(1 for r in known.values() if r.status.is_terminal)
        later = len(found.unstarted) - len(now)
        raise ctx._halt(_wait(ctx, head, name, keys, found, later, ended))
    if found.failed:
        raise ParallelError(f"ctx.children({target!r})", failures(found.failed, slots), len(inputs))
    return found.results


def _key(ctx: Host, index: int) -> str:
    return f"child:{ctx.run_id}:{index}"


def _settle(
    ctx: Host,
    found: _Pass,
    k: int,
    slot: tuple[int, str],
    entry: JournalEntry | None,
    child: Run | None,
) -> None:
    """Child k as recorded, or as its run stands now (its ending journaled here)."""
    index, name = slot
    if entry is not None and entry.state is EntryState.DONE:
        found.results[k] = entry.value
    elif entry is not None and entry.state is EntryState.ERROR:
        found.failed[k] = entry
    elif child is None:
        found.unstarted.append(k)
    elif child.status is RunStatus.COMPLETED:
        ctx._record(ctx._entry(index, CallKind.STEP, name, EntryState.DONE, child.result))
        found.results[k] = child.result
    elif child.status.is_terminal:
        err = dict(
            child.error
            or {"type": "ChildFailed", "message": f"child run {child.run_id} {child.status}"}
        )
        err["child_run_id"] = child.run_id
        done = ctx._entry(index, CallKind.STEP, name, EntryState.ERROR, err)
        ctx._record(done, ("child failed", {"index": index, "child_run_id": child.run_id}))
        found.failed[k] = done
    else:
        found.running.append(child.run_id)


def _wait(
    ctx: Host, head: int, name: str, keys: list[str], found: _Pass, later: int, ended: int
) -> Suspend:
    """Park the parent waiting, no worker held; any child's end makes it due again."""
    value = {**shape("ctx.children", keys), "ended_seen": ended}
    entry = ctx._entry(head, CallKind.FANOUT, name, EntryState.DONE, value)
    data = {
        "name": name,
        "index": head,
        "running": len(found.running),
        "not_started": later,
        "count": len(keys),
        "children": found.running[:20],
    }
    return Suspend(RunStatus.WAITING, None, entry, ("waiting for children", data))
