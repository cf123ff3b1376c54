"""`flowctl schedule ...` and `flowctl agenda`: parse -> schedule_ops -> render.

flowctl/cli/__init__.py registers `schedule_app` with `app.add_typer` and `agenda` with
`app.command()`. Errors reach the user through the same `_Group` as every other command.
The commands import flowctl.ops.schedules when they run, so `flowctl --help` and
`flowctl ls` do not load the cron and time zone code.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flowctl import ops
from flowctl.cli.common import (
    State,
    _cut,
    _emit_json,
    _Group,
    _local,
    _relative,
    _run_json,
    _shown_json,
    _state,
    _table,
)
from flowctl.cli.inputs import parse_inputs
from flowctl.durations import format_duration
from flowctl.errors import FlowctlError, UsageError
from flowctl.limits import MAX_COUNT, one_line

if TYPE_CHECKING:
    from flowctl.ops import schedules as schedule_ops

schedule_app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Cron and interval schedules: each fire starts one run, exactly once."
    '  Example: flowctl schedule add nightly --cron "0 9 * * MON-FRI" examples/report.yaml'
    "  Example: flowctl schedule ls",
)

_POLICY_HELP = {
    "missed": "Fires missed while no daemon ran: skip (default), latest (run the last one), all (run each, max 100).",
    "overlap": "When the previous run is still active: skip (default, recorded), allow, or queue (start after it ends).",
    "gap": "A local time that DST skips: shift (default, fire at the first valid instant) or skip.",
    "fold": "A local time that DST repeats: first (default), last, or both.",
}


def _given_tz(tz: str | None) -> str | None:
    """--tz as given; an empty one is refused rather than silently meaning local time."""
    if tz is not None and not tz.strip():
        raise UsageError(
            "--tz is empty: give an IANA zone like Europe/Paris, or leave it out for local time"
        )
    return tz


def _default_tz(st: State) -> str | None:
    """flowctl.toml's `timezone` when set, else None (the machine's zone)."""
    return str(st.config.get("timezone") or "") or None


def _zoned(when: datetime | None, tz: str | None) -> str:
    """A time in the schedule's own zone, with the zone's abbreviation: 2026-03-30 09:00 CEST."""
    from zoneinfo import ZoneInfo

    if when is None:
        return "-"
    local = when.astimezone(ZoneInfo(tz)) if tz else when.astimezone()
    return local.strftime("%Y-%m-%d %H:%M:%S %Z" if local.second else "%Y-%m-%d %H:%M %Z")


def _short_target(target: str) -> str:
    try:
        return str(Path(target).relative_to(Path.cwd()))
    except ValueError:
        return target


def _last_outcome(event: Any, now: datetime) -> str:
    """`fired 2h ago → completed`, `skipped-overlap 5m ago`, `error 1d ago`."""
    if event is None:
        return "-"
    text = f"{event.action} {_relative(event.fire_at or event.at, now)}"
    if event.run_status is not None:
        text += f" → {event.run_status}"
    return text


def _sync_declared(st: State) -> schedule_ops.SyncReport:
    from flowctl.ops import schedules as schedule_ops

    return schedule_ops.sync_schedules(
        st.open_store(create=True),
        clock=st.clock,
        workflows_dir=st.config.workflows_dir(),
        toml_schedules=st.config.values.get("schedules"),
        toml_path=st.config.path,
        default_tz=_default_tz(st),
    )


def _sync_at_daemon_start(st: State) -> None:
    """The daemon starts with the declared schedules in force; a bad declaration is logged
    and leaves the stored schedules as they were (it never stops the daemon)."""
    import logging

    from flowctl.errors import ValidationError

    log = logging.getLogger("flowctl")
    try:
        report = _sync_declared(st)
    except ValidationError as e:
        for problem in e.problems:
            log.warning("schedule sync skipped: %s", problem)
        return
    except FlowctlError as e:
        log.warning("schedule sync skipped: %s", e)
        return
    changed = [f"{k} {', '.join(v)}" for k, v in report.to_json().items() if v and k != "unchanged"]
    if changed:  # `schedules synced: added ping, nightly; removed old`
        log.info("schedules synced: %s", "; ".join(changed))


# The arguments and options of `schedule add`, one line each in its signature.
_NAME = typer.Argument(help="Schedule name, e.g. nightly-report.")
_TARGET = typer.Argument(help="file.py:function, module:function, file.yaml, or a name.")
_CRON = typer.Option("--cron", help='5-field cron or @daily-style alias: "0 9 * * MON-FRI".')
_EVERY = typer.Option("--every", help="Interval from now: 15m, 2h, 1d.")
_TZ = typer.Option("--tz", help="IANA zone, e.g. Europe/Paris (default: local).")
_ARG = typer.Option(
    "-i", "--arg", metavar="KEY=VALUE", help="Input: key=value or key:=JSON. Repeatable."
)
_INPUT = typer.Option("--input", metavar="JSON", help="The whole input as a JSON object.")
_MISSED = typer.Option("--missed", help=_POLICY_HELP["missed"])
_MAX_MISSED = typer.Option(
    "--max-missed", max=MAX_COUNT, help="With --missed all: at most this many."
)
_OVERLAP = typer.Option("--overlap", help=_POLICY_HELP["overlap"])
_GAP = typer.Option("--gap", help=_POLICY_HELP["gap"])
_FOLD = typer.Option("--fold", help=_POLICY_HELP["fold"])
_JITTER = typer.Option("--jitter", help="Delay each start by a stable random 0..D, e.g. 5m.")
_REPLACE = typer.Option("--replace", help="Redefine an existing schedule of this name.")
_ADD_JSON = typer.Option("--json", help="Print the schedule as JSON.")


@schedule_app.command("add")
def schedule_add(
    ctx: typer.Context,
    name: Annotated[str, _NAME],
    target: Annotated[str, _TARGET],
    cron: Annotated[str | None, _CRON] = None,
    every: Annotated[str | None, _EVERY] = None,
    tz: Annotated[str | None, _TZ] = None,
    inputs: Annotated[list[str] | None, _ARG] = None,
    input_json: Annotated[str | None, _INPUT] = None,
    missed: Annotated[str, _MISSED] = "skip",
    max_missed: Annotated[int, _MAX_MISSED] = 100,
    overlap: Annotated[str, _OVERLAP] = "skip",
    gap: Annotated[str, _GAP] = "shift",
    fold: Annotated[str, _FOLD] = "first",
    jitter: Annotated[str, _JITTER] = "0s",
    replace: Annotated[bool, _REPLACE] = False,
    as_json: Annotated[bool, _ADD_JSON] = False,
) -> None:
    """Add a schedule.  Example: flowctl schedule add nightly --cron "0 9 * * MON-FRI" --tz Europe/Paris examples/report.yaml -i team=ops"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    data = parse_inputs(inputs, input_json)
    info = schedule_ops.add_schedule(
        st.open_store(create=True),
        name,
        target,
        data,
        clock=st.clock,
        cron=cron,
        every=every,
        tz=_given_tz(tz) or _default_tz(st),
        missed=missed,
        max_missed=max_missed,
        overlap=overlap,
        gap=gap,
        fold=fold,
        jitter=jitter,
        replace=replace,
        workflows_dir=st.config.workflows_dir(),
    )
    if as_json:
        _emit_json(info.to_json())
        return
    tzname = info.spec.tz if info.spec else None
    nxt = info.row.next_fire_at
    typer.echo(f"{'replaced' if replace else 'added'} schedule {info.name}: {info.rule}")
    if info.row.paused:
        typer.echo(f"paused: no fires until `flowctl schedule resume {info.name}`")
    else:
        typer.echo(f"next fire {_zoned(nxt, tzname)} ({_relative(nxt, st.clock.now())})")


@schedule_app.command("ls")
def schedule_ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List schedules: rule, next fire, last fire and its outcome.  Example: flowctl schedule ls"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    infos = schedule_ops.list_schedules(st.store)
    if as_json:
        _emit_json([i.to_json() for i in infos])
        return
    if not infos:
        typer.echo("no schedules (add one with `flowctl schedule add`)")
        return
    now = st.clock.now()
    rows = []
    for i in infos:
        tzname = i.spec.tz if i.spec else None
        nxt = i.row.next_fire_at
        rows.append(
            [
                i.name,
                ("paused" if i.row.paused else "active")
                + ("" if i.row.source == "cli" else f" ({i.row.source})"),
                i.rule,
                "-" if nxt is None else f"{_zoned(nxt, tzname)} ({_relative(nxt, now)})",
                _last_outcome(i.last, now),
                _short_target(i.row.target),
            ]
        )
    # in a narrow terminal LAST goes first, then TARGET, RULE; NAME, STATE, NEXT stay whole
    headers = ["NAME", "STATE", "RULE", "NEXT", "LAST", "TARGET"]
    _table(headers, rows, keep=(0, 1, 3), order=(0, 1, 3, 2, 5, 4))


@schedule_app.command("show")
def schedule_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    count: Annotated[
        int,
        typer.Option("--limit", "--count", "-n", min=1, max=1000, help="Upcoming fires to list."),
    ] = 5,
    history: Annotated[
        int,
        typer.Option("--history", min=0, max=MAX_COUNT, help="Newest history entries to list."),
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a schedule: its rule, next fires and recent history.  Example: flowctl schedule show nightly"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    # one more entry than asked for, to know whether the history is cut
    detail = schedule_ops.show_schedule(
        st.store, name, clock=st.clock, count=count, history=history + 1
    )
    cut = len(detail.history) > history
    detail.history = detail.history[len(detail.history) - history :] if history else []
    if as_json:
        _emit_json(detail.to_json())
    else:
        _print_schedule(detail, st.clock.now())
    if cut:
        _cut(history, None, "history entries", flag="--history N")


def _print_schedule(detail: schedule_ops.ScheduleDetail, now: datetime) -> None:
    info, r = detail.info, detail.info.row
    tzname = info.spec.tz if info.spec else None
    origin = f" from {r.origin}" if r.origin else ""
    typer.echo(f"schedule  {r.name} ({'paused' if r.paused else 'active'}; {r.source}{origin})")
    typer.echo(f"rule      {info.rule}")
    if info.spec is not None:
        s = info.spec
        typer.echo(
            f"policies  missed={s.missed} (max {s.max_missed}) overlap={s.overlap}"
            f" gap={s.gap} fold={s.fold} jitter={format_duration(s.jitter) if s.jitter else 'none'}"
        )
    typer.echo(f"target    {_short_target(r.target)}")
    typer.echo(f"input     {_shown_json(r.shown_input)}")
    typer.echo(f"created   {_zoned(r.created_at, tzname)}")
    typer.echo(f"last fire {_zoned(r.last_fire_at, tzname)}")
    typer.echo("")
    typer.echo("next fires" + (" (paused: none will fire until resumed)" if r.paused else ""))
    if not detail.upcoming:
        typer.echo("  (none)")
    for f in detail.upcoming:
        note = f"  {f.note}" if f.note else ""
        typer.echo(f"  {_zoned(f.at, tzname):<24} {_relative(f.at, now)}{note}")
    typer.echo("")
    typer.echo("history")
    if not detail.history:
        typer.echo("  (none)")
    for e in detail.history:
        run = f" {e.run_id}" if e.run_id else ""
        status = f" ({e.run_status})" if e.run_status else ""
        why = f"  {e.detail}" if e.detail else ""
        typer.echo(f"  {_zoned(e.fire_at or e.at, tzname):<24} {e.action:<16}{run}{status}{why}")


@schedule_app.command("pause")
def schedule_pause(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
) -> None:
    """Stop a schedule from firing until resumed.  Example: flowctl schedule pause nightly"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    info = schedule_ops.pause_schedule(st.store, name, clock=st.clock)
    if as_json:
        _emit_json(info.to_json())
        return
    typer.echo(f"paused {info.name}")


@schedule_app.command("resume")
def schedule_resume(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
) -> None:
    """Resume a paused schedule from now (fires during the pause are not run).  Example: flowctl schedule resume nightly"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    info = schedule_ops.resume_schedule(st.store, name, clock=st.clock)
    if as_json:
        _emit_json(info.to_json())
        return
    nxt = info.row.next_fire_at
    tzname = info.spec.tz if info.spec else None
    typer.echo(
        f"resumed {info.name}: next fire {_zoned(nxt, tzname)} ({_relative(nxt, st.clock.now())})"
    )


@schedule_app.command("rm")
def schedule_rm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"name": ..., "removed": true} as JSON.')
    ] = False,
) -> None:
    """Delete a schedule and its history (its runs stay).  Example: flowctl schedule rm nightly"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    schedule_ops.remove_schedule(st.store, name)
    if as_json:
        _emit_json({"name": name, "removed": True})
        return
    typer.echo(f"removed schedule {name}")


@schedule_app.command("trigger")
def schedule_trigger(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fire a schedule now, once (recorded as manual).  Example: flowctl schedule trigger nightly"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    done = schedule_ops.trigger_schedule(st.store, name, clock=st.clock)
    out = done.outcome
    if as_json:
        _emit_json(
            {
                "schedule": name,
                "action": out.action,
                "created": out.created,
                "detail": out.detail,
                "run": None if done.run is None else _run_json(done.run),
            }
        )
        return
    if done.run is None:
        typer.echo(f"{name}: no run started: {out.detail}")
    elif not out.created:
        typer.echo(f"{name}: already triggered at this instant: run {done.run.run_id}")
    elif done.run.run_at is None:
        typer.echo(f"triggered {name}: run {done.run.run_id} queued, {out.detail}")
    else:
        typer.echo(f"triggered {name}: run {done.run.run_id} queued (a daemon starts it)")


@schedule_app.command("explain")
def schedule_explain(
    ctx: typer.Context,
    expression: Annotated[str, typer.Argument(metavar="EXPR", help='Cron, e.g. "30 2 * * *".')],
    tz: Annotated[str | None, typer.Option("--tz", help="IANA zone (default: local).")] = None,
    count: Annotated[
        int, typer.Option("--limit", "--count", "-n", max=1000, help="How many fires.")
    ] = 10,
    gap: Annotated[str, typer.Option("--gap", help=_POLICY_HELP["gap"])] = "shift",
    fold: Annotated[str, typer.Option("--fold", help=_POLICY_HELP["fold"])] = "first",
    from_: Annotated[
        str | None,
        typer.Option("--from", help="List fires after this time (ISO-8601; default now)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the next fires of a cron expression, flagging DST gaps and folds.  Example: flowctl schedule explain "30 2 * * *" --tz Europe/Paris"""
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    zone = _given_tz(tz) or _default_tz(st)
    after = ops.parse_time(from_, st.clock, field="from", tz=zone) if from_ else None
    result = schedule_ops.explain_schedule(
        expression, clock=st.clock, tz=zone, count=count, gap=gap, fold=fold, after=after
    )
    if as_json:
        _emit_json(result)
        return
    typer.echo(result["rule"])
    rows = []
    n = 0
    for f in result["fires"]:
        at = datetime.fromisoformat(f["at"])
        if f["fires"]:
            n += 1
        note = ""
        if f["note"]:
            verdict = "" if f["fires"] else ": does not fire"
            note = f"{f['note']} [{f['policy']}{verdict}]"
        rows.append(
            [
                str(n) if f["fires"] else "-",
                _zoned(at, result["tz"]),
                f["weekday"][:3],
                at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                note,
            ]
        )
    _table(["#", f"LOCAL ({result['tz']})", "DAY", "UTC", "DST"], rows, keep=(0, 1, 3))


@schedule_app.command("sync")
def schedule_sync(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Load schedules declared in YAML workflows and flowctl.toml.  Example: flowctl schedule sync"""
    from flowctl.errors import ValidationError

    st = _state(ctx)
    try:
        report = _sync_declared(st)
    except ValidationError as e:
        for problem in e.problems:
            typer.echo(f"flowctl: {one_line(problem)}", err=True)
        typer.echo("flowctl: schedule sync: nothing changed", err=True)
        raise typer.Exit(2) from None
    if as_json:
        _emit_json(report.to_json())
        return
    for label, names in report.to_json().items():
        if names:
            typer.echo(f"{label:<10}{', '.join(names)}")
    if not any(report.to_json().values()):
        typer.echo("no declared schedules")


def agenda(
    ctx: typer.Context,
    until: Annotated[str, typer.Option("--until", help="How far ahead, e.g. 7d.")] = "30d",
    limit: Annotated[
        int, typer.Option("--limit", "-n", max=MAX_COUNT, help="At most this many items.")
    ] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Every future wake, start, retry, timeout, deadline and schedule fire, in time order.  Example: flowctl agenda --until 7d"""
    from flowctl.durations import parse_duration
    from flowctl.ops import schedules as schedule_ops

    st = _state(ctx)
    parse_duration(until)  # bad input is exit 2 before the database is looked for
    # one more than asked for, to know whether the list is cut (agenda checks limit >= 1)
    asked = limit + 1 if limit >= 1 else limit
    items = schedule_ops.agenda(st.store, clock=st.clock, until=until, limit=asked)
    cut = len(items) > limit
    items = items[:limit]
    if as_json:
        _emit_json([i.to_json() for i in items])
    elif not items:
        typer.echo(f"nothing scheduled in the next {until}")
    else:
        _agenda_table(items, st.clock.now())
    if cut:  # on stderr: stdout stays the table or one JSON document
        _cut(limit, None, "items", scope=f" within {until}")


def _agenda_table(items: list[schedule_ops.AgendaItem], now: datetime) -> None:
    rows = [
        [
            _local(i.at),
            _relative(i.at, now),
            i.kind,
            i.run_id or f"schedule {i.schedule}",
            (f"{i.workflow}: " if i.workflow else "") + i.detail,
        ]
        for i in items
    ]
    _table(["WHEN", "", "KIND", "RUN / SCHEDULE", "WHAT"], rows, keep=(0, 3))
