"""Runs made, claimed and leased with explicit instants, for the store's claim tests
(tests/test_flow_claims.py, tests/test_wakes_first.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flowctl.store import Lease, NewRun, Store

T0 = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)
SECOND = timedelta(seconds=1)
LEASE = 15 * SECOND
OWNER = "host-a/100/1/aaaa"


def new(store: Store, run_id: str, at: datetime = T0, **kw: Any) -> str:
    store.create_run(NewRun(run_id, "wf", "wf.py:wf", "python", {}, **kw), at)
    return run_id


def claim(store: Store, now: datetime, limit: int = 10) -> list[str]:
    """The ids `OWNER` claims at `now`, in claim order."""
    claims, _ = store.claim_due(OWNER, now, now + LEASE, limit)
    return [c.run.run_id for c in claims]


def lease(store: Store, run_id: str) -> Lease:
    """`OWNER`'s lease on `run_id` as it is now."""
    return Lease(run_id, store.get_run(run_id).fence, OWNER)
