"""Run statuses: the word for where a run is, the same in the DB, JSON, CLI and TUI.

Part of the one vocabulary (flowctl.model re-exports every name here), in a module of its
own so that a help text naming the statuses (`flowctl ls --help`) loads the enum alone and
not the row dataclasses (issue 17, item 4).
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"  # waiting to start, or to be retried at run_at
    RUNNING = "running"
    SLEEPING = "sleeping"
    WAITING = "waiting"  # for a signal
    PAUSED = "paused"  # by an operator: never claimed; its deadline still runs
    COMPLETED = "completed"
    DEAD = "dead"  # dead-lettered; `flowctl redrive` revives it
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.DEAD, RunStatus.CANCELLED})
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SLEEPING, RunStatus.WAITING})
# Statuses whose run_at the daemon acts on: the active ones, and paused runs, parked with
# run_at = their deadline so the claim at the deadline dead-letters them (never executed).
DUE = ACTIVE | {RunStatus.PAUSED}


# What --status accepts and help texts list, in the enum's order.
STATUS_NAMES = ", ".join(s.value for s in RunStatus)
