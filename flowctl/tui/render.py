"""What `flowctl tui` shows, as text: list cells, countdowns, the detail pane, error blocks.

Every function here is a pure function of its arguments (a run, `now`, a width), so a
FakeClock makes every screen reproducible and the text can be checked without an app.
Nothing here queries the store or touches a widget; `flowctl.tui` does both.

The detail pane is built as Textual `Content` (its styles name theme variables such as
`$error`), and list cells as Rich `Text`, so this module is on the Textual side of the
import rule and only the TUI imports it.
"""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.text import Text
from textual.content import Content

from flowctl import ops
from flowctl.durations import format_duration
from flowctl.errors import FlowctlError
from flowctl.model import (
    EntryState,
    JournalEntry,
    Run,
    RunStatus,
    TimelineEvent,
    human_value,
    local_text,
)
from flowctl.tracing.ids import run_trace

# The newest checkpoints and timeline events the detail pane reads and shows, each; the
# rest of a long run stays in the store (`flowctl show RUN --all`).
DETAIL_STEPS = 200
TEXT_LIMIT = 4000  # characters of input/result/traceback shown before "…"


# ---------------------------------------------------------------------------
# Formatting: pure functions of a run and `now`, so screens are reproducible


def to_second(at: datetime | None) -> str:
    """An instant as the operator reads it: local time with the zone, to the second, as
    the CLI's tables and `why` print it (model.local_text)."""
    return "—" if at is None else local_text(at)


def to_minute(at: datetime | None) -> str:
    """An instant for a list column, where the year matters more than the seconds."""
    return "—" if at is None else at.astimezone().strftime("%Y-%m-%d %H:%M %Z")


def _short_when(at: datetime) -> str:
    """A timeline instant: the year dropped, the zone kept."""
    return at.astimezone().strftime("%m-%d %H:%M:%S %Z")


def countdown(at: datetime | None, now: datetime) -> str:
    """A countdown to `at`: "2d03h", "due", or "late 5m03s" when nothing has acted on it."""
    if at is None:
        return "—"
    seconds = (at - now).total_seconds()
    if seconds > 0:
        return format_duration(at - now)
    if seconds > -1:
        return "due"
    return f"late {format_duration(now - at)}"


def ago(at: datetime | None, now: datetime) -> str:
    return "—" if at is None else f"{format_duration(now - at)} ago"


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters; a cut one ends with "…"."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_json(value: Any, limit: int = 48) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "\n…"


def error_first_line(error: dict[str, Any] | None) -> str:
    """`Type: first line of the message`, as the dead-letter list shows it."""
    if not error:
        return ""
    message = str(error.get("message") or "")
    first = message.splitlines()[0] if message else ""
    kind = str(error.get("type") or "Error")
    return f"{kind}: {first}" if first else kind


def describe_error(e: Exception) -> str:
    """One line for a notification. Workers catch every exception, not only FlowctlError:
    one that escaped would end the whole app (Textual's default), and an operator watching
    a busy database should see "database is locked" and carry on."""
    return str(e) if isinstance(e, FlowctlError) else f"{type(e).__name__}: {e}"


def tab_count(n: int) -> str:
    """A tab count that stays short at 100,000 runs."""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def table_cell(text: str, style: str = "", limit: int | None = None) -> Text:
    """A table cell as plain text: run data must never be parsed as markup."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def schedule_field(value: Any) -> str:
    """A schedule field for the table: ISO instants as local time, yes/no for a flag, the
    rest as text."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and len(value) >= 19 and value[10:11] == "T":
        try:
            return to_minute(datetime.fromisoformat(value))
        except ValueError:
            return value
    return value if isinstance(value, str) else compact_json(value, 40)


# ---------------------------------------------------------------------------
# The detail pane, rendered from a RunDetail, `now` and the pane's width
#
# Long lines are wrapped here, with a hanging indent, rather than by the widget: a
# timeline entry whose data wraps back to column 0 is hard to scan.


def _wrap(text: str, width: int, indent: int = 2) -> list[str]:
    """`text` as lines of at most `width` cells; continuation lines indent past the first."""
    out: list[str] = []
    for line in text.rstrip("\n").splitlines() or [""]:
        lead = len(line) - len(line.lstrip(" "))
        out.extend(
            textwrap.wrap(
                line,
                width=max(width, 20),
                initial_indent=" " * indent,
                subsequent_indent=" " * (indent + lead + 2),
                break_long_words=True,
                break_on_hyphens=False,
            )
            or [""]
        )
    return out


def _indent(text: str, width: int, style: str = "") -> Content:
    return Content.styled("".join(f"{line}\n" for line in _wrap(text, width)), style)


def _section(title: str) -> Content:
    return Content.styled(f"\n{title}\n", "bold $accent")


def _kv(label: str, value: str, width: int, style: str = "") -> Content:
    lines = _wrap(value, width - 10, indent=0)
    body = "\n".join([lines[0], *(" " * 10 + line for line in lines[1:])])
    return Content.assemble((f"{label:<10}", "dim"), (body, style), "\n")


def _head_and_tail(head: Content, tail: str, width: int, tail_style: str) -> Content:
    """`head tail` on one line when it fits, else `tail` wrapped on the lines below."""
    if not tail:
        return Content.assemble(head, "\n")
    if head.cell_length + len(tail) <= width:
        return Content.assemble(head, (tail, tail_style), "\n")
    lines = "\n".join(_wrap(tail, width, indent=6))
    return Content.assemble(head, "\n", (lines, tail_style), "\n")


def _checkpoint_line(entry: JournalEntry, now: datetime, width: int) -> Content:
    state_style = {
        EntryState.DONE: "$success",
        EntryState.ERROR: "$error",
        EntryState.PENDING: "$warning",
        EntryState.RETRYING: "$warning",
    }[entry.state]
    if entry.state is EntryState.ERROR:
        what = error_first_line(entry.value if isinstance(entry.value, dict) else None)
    elif entry.kind == "sleep":
        at = entry.wake_at
        what = f"wake_at {to_second(at)}"
        if entry.state is EntryState.PENDING and at is not None:
            what += f" (in {countdown(at, now)})"
        elif entry.resolved_at is not None:
            what += f", woke {to_second(entry.resolved_at)}"
    elif entry.state is EntryState.RETRYING:
        what = f"try {entry.tries + 1} at {to_second(entry.wake_at)}"
    elif entry.state is EntryState.PENDING and isinstance(entry.value, dict):
        what = f"child run {entry.value.get('child_run_id', '…')}"
    elif entry.state is EntryState.PENDING:
        what = f"until {to_second(entry.wake_at)}" if entry.wake_at else "…"
    elif entry.kind == "fanout" and isinstance(entry.value, dict):
        what = f"{entry.value.get('count')} branches, {entry.name}[i]"
    else:
        what = compact_json(entry.value, 120)
    took = f"{format_duration(entry.duration)} " if entry.duration is not None else ""
    head = Content.assemble(
        (f"  #{entry.call_index:<3}", "dim"),
        f"{entry.kind!s:<7}",
        (f"{clip(entry.name, 18):<19}", "bold"),
        (f"{entry.state!s:<9}", state_style),
        (took, "dim"),
    )
    return _head_and_tail(head, what, width, "")


def _timeline_line(event: TimelineEvent, width: int) -> Content:
    data = ", ".join(f"{k}={human_value(v)}" for k, v in event.data.items())
    style = {
        "dead-lettered": "$error",
        "failed": "$error",
        "step failed": "$error",
        "timed out": "$error",
        "cancelled": "$warning",
        "woken by operator": "$warning",
        "completed": "$success",
    }.get(event.type, "bold")
    head = Content.assemble((f"  {_short_when(event.at)}  ", "dim"), (f"{event.type:<18}", style))
    return _head_and_tail(head, data, width, "dim")


def _budget(run: Run) -> str:
    spent = format_duration(run.exec_spent)
    if run.timeout is None:
        return f"no execution timeout ({spent} spent this attempt)"
    left = max(run.timeout - run.exec_spent, 0.0)
    return f"{format_duration(left)} left of {format_duration(run.timeout)} ({spent} spent)"


def _deadline(run: Run, now: datetime) -> str:
    if run.deadline is None:
        return "none"
    if run.deadline <= now:
        return f"{to_second(run.deadline)} (passed)"
    return f"{to_second(run.deadline)} (in {format_duration(run.deadline - now)})"


def _error_block(error: dict[str, Any], title: str, width: int) -> list[Content]:
    """The whole recorded error: message, why it is final, traceback, stderr tail."""
    parts = [_section(title), Content.styled(f"  {error.get('type', 'Error')}\n", "bold $error")]
    message = str(error.get("message") or "")
    if message:
        parts.append(_indent(message[:TEXT_LIMIT], width))
    facts = [
        f"{key}={error[key]}"
        for key in ("kind", "attempt", "dead_reason", "exit_code", "by")
        if error.get(key) is not None
    ]
    if facts:
        parts.append(_indent(", ".join(facts), width, "dim"))
    if error.get("traceback"):
        parts.append(_section("Traceback"))
        parts.append(_indent(str(error["traceback"])[-TEXT_LIMIT:], width))
    if error.get("stderr_tail"):
        parts.append(_section("Stderr (tail)"))
        parts.append(_indent(str(error["stderr_tail"])[-TEXT_LIMIT:], width))
    return parts


def _running_now(detail: ops.RunDetail, now: datetime, width: int) -> list[Content]:
    """The step a running run is inside and for how long, as its worker's last heartbeat
    (every second) recorded it, and the last lines the running step printed."""
    run = detail.run
    parts = [Content.styled("Running now\n", "bold $accent")]
    if run.current_step is None:
        parts.append(_indent("not inside a step at its last heartbeat", width, "dim"))
    else:
        took = ""
        if run.step_started_at is not None:
            spent = format_duration(max(now - run.step_started_at, timedelta(0)))
            took = f" for {spent} (since {to_second(run.step_started_at)})"
        head = Content.assemble("  step ", (run.current_step, "bold"))
        parts.append(_head_and_tail(head, took, width, ""))
    if detail.output_step is not None:
        parts.append(_indent(f"output of step {detail.output_step} (last lines):", width, "dim"))
        parts.append(_indent("\n".join(detail.output_tail)[-TEXT_LIMIT:], width))
    return parts


def render_detail(detail: ops.RunDetail, now: datetime, width: int = 80) -> Content:
    """Everything an operator asks about one run, as one scrollable block of text: its head
    and notes, what it does now (if running: first, so a 24-line terminal shows it), its
    facts, input and outcome, what it published and was sent, checkpoints and timeline."""
    parts = _detail_head(detail, width)
    if detail.run.status is RunStatus.RUNNING:
        parts += [*_running_now(detail, now, width), Content("\n")]
    parts += _detail_facts(detail, now, width)
    parts += _input_and_outcome(detail, width)
    parts += _published_and_sent(detail, width)
    parts += _checkpoints(detail, now, width)
    parts += _children(detail, width)
    parts += _timeline(detail, width)
    return Content.assemble(*parts)


def _detail_head(detail: ops.RunDetail, width: int) -> list[Content]:
    """The run id, workflow and status (the workflow on a line of its own in a narrow
    pane, not broken mid-name), then each note on the run."""
    run = detail.run
    status_style = {
        RunStatus.DEAD: "bold $error",
        RunStatus.COMPLETED: "bold $success",
        RunStatus.CANCELLED: "bold $warning",
    }.get(run.status, "bold $accent")
    if len(run.run_id) + len(run.workflow) + len(str(run.status)) + 4 <= width:
        head = Content.assemble(
            (run.run_id, "bold"),
            "  ",
            (run.workflow, "bold"),
            "  ",
            (str(run.status), status_style),
        )
    else:
        head = Content.assemble(
            (run.run_id, "bold"),
            "  ",
            (str(run.status), status_style),
            "\n",
            (clip(run.workflow, max(width, 20)), "bold"),
        )
    parts: list[Content] = [Content.assemble(head, "\n")]
    for note in detail.notes:
        parts.append(
            Content.styled("".join(f"{x}\n" for x in _wrap(f"! {note}", width, 0)), "$warning")
        )
    return parts


def _detail_facts(detail: ops.RunDetail, now: datetime, width: int) -> list[Content]:
    """Why it is where it is, attempts, deadline, budget, times, target, schedule, parent."""
    run = detail.run
    parts = [
        _kv("why", ops.why(detail, now), width),
        _kv("attempt", f"{run.attempt} of {run.max_attempts}", width),
        _kv("deadline", _deadline(run, now), width),
        _kv("budget", _budget(run), width),
        _kv("created", to_second(run.created_at), width),
    ]
    if run.started_at:
        parts.append(_kv("started", to_second(run.started_at), width))
    if run.finished_at:
        parts.append(_kv("finished", to_second(run.finished_at), width))
    parts.append(_kv("target", run.target, width, "dim"))
    if run.schedule:
        parts.append(_kv("schedule", f"{run.schedule} at {to_second(run.scheduled_at)}", width))
    if run.parent_run_id:
        parts.append(_kv("parent", run.parent_run_id, width))
    parts.append(_kv("trace", run_trace(run.run_id, run.traceparent).trace_id, width, "dim"))
    return parts


def _input_and_outcome(detail: ops.RunDetail, width: int) -> list[Content]:
    """The input, the result of a completed run, and the whole error of one that failed
    (with the failing step's traceback or stderr when the run's error lacks them: the
    step's checkpoint keeps them)."""
    run = detail.run
    parts = [_section("Input"), _indent(_pretty_json(run.shown_input), width)]
    if run.status is RunStatus.COMPLETED:
        parts += [_section("Result"), _indent(_pretty_json(run.result), width)]
    if not run.error:
        return parts
    title = {RunStatus.DEAD: "Error", RunStatus.CANCELLED: "Cancelled"}.get(
        run.status, "Last error"
    )
    parts.extend(_error_block(run.error, title, width))
    failed = [c for c in detail.checkpoints if c.state is EntryState.ERROR]
    step_error = failed[-1].value if failed and isinstance(failed[-1].value, dict) else {}
    for key, label in (("traceback", "Traceback"), ("stderr_tail", "Stderr (tail)")):
        if step_error.get(key) and not run.error.get(key):
            parts.append(_section(f"{label} of step {failed[-1].name!r}"))
            parts.append(_indent(str(step_error[key])[-TEXT_LIMIT:], width))
    return parts


def _published_and_sent(detail: ops.RunDetail, width: int) -> list[Content]:
    """The values the run published, and the signals buffered for it."""
    parts: list[Content] = []
    if detail.published:
        parts.append(_section("Published"))
        for key, (value, _at) in detail.published.items():
            parts.append(_indent(f"{key} = {compact_json(value, 120)}", width))
    if detail.pending_signals:
        parts.append(_section("Buffered signals"))
        for name, payload, sent_at in detail.pending_signals:
            line = f"{_short_when(sent_at)}  {name}  {compact_json(payload, 120)}"
            parts.append(_indent(line, width))
    return parts


def _checkpoints(detail: ops.RunDetail, now: datetime, width: int) -> list[Content]:
    """The newest checkpoints (and how many earlier ones are left out), then versions."""
    hidden, _ = detail.left_out()
    total = max(detail.checkpoints_total, len(detail.checkpoints))
    parts = [_section(f"Checkpoints ({total})")]
    if hidden > 0:
        parts.append(_indent(f"… {hidden:,} earlier checkpoints not shown", width, "dim"))
    if not detail.checkpoints:
        parts.append(_indent("none yet", width, "dim"))
    parts += [_checkpoint_line(entry, now, width) for entry in detail.checkpoints]
    for change_id, version, _at in detail.versions:
        parts.append(_indent(f"version {change_id} = {version}", width, "dim"))
    return parts


CHILDREN_SHOWN = 50  # child runs the detail lists


def _children(detail: ops.RunDetail, width: int) -> list[Content]:
    """The run's child runs, by the call (and branch) that started each."""
    if not detail.children:
        return []
    running = sum(1 for c in detail.children if not c.run.status.is_terminal)
    parts = [_section(f"Children ({len(detail.children)}, {running} running)")]
    for c in detail.children[:CHILDREN_SHOWN]:
        at = f"#{c.call_index}" if c.call_index is not None else "#?"
        line = f"{at:<5} {c.branch or c.run.workflow}  {c.run.run_id}  {c.run.status}"
        parts.append(_indent(line, width, "" if c.run.status.is_terminal else "bold"))
    if len(detail.children) > CHILDREN_SHOWN:
        more = len(detail.children) - CHILDREN_SHOWN
        parts.append(_indent(f"… {more:,} more children not shown", width, "dim"))
    return parts


def _timeline(detail: ops.RunDetail, width: int) -> list[Content]:
    """The newest timeline events (and how many earlier ones are left out)."""
    _, hidden = detail.left_out()
    parts = [_section("Timeline")]
    if hidden > 0:
        parts.append(_indent(f"… {hidden:,} earlier events not shown", width, "dim"))
    parts += [_timeline_line(event, width) for event in detail.timeline]
    return parts


def _instant(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).astimezone(UTC)


def _zoned(at: datetime, zone: Any) -> str:
    """A fire as the schedule's zone reads it: "Mon 2026-03-30 09:00 CEST"."""
    return at.astimezone(zone).strftime("%a %Y-%m-%d %H:%M %Z").rstrip()


def _policy(policies: dict[str, Any] | None) -> str:
    if not policies:
        return "—"
    missed = f"missed fires: {policies['missed']}"
    if policies.get("max_missed") is not None and policies["missed"] != "skip":
        missed += f" (at most {policies['max_missed']})"
    jitter = policies.get("jitter") or 0
    return (
        f"{missed}; overlap: {policies['overlap']}; DST gap: {policies['gap']},"
        f" fold: {policies['fold']}" + (f"; jitter {format_duration(jitter)}" if jitter else "")
    )


HISTORY_SHOWN = 8  # newest schedule decisions on the card


def render_schedule(item: dict[str, Any], width: int = 80, now: datetime | None = None) -> Content:
    """One schedule as a card: its rule, policies and target; its next fires in its own
    zone with DST marks (a gap or fold the policy changed, an offset change between two
    fires); its last fires with their runs. `item` is `flowctl schedule show --json`'s
    object (or `ls`'s, without upcoming fires and history)."""
    from zoneinfo import ZoneInfo  # lazy: zone data loads for a schedule's card alone

    zone: Any = UTC
    if item.get("tz"):
        try:
            zone = ZoneInfo(str(item["tz"]))
        except (KeyError, ValueError):
            zone = UTC
    state = ("paused", "bold $warning") if item.get("paused") else ("active", "bold $success")
    parts = [Content.assemble((str(item.get("name", "schedule")), "bold"), "  ", state, "\n")]
    parts.append(_kv("rule", str(item.get("rule") or "—"), width))
    parts.append(_kv("policy", _policy(item.get("policies")), width))
    parts.append(_kv("target", str(item.get("target") or "—"), width, "dim"))
    parts.append(_kv("input", compact_json(item.get("input"), 200), width))
    origin = item.get("origin") or item.get("source")
    if origin:
        parts.append(_kv("from", str(origin), width, "dim"))
    if "upcoming" not in item:
        nxt = _instant(item.get("next_fire_at"))
        parts.append(_kv("next", "—" if nxt is None else _zoned(nxt, zone), width))
        return Content.assemble(*parts)
    parts += _next_fires(item, zone, width, now)
    parts += _last_fires(item, zone, width)
    return Content.assemble(*parts)


def _next_fires(item: dict[str, Any], zone: Any, width: int, now: datetime | None) -> list[Content]:
    """The upcoming fires in the schedule's zone, each marked where the clocks change
    before it or a DST policy moved it."""
    paused = " (paused: none fire until it is resumed)" if item.get("paused") else ""
    parts = [_section(f"Next fires{paused}")]
    if not item["upcoming"]:
        parts.append(_indent("none", width, "dim"))
    offset = None
    for fire in item["upcoming"]:
        at = _instant(fire["at"])
        if at is None:
            continue
        local = at.astimezone(zone)
        when = f"  {_zoned(at, zone)}"
        until = f"  in {countdown(at, now)}" if now is not None else ""
        parts.append(Content.assemble(when, (until, "dim"), "\n"))
        marks = []
        if offset is not None and local.utcoffset() != offset:
            marks.append(f"clocks change before this fire: now UTC{local.strftime('%z')}")
        if fire.get("note"):
            marks.append(f"DST: {fire['note']}")
        for mark in marks:
            parts.append(
                Content.styled("".join(f"{x}\n" for x in _wrap(f"! {mark}", width, 4)), "$warning")
            )
        offset = local.utcoffset()
    return parts


def _last_fires(item: dict[str, Any], zone: Any, width: int) -> list[Content]:
    """The newest decisions (HISTORY_SHOWN, newest first): fired, skipped, error, with the
    run each started and its status."""
    history = list(item.get("history") or [])[-HISTORY_SHOWN:]
    parts = [_section("Last fires")]
    if not history:
        parts.append(_indent("none yet", width, "dim"))
    for event in reversed(history):
        at = _instant(event.get("fire_at")) or _instant(event.get("at"))
        when = "—" if at is None else _zoned(at, zone)
        run = event.get("run_id") or ""
        status = event.get("run_status") or ""
        style = "$error" if event["action"] == "error" else ""
        head = Content.assemble(f"  {when}  ", (f"{event['action']:<15}", style))
        tail = " ".join(x for x in (run, status) if x) or (event.get("detail") or "")
        parts.append(_head_and_tail(head, tail, width, "dim"))
    return parts
