"""Why a run waits for flow control (issue 37, item 6), as pure functions of facts the
store read: held behind its full concurrency key, or waiting for a named limit. Each
returns (reason, facts, sentence) as flowctl.ops.explain's answers do; times are said by
the caller's `when` (local time and how far off)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowctl.flow.keys import key_parts
from flowctl.flow.tokens import LimitSpec
from flowctl.model import Run, iso

Answer = tuple[str, dict[str, Any], str]
When = Callable[[datetime | None, datetime], str]


@dataclass(frozen=True)
class FlowFacts:
    """What holds a run back: the runs running its key (id, since when), or the named
    limit it waits for (its definition, the steps holding it, when it next allows one)."""

    key_holders: Sequence[tuple[str, datetime | None]] = ()
    limit: LimitSpec | None = None
    limit_holders: Sequence[tuple[str, int, datetime]] = ()
    next_free: datetime | None = None


def describe_key(run: Run) -> tuple[str, dict[str, Any]]:
    """`concurrency 1 per user, key 'zed'` (or `concurrency 2 of workflow wf`) and its facts."""
    wf, per, value = key_parts(run.flow_key or "")
    limit = run.flow_limit or 1
    facts = {"workflow": wf, "limit": limit, "key": value, "per": per or None}
    if value is None:
        return f"concurrency {limit} of workflow {wf}", facts
    return f"concurrency {limit} per {per}, key {value!r}", facts


def held_by_key(run: Run, flow: FlowFacts, now: datetime, when: When) -> Answer:
    """A run held behind its full key: which key, and which runs hold it since when."""
    text, facts = describe_key(run)
    holders = [{"run_id": r, "since": iso(t)} for r, t in flow.key_holders]
    facts.update(holders=holders, due_since=iso(run.held_at))
    if flow.key_holders:
        shown = ", ".join(f"run {r} since {when(t, now)}" for r, t in flow.key_holders)
        by = f" held by {shown}"
    else:
        by = " given back: it is claimed at the next claim"
    return "held_by_key", facts, f"queued: {text}{by}"


def waiting_for_limit(run: Run, flow: FlowFacts, now: datetime, when: When) -> Answer:
    """A run parked until the named limit its step takes allows the step."""
    name = run.flow_wait or ""
    spec = flow.limit
    allows = spec.describe() if spec is not None else "no longer defined"
    nxt = (
        run.run_at
        if flow.next_free is None or run.run_at is None
        else min(flow.next_free, run.run_at)
    )
    holders = [{"run_id": r, "index": i, "since": iso(t)} for r, i, t in flow.limit_holders]
    facts = {"limit": name, "allows": allows, "next_start_at": iso(nxt), "holders": holders}
    held = ""
    if flow.limit_holders:
        held = "; held by " + ", ".join(f"run {r} (#{i})" for r, i, _ in flow.limit_holders)
    message = f"waiting for limit {name!r}: {allows}, next start at {when(nxt, now)}{held}"
    return "waiting_for_limit", facts, message


_PARKED = ("queued", "sleeping", "waiting")


def is_held(run: Run) -> bool:
    """Whether flow control holds the run back now (held by its key, or waiting for a
    named limit): `ls` and the TUI show it as held."""
    if str(run.status) not in _PARKED:
        return False
    if run.held_at is not None and run.run_at in (None, run.deadline):
        return True  # held: its run_at is its deadline or none (flowctl.store.flowsql)
    return run.flow_wait is not None and str(run.status) == "sleeping"


def held_note(run: Run) -> str | None:
    """A held run's reason in a few words (ls's NOTE, the TUI's detail), or None."""
    if not is_held(run):
        return None
    if run.held_at is not None and run.run_at in (None, run.deadline):
        return f"held: {describe_key(run)[0]}"
    return f"held: waiting for limit {run.flow_wait!r}"
