"""Schedule rows to flowctl values and back: the schedules and schedule_history columns.
Apart from rows.py so that reading runs (listing.py) does not load the store records."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from flowctl.errors import ScheduleNotFoundError
from flowctl.model import RunStatus, from_us
from flowctl.store.records import ScheduleEvent, ScheduleRow, dumps
from flowctl.store.sqlite.rows import _dt, _loads

_SCHEDULE_COLUMNS = (
    "name, target, cwd, input, spec, paused, created_at, updated_at, active_from, last_fire_at,"
    " next_fire_at, revision, source, origin, secret_keys"
)
_HISTORY_COLUMNS = "h.schedule, h.fire_at, h.action, h.run_id, h.at, h.detail, r.status"


def _schedule_from_row(r: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(
        name=r[0],
        target=r[1],
        cwd=r[2],
        input=json.loads(r[3]),
        spec=r[4],
        paused=bool(r[5]),
        created_at=from_us(r[6]),
        updated_at=from_us(r[7]),
        active_from=from_us(r[8]),
        last_fire_at=_dt(r[9]),
        next_fire_at=_dt(r[10]),
        revision=r[11],
        source=r[12],
        origin=r[13],
        secret_keys=tuple(_loads(r[14]) or ()),
    )


def _secret_keys_json(keys: tuple[str, ...]) -> str | None:
    """The secret_keys column: a sorted JSON list, NULL for none (as for runs)."""
    return dumps(sorted(keys)) if keys else None


def _schedule_row(c: sqlite3.Connection, name: str) -> ScheduleRow:
    row = c.execute(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE name = ?", [name]).fetchone()
    if row is None:
        raise ScheduleNotFoundError(name)
    return _schedule_from_row(row)


def _history_from_row(r: Sequence[Any]) -> ScheduleEvent:
    return ScheduleEvent(
        schedule=r[0],
        fire_at=_dt(r[1]),
        action=r[2],
        run_id=r[3],
        at=from_us(r[4]),
        detail=r[5],
        run_status=None if r[6] is None else RunStatus(r[6]),
    )
