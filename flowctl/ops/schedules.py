"""Operator actions on schedules, shared by the CLI, the TUI and Python callers.

add/ls/show/pause/resume/rm/trigger/explain/sync and the agenda (issue 7). The calendar is
flowctl.schedule.calendar, firing is flowctl.schedule.firing; these functions validate everything first
(nothing is written on bad input), then write once. Like flowctl.ops, nothing here prints.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from flowctl.clock import Clock
from flowctl.durations import parse_duration
from flowctl.errors import (
    FlowctlError,
    ScheduleError,
    ScheduleNotFoundError,
    UsageError,
    ValidationError,
)
from flowctl.model import Run, RunStatus, iso
from flowctl.runtime.targets import YAML_SUFFIXES, WorkflowDef, load_target
from flowctl.schedule.calendar import (
    Fire,
    ScheduleSpec,
    describe,
    explain,
    fires_between,
    next_fires,
    parse_spec,
)
from flowctl.schedule.firing import Scheduler
from flowctl.store import FireOutcome, NewSchedule, ScheduleEvent, ScheduleRow, Store

SCHEDULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Keys of a YAML `schedule:` entry; a flowctl.toml `[schedules.NAME]` table takes `target`
# instead of `name` (the table's name is the schedule's).
SCHEDULE_KEYS = (
    "name",
    "cron",
    "every",
    "tz",
    "input",
    "missed",
    "max_missed",
    "overlap",
    "gap",
    "fold",
    "jitter",
)
TOML_SCHEDULE_KEYS = ("target", *SCHEDULE_KEYS[1:])


def _event_json(event: ScheduleEvent) -> dict[str, Any]:
    return {
        "fire_at": iso(event.fire_at),
        "action": event.action,
        "run_id": event.run_id,
        "run_status": None if event.run_status is None else str(event.run_status),
        "at": iso(event.at),
        "detail": event.detail,
    }


@dataclass(frozen=True)
class ScheduleInfo:
    """A stored schedule with its parsed spec and its latest history row."""

    row: ScheduleRow
    spec: ScheduleSpec | None  # None: the stored spec no longer validates (see `error`)
    last: ScheduleEvent | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def rule(self) -> str:
        return describe(self.spec) if self.spec is not None else f"invalid: {self.error}"

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        r = self.row
        return {
            "name": r.name,
            "target": r.target,
            "input": r.shown_input,
            "secret_inputs": list(r.secret_keys),
            "cron": spec.cron if spec else None,
            "every": spec.every.total_seconds() if spec and spec.every else None,
            "tz": spec.tz if spec else None,
            "anchor": iso(spec.anchor) if spec else None,
            "policies": None
            if spec is None
            else {
                "missed": spec.missed,
                "max_missed": spec.max_missed,
                "overlap": spec.overlap,
                "gap": spec.gap,
                "fold": spec.fold,
                "jitter": spec.jitter.total_seconds(),
            },
            "rule": self.rule,
            "paused": r.paused,
            "source": r.source,
            "origin": r.origin,
            "created_at": iso(r.created_at),
            "active_from": iso(r.active_from),
            "last_fire_at": iso(r.last_fire_at),
            "next_fire_at": iso(r.next_fire_at),
            "last": None if self.last is None else _event_json(self.last),
        }


def _schedule_info(row: ScheduleRow, last: ScheduleEvent | None = None) -> ScheduleInfo:
    try:
        return ScheduleInfo(row, ScheduleSpec.from_json(row.spec), last)
    except ScheduleError as e:
        return ScheduleInfo(row, None, last, str(e))


def _check_schedule_name(name: str) -> str:
    if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name):
        raise ScheduleError(
            f"invalid schedule name {name!r}: use letters, digits, '.', '_' and '-'"
            " (starting with a letter or digit, at most 64)"
        )
    return name


def _find_schedule(store: Store, name: str) -> ScheduleRow | None:
    try:
        return store.get_schedule(name)
    except ScheduleNotFoundError:
        return None


def _first_fire(spec: ScheduleSpec, after: datetime) -> datetime | None:
    fires = next_fires(spec, after, 1)
    return fires[0].at if fires else None


def add_schedule(
    store: Store,
    name: str,
    target: str,
    input: dict[str, Any] | None = None,
    *,
    clock: Clock,
    cron: str | None = None,
    every: str | timedelta | float | None = None,
    tz: str | None = None,
    missed: str = "skip",
    max_missed: int = 100,
    overlap: str = "skip",
    gap: str = "shift",
    fold: str = "first",
    jitter: str | timedelta | float = 0,
    replace: bool = False,
    workflows_dir: str | Path | None = None,
    cwd: str | None = None,
) -> ScheduleInfo:
    """Validate and store a schedule (`flowctl schedule add`). Nothing is written when the
    name, rule, zone, a policy, the target or the input is wrong.

    The target is loaded now, as a run would load it, and stored canonically (absolute path
    or module:function), so the daemon finds it whatever its working directory. `every`
    schedules are anchored at this moment (whole seconds): they fire at now + k * every, k >= 1.
    """
    _check_schedule_name(name)
    now = clock.now()
    anchor = now.replace(microsecond=0)  # `every` fires on whole seconds
    spec = parse_spec(
        cron=cron,
        every=every,
        tz=tz,
        anchor=anchor,
        gap=gap,
        fold=fold,
        missed=missed,
        max_missed=max_missed,
        overlap=overlap,
        jitter=jitter,
    )
    wf = load_target(target, workflows_dir=workflows_dir, cwd=cwd)
    data = dict(input or {})
    wf.check_input(dict(data))
    _check_free(store, name, replace=replace)
    new = NewSchedule(
        name=name,
        target=wf.target,
        cwd=wf.cwd,
        input=data,
        spec=spec.to_json(),
        source="cli",
        next_fire_at=_first_fire(spec, now),
        secret_keys=wf.secret_inputs,
    )
    return _schedule_info(store.add_schedule(new, now, replace=replace))


def _check_free(store: Store, name: str, *, replace: bool) -> None:
    """`name` is free for `schedule add`: no schedule has it, or (with `replace`) one
    added by `schedule add` does; a declared one is changed in its file."""
    existing = _find_schedule(store, name)
    if existing is not None and not replace:
        raise ScheduleError(
            lambda f: (
                f"schedule {name!r} already exists: use {f('replace')} to redefine it,"
                " or another name"
            ),
            field="replace",
        )
    if existing is not None and existing.source != "cli":
        raise ScheduleError(
            f"schedule {name!r} is declared in {existing.origin}: change it there and run"
            " `flowctl schedule sync`"
        )


def list_schedules(store: Store) -> list[ScheduleInfo]:
    """Every schedule, by name, each with its latest decision (fired, skipped, error ...)."""
    last = store.last_schedule_events()
    return [_schedule_info(row, last.get(row.name)) for row in store.list_schedules()]


@dataclass
class ScheduleDetail:
    info: ScheduleInfo
    upcoming: list[Fire]
    history: list[ScheduleEvent]

    def to_json(self) -> dict[str, Any]:
        zone = self.info.spec.zone if self.info.spec else UTC
        return {
            **self.info.to_json(),
            "upcoming": [
                {"at": iso(f.at), "local": f.at.astimezone(zone).isoformat(), "note": f.note}
                for f in self.upcoming
            ],
            "history": [_event_json(e) for e in self.history],
        }


def show_schedule(
    store: Store, name: str, *, clock: Clock, count: int = 5, history: int = 20
) -> ScheduleDetail:
    """A schedule, its next `count` fires (computed even while paused) and recent history."""
    row = store.get_schedule(name)
    events = store.schedule_history(name, history)
    info = _schedule_info(row, events[-1] if events else None)
    upcoming: list[Fire] = []
    if info.spec is not None:
        after = clock.now()
        if row.last_fire_at is not None and row.last_fire_at > after:
            after = row.last_fire_at  # the clock went back: those fires were handled already
        upcoming = next_fires(info.spec, after, count)
    return ScheduleDetail(info, upcoming, events)


def pause_schedule(store: Store, name: str, *, clock: Clock) -> ScheduleInfo:
    """Pause; a paused schedule stays as it is, with nothing written (pausing is idempotent)."""
    row = store.get_schedule(name)
    if row.paused:
        return _schedule_info(row)
    return _schedule_info(store.set_schedule_paused(name, True, None, clock.now()))


def resume_schedule(store: Store, name: str, *, clock: Clock) -> ScheduleInfo:
    """Resume from now: fires that fell in the pause are not run, whatever `missed` says.
    A schedule that is not paused stays as it is, with nothing written."""
    row = store.get_schedule(name)
    if not row.paused:
        return _schedule_info(row)
    now = clock.now()
    spec = ScheduleSpec.from_json(row.spec)
    after = max(now, row.last_fire_at) if row.last_fire_at is not None else now
    return _schedule_info(store.set_schedule_paused(name, False, _first_fire(spec, after), now))


def remove_schedule(store: Store, name: str) -> ScheduleRow:
    """Delete a CLI-added schedule and its history; its runs stay. A declared one (YAML or
    flowctl.toml) is removed from its file, or it would come back at the next sync."""
    row = store.get_schedule(name)
    if row.source != "cli":
        raise ScheduleError(
            f"schedule {name!r} is declared in {row.origin}: remove it there and run"
            f" `flowctl schedule sync` (or `flowctl schedule pause {name}`)"
        )
    store.remove_schedule(name)
    return row


@dataclass(frozen=True)
class Triggered:
    outcome: FireOutcome
    run: Run | None


def trigger_schedule(store: Store, name: str, *, clock: Clock) -> Triggered:
    """Fire a schedule now (`flowctl schedule trigger`), recorded as `manual` in its history.

    It has its own idempotency key and follows the schedule's overlap policy; its calendar
    (last/next fire) does not move.
    """
    outcome = Scheduler(store, clock).trigger(name)
    run = store.get_run(outcome.run_id) if outcome.run_id else None
    return Triggered(outcome, run)


def explain_schedule(
    expression: str,
    *,
    clock: Clock,
    tz: str | None = None,
    count: int = 10,
    gap: str = "shift",
    fold: str = "first",
    after: datetime | None = None,
) -> dict[str, Any]:
    """`flowctl schedule explain`: the next `count` fires of a cron expression in a zone
    (after `after`, default now), and every wall time a DST gap or fold changes, with what
    the gap/fold policy does there."""
    if count < 1 or count > 1000:
        raise UsageError(
            lambda f: f"{f('count')} must be between 1 and 1000, got {count}", field="count"
        )
    spec = parse_spec(cron=expression, tz=tz, gap=gap, fold=fold)
    start = clock.now() if after is None else after
    return {
        "expression": spec.cron,
        "tz": spec.tz,
        "gap": spec.gap,
        "fold": spec.fold,
        "rule": describe(spec),
        "after": iso(start),
        "fires": explain(spec, start, count),
    }


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        return {
            "added": self.added,
            "updated": self.updated,
            "removed": self.removed,
            "unchanged": self.unchanged,
        }


@dataclass(frozen=True)
class _Declared:
    name: str
    where: str
    source: str  # yaml | toml
    origin: str
    target: str
    cwd: str | None
    input: dict[str, Any]
    options: dict[str, Any]  # parse_spec keyword arguments, without anchor
    secret_keys: tuple[str, ...] = ()  # the workflow's secret inputs, as a run records them


Where = Callable[[str | None], str]


def _declared(
    item: Any,
    where: Where,
    *,
    name: str,
    allowed: tuple[str, ...],
    source: str,
    origin: str,
    wf: WorkflowDef,
    default_tz: str | None,
) -> _Declared:
    """Check one declared schedule (YAML entry or TOML table); raise ScheduleError naming
    where the fault is: `where(field)` renders the place of a field (None: the entry, and
    "key:FIELD" a key). The spec is parsed here, so a bad one is caught before anything
    is written."""
    if not isinstance(item, dict):
        raise ScheduleError(f"{where(None)}: expected a mapping, got {type(item).__name__}")
    unknown = [k for k in item if k not in allowed]
    if unknown:
        raise ScheduleError(
            f"{where('key:' + unknown[0])}: unknown key {unknown[0]!r};"
            f" use {', '.join(k for k in allowed)}"
        )
    try:
        _check_schedule_name(name)
    except ScheduleError as e:
        raise ScheduleError(f"{where('name')}: {e}") from None
    data = item.get("input", {})
    if not isinstance(data, dict):
        raise ScheduleError(f"{where('input')}: expected a mapping of inputs, got {data!r}")
    options = {k: item[k] for k in SCHEDULE_KEYS[1:] if k in item and k != "input"}
    options.setdefault("tz", default_tz)
    try:
        parse_spec(**options, anchor=_ANCHOR)
    except UsageError as e:
        raise ScheduleError(f"{where(_field_at_fault(options))}: {e}") from None
    try:
        wf.check_input(dict(data))
    except UsageError as e:
        raise ScheduleError(f"{where('input')}: {e}") from None
    return _Declared(
        name, where(None), source, origin, wf.target, wf.cwd, data, options, wf.secret_inputs
    )


_ANCHOR = datetime(2000, 1, 1, tzinfo=UTC)


def _field_at_fault(options: dict[str, Any]) -> str | None:
    """The one field that parse_spec refuses on its own, tried against a valid rest;
    None when the fault is in the combination (neither or both of cron and every)."""
    for key, value in options.items():
        if value is None:
            continue
        trial = {"every": value} if key == "every" else {"cron": "* * * * *", key: value}
        try:
            parse_spec(**{"tz": "UTC", **trial}, anchor=_ANCHOR)
        except UsageError:
            return key
    return None


def _yaml_where(path: Path, wf: WorkflowDef, index: int, many: bool) -> Where:
    """`path:line:col: schedule[1].cron` for a field of a YAML `schedule:` entry."""
    places = wf.schedule_places[index] if index < len(wf.schedule_places) else {}

    def where(field: str | None) -> str:
        label = f"schedule[{index}]" if many else "schedule"
        if field:
            label += "." + field.removeprefix("key:")
        line, col = places.get(field or "", places.get("", (1, 1)))
        return f"{path}:{line}:{col}: {label}"

    return where


def yaml_schedules(
    wf: WorkflowDef, path: Path, *, default_tz: str | None = None
) -> tuple[list[_Declared], list[str]]:
    """The schedules a YAML workflow's `schedule:` block declares, and the problems in it,
    each at its file:line:column."""
    found: list[_Declared] = []
    problems: list[str] = []
    if wf.schedule is None:
        return found, problems
    many = isinstance(wf.schedule, list)
    items = wf.schedule if many else [wf.schedule]
    for i, item in enumerate(items):
        default = wf.name if not many else f"{wf.name}-{i + 1}"
        name = item.get("name", default) if isinstance(item, dict) else default
        try:
            found.append(
                _declared(
                    item,
                    _yaml_where(path, wf, i, many),
                    name=name,
                    allowed=SCHEDULE_KEYS,
                    source="yaml",
                    origin=str(path.resolve()),
                    wf=wf,
                    default_tz=default_tz,
                )
            )
        except FlowctlError as e:
            problems.append(str(e))
    return found, problems


def check_declared_schedule(wf: WorkflowDef) -> None:
    """Refuse a YAML workflow whose `schedule:` block is wrong, as `schedule sync` would:
    a run started by hand from such a file must not queue while its schedule silently
    never fires. Raises ScheduleError with the first problem at its file:line:column."""
    if wf.kind != "yaml" or wf.schedule is None or wf.source_path is None:
        return
    problems = yaml_schedules(wf, Path(wf.source_path))[1]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ScheduleError(f"{problems[0]}{more}; fix the schedule: block, then run again")


def _toml_where(entry: str, field: str | None) -> str:
    """`flowctl.toml: schedules.NAME.cron` (TOML values carry no positions)."""
    return f"{entry}.{field.removeprefix('key:')}" if field else entry


def declared_schedules(
    *,
    workflows_dir: str | Path | None,
    toml_schedules: dict[str, Any] | None = None,
    toml_path: str | Path | None = None,
    default_tz: str | None = None,
) -> list[_Declared]:
    """Every schedule declared in the workflows folder's YAML files (`schedule:`) and in
    flowctl.toml (`[schedules.NAME]`). Raises ValidationError listing every problem: a sync
    is all or nothing, so a typo never silently deletes a schedule."""
    found: list[_Declared] = []
    problems: list[str] = []
    folder = Path(workflows_dir) if workflows_dir is not None else None
    if folder is not None and folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.suffix not in YAML_SUFFIXES:
                continue
            try:
                wf = load_target(str(path))
            except FlowctlError as e:
                problems.append(f"{path}: {e}")
                continue
            yaml_found, yaml_problems = yaml_schedules(wf, path, default_tz=default_tz)
            found.extend(yaml_found)
            problems.extend(yaml_problems)
    toml_root = Path(toml_path).parent if toml_path is not None else Path.cwd()
    for name, item in (toml_schedules or {}).items():
        where = f"{toml_path}: schedules.{name}"
        target = item.get("target") if isinstance(item, dict) else None
        if not isinstance(target, str) or not target.strip():
            problems.append(f'{where}: needs target = "workflow file or name"')
            continue
        try:
            wf = load_target(target, workflows_dir=workflows_dir, cwd=str(toml_root))
            found.append(
                _declared(
                    item,
                    partial(_toml_where, where),
                    name=name,
                    allowed=TOML_SCHEDULE_KEYS,
                    source="toml",
                    origin=str(Path(toml_path).resolve()) if toml_path else "flowctl.toml",
                    wf=wf,
                    default_tz=default_tz,
                )
            )
        except FlowctlError as e:
            msg = str(e)
            problems.append(msg if msg.startswith(where) else f"{where}: {msg}")
    seen: dict[str, str] = {}
    for d in found:
        if d.name in seen:
            problems.append(
                f"{d.where}: schedule name {d.name!r} is also declared in {seen[d.name]}"
            )
        seen.setdefault(d.name, d.where)
    if problems:
        raise ValidationError([str(p) for p in problems])
    return found


def _same_definition(row: ScheduleRow, new: NewSchedule) -> bool:
    """A changed secret flag counts as a change, so a sync records it."""
    mine = (row.target, row.cwd, row.input, row.spec, row.source, row.origin)
    theirs = (new.target, new.cwd, new.input, new.spec, new.source, new.origin)
    return mine == theirs and sorted(row.secret_keys) == sorted(new.secret_keys)


def sync_schedules(
    store: Store,
    *,
    clock: Clock,
    workflows_dir: str | Path | None,
    toml_schedules: dict[str, Any] | None = None,
    toml_path: str | Path | None = None,
    default_tz: str | None = None,
) -> SyncReport:
    """Make the database's declared schedules (source yaml/toml) match the files.

    New ones are added, changed ones redefined (an `every` schedule keeps its anchor while
    its interval is unchanged; pause state, last fire and history are kept), ones no longer
    declared are removed. Schedules added with `flowctl schedule add` are never touched; a
    declared name that clashes with one is an error. Nothing is written if any declaration
    is wrong.
    """
    declared = declared_schedules(
        workflows_dir=workflows_dir,
        toml_schedules=toml_schedules,
        toml_path=toml_path,
        default_tz=default_tz,
    )
    existing = {row.name: row for row in store.list_schedules()}
    clashes = [
        f"{d.where}: a schedule named {d.name!r} was added with `flowctl schedule add`;"
        " rename one of them"
        for d in declared
        if d.name in existing and existing[d.name].source == "cli"
    ]
    if clashes:
        raise ValidationError(clashes)
    now = clock.now()
    report = SyncReport()
    for d in declared:
        row = existing.get(d.name)
        spec = parse_spec(**d.options, anchor=_kept_anchor(row, d.options, now))
        new = NewSchedule(
            name=d.name,
            target=d.target,
            cwd=d.cwd,
            input=d.input,
            spec=spec.to_json(),
            source=d.source,
            origin=d.origin,
            secret_keys=d.secret_keys,
        )
        if row is not None and _same_definition(row, new):
            report.unchanged.append(d.name)
            continue
        after = now if row is None or row.last_fire_at is None else max(now, row.last_fire_at)
        new = dataclasses.replace(new, next_fire_at=_first_fire(spec, after))
        store.add_schedule(new, now, replace=row is not None)
        (report.updated if row is not None else report.added).append(d.name)
    names = {d.name for d in declared}
    for name, row in existing.items():
        if row.source in ("yaml", "toml") and name not in names:
            store.remove_schedule(name)
            report.removed.append(name)
    return report


def _kept_anchor(row: ScheduleRow | None, options: dict[str, Any], now: datetime) -> datetime:
    """An `every` schedule redefined with its interval unchanged keeps its anchor (its
    fires stay where they were); anything else is anchored now, on a whole second."""
    if row is not None:
        try:
            old = ScheduleSpec.from_json(row.spec)
        except ScheduleError:
            old = None
        if old is not None and old.anchor is not None:
            interval = parse_spec(**options, anchor=now).every
            if interval is not None and interval == old.every:
                return old.anchor
    return now.replace(microsecond=0)


@dataclass(frozen=True)
class AgendaItem:
    """One future wake: a run's start/retry/wake/signal timeout/deadline, or a schedule fire."""

    at: datetime
    kind: str  # start | retry | wake | timeout | deadline | fire
    run_id: str | None
    workflow: str | None
    schedule: str | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "kind": self.kind,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "schedule": self.schedule,
            "detail": self.detail,
        }


_AGENDA_WHAT = {
    "start": "starts",
    "retry": "retries",
    "wake": "wakes from its sleep",
    "timeout": "signal wait times out",
    "deadline": "deadline: dead-lettered unless finished",
    "token": "next start under limit",
}


def _agenda_kind(kind: str, run: Run) -> tuple[str, str]:
    """An agenda entry's kind and words: a sleep that waits for a named limit's next
    token (issue 37) is that token's time, not a wake."""
    if kind == "wake" and run.flow_wait is not None and run.status is RunStatus.SLEEPING:
        return "token", f"{_AGENDA_WHAT['token']} {run.flow_wait!r}"
    return kind, _AGENDA_WHAT[kind]


def agenda(
    store: Store, *, clock: Clock, until: str | timedelta = "30d", limit: int = 200
) -> list[AgendaItem]:
    """Everything that will happen by itself between now and now + `until`, in time order:
    run starts, retries, wakes, signal timeouts, deadlines (overdue ones first), and schedule
    fires. At most `limit` items, the soonest."""
    if limit < 1:
        raise UsageError(lambda f: f"{f('limit')} must be at least 1, got {limit}", field="limit")
    span = parse_duration(until)
    if span.total_seconds() <= 0:
        raise UsageError(
            lambda f: f"{f('until')} must be a positive duration, got {until!r}", field="until"
        )
    now = clock.now()
    end = now + span
    items = []
    for at, given, run in store.agenda_runs(end, limit):
        kind, what = _agenda_kind(given, run)
        overdue = "overdue: " if at < now else ""
        items.append(AgendaItem(at, kind, run.run_id, run.workflow, run.schedule, overdue + what))
    for row in store.list_schedules():
        if row.paused:
            continue
        try:
            spec = ScheduleSpec.from_json(row.spec)
        except ScheduleError:
            continue
        label = Path(row.target).name
        if row.next_fire_at is not None and row.next_fire_at <= now:
            items.append(
                AgendaItem(
                    row.next_fire_at, "fire", None, None, row.name, f"overdue: fires {label}"
                )
            )
        after = max(now, row.last_fire_at) if row.last_fire_at is not None else now
        for fire in fires_between(spec, after, end, limit=limit):
            note = f" ({fire.note})" if fire.note else ""
            items.append(AgendaItem(fire.at, "fire", None, None, row.name, f"fires {label}{note}"))
    items.sort(key=lambda i: (i.at, i.kind, i.run_id or i.schedule or ""))
    return items[:limit]
