"""The statements of flow control (issue 37) that the schemas share with the store: a
leaf, so the schema modules import it without the store.

A run of a limited key is *held* while its key is full: its due time moves to `held_at`
and its run_at becomes its deadline (or NULL), so it leaves the claim's candidates and
costs the claim nothing while it waits. Whatever makes a run of that key leave
`running` gives the slot back by making the first held run of the key due again
(FLOW_RELEASE, run by a trigger of each schema in that write's own transaction).
"""

from __future__ import annotations

# A run that may wait behind its key (queued, sleeping, waiting), spelled with OR, not IN:
# SQLite builds a temporary b-tree for an IN list of three or more values each time it
# evaluates one, and a partial index's condition is evaluated for the old and the new row
# of every UPDATE that may move its entry (about 3 µs each, every write of a keyed run).
WAITING = ("queued", "sleeping", "waiting")
WAITS = "(" + " OR ".join(f"status = '{status}'" for status in WAITING) + ")"

# The first held run of key ? (priority first, then the time it became due) due again.
# Priority orders held runs within a key; it never lets a run past the key's limit. A held
# run's run_at is its deadline or NULL: one made due meanwhile by another path (a signal,
# a resume, a redrive) is no longer held, whatever its held_at says until its claim.
FLOW_RELEASE = (
    "UPDATE runs SET run_at = held_at, held_at = NULL WHERE run_id = (SELECT h.run_id FROM"
    " runs h WHERE h.flow_key = ? AND h.held_at IS NOT NULL AND"
    f" {WAITS.replace('status', 'h.status')} AND (h.run_at IS NULL OR h.run_at = h.deadline)"
    " ORDER BY h.priority DESC, h.held_at, h.run_id LIMIT 1)"
)

# The indexes of flow control, the same on both backends: running runs per key (a claim's
# count), held runs per key in release order, due runs with a priority, runs waiting for
# a named limit, and the one not-yet-started run per debounce key.
FLOW_INDEXES = (
    "CREATE INDEX runs_flow ON runs(flow_key, status) WHERE flow_key IS NOT NULL",
    "CREATE INDEX runs_flow_held ON runs(flow_key, priority DESC, held_at, run_id)"
    " WHERE held_at IS NOT NULL",
    "CREATE INDEX runs_priority ON runs(status, priority DESC, run_at, run_id) WHERE priority <> 0",
    "CREATE INDEX runs_flow_wait ON runs(flow_wait, run_at) WHERE flow_wait IS NOT NULL",
    "CREATE UNIQUE INDEX runs_debounce ON runs(debounce_key) WHERE debounce_key IS NOT NULL"
    " AND status = 'queued' AND started_at IS NULL",
    "CREATE INDEX limit_starts_at ON limit_starts(name, at)",
)

# The indexes of flow control since SQLite migration 24 (PostgreSQL version 13), in place
# of FLOW_INDEXES' runs_flow on (flow_key, status) over every keyed run: there a run's entry
# moved within its key's part of the index at its claim and again at its ending, so a
# round of runs over many keys wrote most of that index's pages (1.5 WAL frames per keyed
# run, a third of all it wrote). Now the runs running per key (a claim's count, `why`'s
# holders: as many entries as runs running) and the keyed runs not held and not running
# (the hold's path to a key's due runs: after a key's runs are held, only the one its
# release makes due again, which the same round's claim takes). Neither holds a finished
# run, so an ending moves nothing in either. A query uses runs_flow_due only when its WHERE
# repeats the index's condition word for word (SQLite's planner proves no more).
FLOW_RUNNING_INDEXES = (
    "CREATE INDEX runs_flow ON runs(flow_key) WHERE flow_key IS NOT NULL AND status = 'running'",
    "CREATE INDEX runs_flow_due ON runs(flow_key, run_at) WHERE flow_key IS NOT NULL"
    f" AND held_at IS NULL AND {WAITS}",
)

# Queued runs that have run before (a step's retry, a run released by a drain or taken
# back from a dead worker), in due order: the claim's arm for wakes that are queued, so
# they go before fresh runs of the same priority (issue 40, item 3).
RESUMED_INDEX = (
    "CREATE INDEX runs_resumed ON runs(run_at, run_id)"
    " WHERE status = 'queued' AND started_at IS NOT NULL"
)
