"""The values that cross the Store protocol: what callers hand a store and what it returns.

Backend-neutral: the SQLite and the PostgreSQL store build and return these same types.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from flowctl.errors import (
    SerializationError,
)
from flowctl.flow.tokens import LimitSpec
from flowctl.limits import lone_surrogate
from flowctl.model import (
    JournalEntry,
    Run,
    RunStatus,
    mask_secrets,
    to_us,
)
from flowctl.store.values import JOURNAL, Values

# One encoder for every dumps: json.dumps with arguments of its own builds a new
# JSONEncoder per call, and a three-step run makes about eight.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(value: Any, what: str = "value") -> str:
    """JSON text for the store; a value that is not JSON is a clear error, never a pickle."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as e:
        raise SerializationError(
            f"{what} is not JSON-serialisable ({e}); return str, int, float, bool, None, "
            "lists and dicts of those"
        ) from None
    if "\\ud" in text:  # a UTF-16 surrogate, escaped: a pair is an emoji, a lone one no text
        bad = lone_surrogate(value)
        if bad is not None:
            raise SerializationError(
                f"{what} holds a lone UTF-16 surrogate ('{bad}'), which is not text: give"
                " valid Unicode (a surrogate pair escaped as \\ud83d\\ude00 is fine)"
            )
    return text


def checkpoint_params(
    values: Values, run_id: str, entry: JournalEntry, now_us: int, *then: Any
) -> list[Any]:
    """A checkpoint's journal row, in the column order both backends' journal INSERTs
    name (run_id, call_index, kind, name, state, value, wake_at, recorded_at,
    resolved_at, tries, duration_us), then `then` (a fenced INSERT's lease): one
    spelling of it for every fenced write. Its value sealed by `values`."""
    return [
        run_id,
        entry.call_index,
        str(entry.kind),
        entry.name,
        str(entry.state),
        None if entry.value is None else values.seal(_result_json(entry), JOURNAL),
        None if entry.wake_at is None else to_us(entry.wake_at),
        now_us,
        None if entry.resolved_at is None else to_us(entry.resolved_at),
        entry.tries,
        None if entry.duration is None else round(entry.duration * 1e6),
        *then,
    ]


def _result_json(entry: JournalEntry) -> str:
    """A step's value as JSON, as `dumps` makes it; one that is not JSON is refused naming
    the step (the name is formatted only then: a checkpoint is the hottest write)."""
    try:
        text: str | None = _ENCODER.encode(entry.value)
    except (TypeError, ValueError):
        text = None
    if text is None or "\\ud" in text:  # not JSON, or a surrogate: dumps decides, naming it
        return dumps(entry.value, f"result of {entry.name!r}")
    return text


class Interrupts(NamedTuple):
    """What an operator asked of running runs, both flags read by one statement per chunk
    of ids (rows.IN_CHUNK): the ids to cancel and the ids to pause (a run may be in both)."""

    cancels: list[str]
    pauses: list[str]


@dataclass(frozen=True)
class Lease:
    """The right to write to one run, minted by a claim.

    Every write the worker makes carries it, and changes nothing unless the run is still
    running under this fence and owner: a newer claim (a higher fence) wins, a late write
    from a worker that lost its lease is refused. The only copy of the fence a worker holds.
    """

    run_id: str
    fence: int
    owner: str


@dataclass(frozen=True)
class Claim:
    """What a worker holds after claiming a run: the run as claimed and the lease its writes
    carry (`run.fence` is the row as read, for display; writes use `lease`)."""

    run: Run
    lease: Lease
    woke_from: RunStatus | None = None
    # It slept, waited or was queued for later (transitions.claim_wakes): the batch runner
    # resumes it before fresh claims and the handlers its last round parked (issue 40).
    wakes: bool = False
    # {} when the claim saw that the run has no journal rows (or no version markers), so
    # the replay skips reading them; None: not known, read them.
    journal: dict[int, JournalEntry] | None = None
    versions: dict[str, int] | None = None


@dataclass(frozen=True)
class NewRun:
    """Everything needed to create a run; built by ops.start."""

    run_id: str
    workflow: str
    target: str
    kind: str
    input: Any
    source: str | None = None
    source_hash: str | None = None
    source_path: str | None = None
    cwd: str | None = None
    run_at: datetime | None = None
    max_attempts: int = 3
    backoff: dict[str, Any] | None = None
    deadline: datetime | None = None
    timeout: float | None = None
    key: str | None = None
    parent_run_id: str | None = None
    schedule: str | None = None
    scheduled_at: datetime | None = None
    secret_keys: tuple[str, ...] = ()  # input keys shown as *** and never searched
    notify: dict[str, Any] | None = None  # the workflow's `notify:` override, pinned
    traceparent: str | None = None  # a W3C traceparent to join (a caller's or a parent's)
    priority: int = 0  # higher first among due runs
    flow_key: str | None = None  # concurrency key (flowctl.flow.keys.flow_key)
    flow_limit: int | None = None  # runs of flow_key that may run at once
    debounce_key: str | None = None  # collapse into the queued run holding this key
    debounce_us: int = 0  # ... which then starts once the key was quiet this long


@dataclass(frozen=True)
class LimitTake:
    """What a step's start under a named limit got (Store.take_limit)."""

    spec: LimitSpec | None = None
    until: datetime | None = None  # not taken: look again then (why: concurrency | rate)
    why: str = ""
    unknown: tuple[str, ...] | None = None  # no such limit: the names defined
    lost: bool = False  # the lease is lost: nothing written

    @property
    def taken(self) -> bool:
        return self.spec is not None and self.until is None


@dataclass(frozen=True)
class LimitState:
    """A named limit now: its definition, the steps holding it (run, call index, since),
    the starts within its rate's window, and when the next start may come (None: now)."""

    spec: LimitSpec
    holders: list[tuple[str, int, datetime]]
    starts: int
    next_free: datetime | None


@dataclass(frozen=True)
class HeartbeatReply:
    """What a heartbeat learned about one held run."""

    run_id: str
    lost: bool = False  # the fence moved on: abandon the run
    cancel: bool = False
    deadline: bool = False
    timeout: bool = False
    pause: bool = False  # an operator asked to pause it: park at the next durable call


@dataclass(frozen=True)
class DaemonInfo:
    owner: str
    host: str
    pid: int
    proc_start: str | None
    started_at: datetime
    seen_at: datetime
    info: dict[str, Any]


@dataclass(frozen=True)
class NewSchedule:
    """A schedule definition to store; built by ops (CLI, sync)."""

    name: str
    target: str  # canonical workflow target (absolute path or module:function)
    cwd: str | None
    input: dict[str, Any]
    spec: str  # ScheduleSpec.to_json()
    source: str = "cli"  # cli | yaml | toml
    origin: str | None = None  # the file that declares it (yaml/toml)
    next_fire_at: datetime | None = None
    secret_keys: tuple[str, ...] = ()  # the workflow's secret inputs, masked when shown


@dataclass(frozen=True)
class ScheduleRow:
    name: str
    target: str
    cwd: str | None
    input: dict[str, Any]
    spec: str
    paused: bool
    created_at: datetime
    updated_at: datetime
    active_from: datetime
    last_fire_at: datetime | None
    next_fire_at: datetime | None
    revision: int
    source: str
    origin: str | None
    secret_keys: tuple[str, ...] = ()  # input keys shown as ***; fired runs get the real values

    @property
    def shown_input(self) -> dict[str, Any]:
        """The input as every front end shows it: secret values replaced by SECRET_MASK."""
        shown: dict[str, Any] = mask_secrets(self.input, self.secret_keys)
        return shown


@dataclass(frozen=True)
class ScheduleEvent:
    """One history row: what was decided for one fire time (or for a failure)."""

    schedule: str
    fire_at: datetime | None
    action: str  # fired | skipped-missed | skipped-overlap | queued-overlap | manual | error
    run_id: str | None
    at: datetime
    detail: str | None
    run_status: RunStatus | None = None  # the run's status now, when there is a run


@dataclass(frozen=True)
class FirePlan:
    """One decision handed to fire_schedule: `run` is set for fired/manual, None for
    skipped-missed and error (history only)."""

    fire_at: datetime | None
    action: str
    run: NewRun | None = None
    detail: str | None = None


@dataclass(frozen=True)
class FireOutcome:
    fire_at: datetime | None
    action: str  # as written to the history; "duplicate" when the key already had a run
    run_id: str | None
    created: bool
    detail: str | None = None


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts at each upper bound (seconds), as Prometheus histograms carry them."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # observations <= each bound
    count: int
    total: float  # sum of the observations, in seconds


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything /metrics reports, read in one transaction so the figures agree."""

    runs: tuple[tuple[str, str, int], ...]  # (status, workflow, count)
    wake_lateness: Histogram
    step_durations: tuple[tuple[str, Histogram], ...]  # (workflow, histogram)
    claims: int
    reclaims: int
    daemons: tuple[tuple[DaemonInfo, int], ...]  # (daemon, leases held)
    notifications: tuple[tuple[str, int], ...]  # (state, count)


@dataclass(frozen=True)
class Notification:
    """One row of the notification outbox: a run's ending to be told to its channels.

    Written in the transaction that ends the run; `channels_done` lists the channels that
    have had it, so a retry after a partial success never repeats a delivered one.
    """

    seq: int
    run_id: str
    status: str  # the run's terminal status
    error_kind: str | None  # the recorded error's kind (timeout, deadline, ...) if any
    created_at: datetime
    tries: int
    channels_done: tuple[str, ...]
    override: dict[str, Any] | None  # the run's pinned `notify:` override


@dataclass(frozen=True)
class PrunedRun:
    """A finished run that prune deleted (or, with --dry-run, would delete)."""

    run_id: str
    workflow: str
    status: RunStatus
    finished_at: datetime


@dataclass(frozen=True)
class OutputChunk:
    """Lines a step printed: `stream` is stdout, stderr, log (a logging record) or note
    (flowctl's own, e.g. what the 1 MiB cap cut). `seq` orders all chunks of a database."""

    seq: int
    run_id: str
    call_index: int
    step: str
    stream: str
    at: datetime
    text: str
