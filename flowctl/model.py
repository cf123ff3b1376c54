"""The one vocabulary: statuses, call kinds and row types, shared by DB, JSON, CLI and TUI."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from datetime import timedelta as _timedelta
from enum import StrEnum
from typing import Any

# The run statuses live in flowctl/status.py (a help text that names them loads nothing
# else); they are this module's as well, as they always were.
from flowctl.status import ACTIVE as ACTIVE
from flowctl.status import DUE as DUE
from flowctl.status import TERMINAL as TERMINAL
from flowctl.status import RunStatus as RunStatus


class CallKind(StrEnum):
    STEP = "step"
    SLEEP = "sleep"
    SIGNAL = "signal"
    NOW = "now"
    UUID = "uuid"
    RANDOM = "random"
    VERSION = "version"
    FANOUT = "fanout"  # a fan-out's header: its shape; its branches follow it (flowctl.fanout)


class EntryState(StrEnum):
    DONE = "done"  # a result (or resolved sleep/signal) is recorded
    ERROR = "error"  # the step raised; the error is recorded
    PENDING = "pending"  # a sleep or signal wait that has not resolved yet
    RETRYING = "retrying"  # a step failed and waits for its backoff before the next try


def to_us(when: datetime) -> int:
    """Microseconds since the epoch: how every instant is stored."""
    if when.tzinfo is None:
        raise ValueError("naive datetime")
    delta = when - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(us: int) -> datetime:
    """The UTC instant `us` microseconds after the epoch (to_us's inverse). One timedelta
    added to EPOCH: a claim converts several per run, and this is 6x cheaper than
    fromtimestamp().replace(), with the same result for every stored value."""
    return EPOCH + _timedelta(0, 0, us)


def iso(when: datetime | None) -> str | None:
    """ISO-8601 UTC with microseconds and a Z, as every --json (and HTTP API) time is
    printed: 2026-03-27T12:00:00.000000Z. Tables show local time with the zone instead.
    Nothing stored depends on this spelling (schedule fire keys have their own)."""
    if when is None:
        return None
    return when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def local_text(when: datetime, *, ms: bool = False) -> str:
    """An instant as every human-facing line shows it (tables, `why`, `show`, `logs`, the
    TUI, error messages): local time to the second, with the zone's abbreviation:
    2026-03-27 13:00:00 CET (with `ms`, 13:00:00.250 CET). --json prints iso() instead.
    One spelling for people, one for programs: no line mixes the two."""
    local = when.astimezone()
    frac = f".{local.microsecond // 1000:03d}" if ms else ""
    return local.strftime("%Y-%m-%d %H:%M:%S") + frac + local.strftime(" %Z")


ISO_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def human_value(value: Any) -> Any:
    """A stored value as a human line shows it: an ISO-8601 instant with an offset (how
    timeline event data spells times, e.g. a sleep's wake_at) becomes local_text; any
    other value is returned as it is."""
    if isinstance(value, str) and ISO_INSTANT.fullmatch(value):
        try:
            return local_text(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return value
    return value


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


SECRET_MASK = "***"


def mask_secrets(input: Any, secret_keys: tuple[str, ...] | list[str]) -> Any:
    """`input` with the value of every secret key that is present replaced by SECRET_MASK."""
    if not secret_keys or not isinstance(input, dict):
        return input
    return {k: SECRET_MASK if k in secret_keys else v for k, v in input.items()}


@dataclass(frozen=True)
class Run:
    run_id: str
    workflow: str
    target: str
    kind: str  # "python" | "yaml"
    status: RunStatus
    input: Any
    created_at: datetime
    run_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 1
    max_attempts: int = 3
    deadline: datetime | None = None
    timeout: float | None = None  # execution budget per attempt, seconds
    exec_spent: float = 0.0
    result: Any = None
    error: dict[str, Any] | None = None
    lease_owner: str | None = None
    lease_until: datetime | None = None
    fence: int = 0  # the row as read (show, notes); a worker's writes carry its claim's Lease
    reclaims: int = 0
    cancel_requested: bool = False
    cancel_reason: str | None = None
    key: str | None = None
    parent_run_id: str | None = None
    schedule: str | None = None
    scheduled_at: datetime | None = None
    cwd: str | None = None
    source_hash: str | None = None
    source_path: str | None = None
    backoff: dict[str, Any] | None = None
    pause_requested: bool = False  # running: it parks as paused at its next durable call
    paused_status: RunStatus | None = None  # paused: the status resume gives back
    paused_run_at: datetime | None = None  # paused: when it was due (its wake), kept for resume
    current_step: str | None = None  # running: "#3 'charge'", the step its last heartbeat saw
    secret_keys: tuple[str, ...] = ()  # inputs declared secret, recorded when the run started
    suspect: bool = False  # its worker died under it since its last checkpoint: runs alone
    solo: bool = False  # running: its claimer runs it alone, so a crash is charged to it
    crashes: int = 0  # crashes charged to it since its last checkpoint (5: poison)
    step_started_at: datetime | None = None  # running: when `current_step` began (heartbeat)
    traceparent: str | None = None  # the trace it joined (W3C), if any: see flowctl.tracing
    priority: int = 0  # higher first among due runs (flowctl run --priority)
    flow_key: str | None = None  # its concurrency key: workflow, and the rendered key if any
    flow_limit: int | None = None  # runs of flow_key that may run at once
    held_at: datetime | None = None  # held behind its full key: when it was due
    flow_wait: str | None = None  # the named limit a step of it waits for
    debounce_key: str | None = None  # starts with this key collapse into it while queued

    @property
    def shown_input(self) -> Any:
        """The input as every front end shows it: secret values replaced by SECRET_MASK.
        `input` itself (what the handler gets) is unchanged."""
        return mask_secrets(self.input, self.secret_keys)

    def to_json(self) -> dict[str, Any]:
        """The run object of every `--json`: `id` is the run's id; `run_id` repeats it, an
        alias kept only for scripts written before `id` (do not use it in new ones)."""
        return {
            "id": self.run_id,
            "run_id": self.run_id,  # alias of "id" (documented in `flowctl ls --help`)
            "workflow": self.workflow,
            "target": self.target,
            "kind": self.kind,
            "status": str(self.status),
            "input": self.shown_input,
            "secret_inputs": list(self.secret_keys),
            "result": self.result,
            "error": self.error,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "run_at": iso(self.run_at),
            "deadline": iso(self.deadline),
            "timeout": self.timeout,
            "exec_spent": round(self.exec_spent, 6),
            "lease_owner": self.lease_owner,
            "lease_until": iso(self.lease_until),
            "fence": self.fence,
            "cancel_requested": self.cancel_requested,
            "pause_requested": self.pause_requested,
            "paused_status": None if self.paused_status is None else str(self.paused_status),
            "paused_run_at": iso(self.paused_run_at),
            "key": self.key,
            "parent_run_id": self.parent_run_id,
            "schedule": self.schedule,
            "scheduled_at": iso(self.scheduled_at),
        }


@dataclass(frozen=True)
class JournalEntry:
    run_id: str
    call_index: int
    kind: CallKind
    name: str
    state: EntryState
    value: Any = None  # JSON result, recorded error dict, or signal payload
    wake_at: datetime | None = None  # sleeps, signal timeouts, step retry backoffs
    recorded_at: datetime | None = None
    resolved_at: datetime | None = None
    tries: int = 0
    duration: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.call_index,
            "kind": str(self.kind),
            "name": self.name,
            "state": str(self.state),
            "recorded_at": iso(self.recorded_at),
        }
        if self.state is EntryState.ERROR:
            out["error"] = self.value
        else:
            out["value"] = self.value
        if self.wake_at is not None:
            out["wake_at"] = iso(self.wake_at)
        if self.resolved_at is not None:
            out["resolved_at"] = iso(self.resolved_at)
        if self.tries:
            out["tries"] = self.tries
        if self.duration is not None:
            out["duration"] = round(self.duration, 6)
        return out


@dataclass(frozen=True)
class TimelineEvent:
    run_id: str
    at: datetime
    type: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {k: _utc_z(v) for k, v in self.data.items()}
        return {"at": iso(self.at), "type": self.type, **data}


_UTC_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")


def _utc_z(value: Any) -> Any:
    """An event's stored UTC time (written as +00:00) printed as --json prints every time,
    with a Z; any other value as it is."""
    if isinstance(value, str) and _UTC_TEXT.fullmatch(value):
        return value[: -len("+00:00")] + "Z"
    return value
