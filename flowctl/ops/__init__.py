"""Operator actions shared by every front end (CLI, TUI, Client, HTTP): validation,
defaults and writes live here so each one behaves the same. Nothing here prints.

    flowctl.ops.runs        start, list, signal, cancel, redrive, fork, pause ...
    flowctl.ops.options     a run's start options and key, resolved and checked once
    flowctl.ops.listing     the run list and its counts (no workflow loader: `flowctl ls`)
    flowctl.ops.detail      show and why: one run in full
    flowctl.ops.parse       operator input: times, statuses, JSON lines
    flowctl.ops.schedules   schedules and the agenda (imported where used: it loads cron)
    flowctl.ops.workflows   the workflows folder as `flowctl workflows` lists it, YAML checked

The run actions are re-exported, so `from flowctl import ops; ops.start(...)` is the one
import a front end needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowctl.ops.detail import (
        RunDetail,
        explain_detail,
        show_run,
        source_changed_note,
        why,
        why_facts,
        why_run,
    )
    from flowctl.ops.listing import (
        cancel_pending_text,
        cancel_requests,
        count_listed,
        count_runs,
        list_runs,
        waiting_for,
        workflow_names,
    )
    from flowctl.ops.options import (
        RedriveOptions,
        StartOptions,
        check_key,
        redrive_options,
        start_options,
    )
    from flowctl.ops.parse import (
        STATUS_NAMES,
        parse_duration_or_time,
        parse_input_lines,
        parse_json_arg,
        parse_since,
        parse_start_at,
        parse_statuses,
        parse_time,
    )
    from flowctl.ops.runs import (
        Redriven,
        Started,
        StatusReport,
        cancel,
        check_copy_source,
        check_start,
        copy_summary,
        daemon_running,
        fork,
        list_workflows,
        other_live_daemons,
        pause,
        pause_workflow,
        plan_copy,
        redrive,
        redrive_many,
        rerun,
        resume,
        resume_workflow,
        run_by_key,
        send_signal,
        send_signal_by_key,
        start,
        start_many,
        status,
        wake_now,
    )

__all__ = [
    "STATUS_NAMES",
    "RedriveOptions",
    "Redriven",
    "RunDetail",
    "StartOptions",
    "Started",
    "StatusReport",
    "cancel",
    "cancel_pending_text",
    "cancel_requests",
    "check_copy_source",
    "check_key",
    "check_start",
    "copy_summary",
    "count_listed",
    "count_runs",
    "daemon_running",
    "explain_detail",
    "fork",
    "list_runs",
    "list_workflows",
    "other_live_daemons",
    "parse_duration_or_time",
    "parse_input_lines",
    "parse_json_arg",
    "parse_since",
    "parse_start_at",
    "parse_statuses",
    "parse_time",
    "pause",
    "pause_workflow",
    "plan_copy",
    "redrive",
    "redrive_many",
    "redrive_options",
    "rerun",
    "resume",
    "resume_workflow",
    "run_by_key",
    "send_signal",
    "send_signal_by_key",
    "show_run",
    "source_changed_note",
    "start",
    "start_many",
    "start_options",
    "status",
    "waiting_for",
    "wake_now",
    "why",
    "why_facts",
    "why_run",
    "workflow_names",
]


_PARSE = frozenset(name for name in __all__ if name.startswith("parse_") or name == "STATUS_NAMES")
_LISTING = frozenset(
    (
        "cancel_pending_text",
        "cancel_requests",
        "count_listed",
        "count_runs",
        "list_runs",
        "waiting_for",
        "workflow_names",
    )
)
_OPTIONS = frozenset(
    ("RedriveOptions", "StartOptions", "check_key", "redrive_options", "start_options")
)
_DETAIL = frozenset(
    (
        "RedriveOptions",
        "Redriven",
        "RunDetail",
        "explain_detail",
        "show_run",
        "source_changed_note",
        "why",
        "why_facts",
        "why_run",
    )
)


def __getattr__(name: str) -> object:
    """A re-exported name, imported on first use: `from flowctl import ops` costs nothing,
    so a front end's start-up pays only for the actions it calls (`flowctl --help` none)."""
    if name not in __all__:
        raise AttributeError(f"module 'flowctl.ops' has no attribute {name!r}")
    import importlib

    if name in _PARSE:
        module = importlib.import_module("flowctl.ops.parse")
    elif name in _LISTING:
        module = importlib.import_module("flowctl.ops.listing")
    elif name in _DETAIL:
        module = importlib.import_module("flowctl.ops.detail")
    elif name in _OPTIONS:
        module = importlib.import_module("flowctl.ops.options")
    else:
        module = importlib.import_module("flowctl.ops.runs")
    value = getattr(module, name)
    globals()[name] = value
    return value
