"""Starting runs: `flowctl run` (and `--input-file`), `fork` and `rerun`, and `wait`:
parse -> flowctl.ops -> render. A run driven here in the foreground (`--wait`) is printed
by flowctl/cli/printer.py.

flowctl/cli/__init__.py registers them on the app, in the order `flowctl --help` lists them.
"""

from __future__ import annotations

import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from flowctl import ops
from flowctl.cli.common import (
    State,
    _emit_json,
    _first_error_line,
    _local,
    _relative,
    _run_json,
    _shown_json,
    _state,
)
from flowctl.cli.inputs import parse_inputs
from flowctl.durations import parse_duration
from flowctl.errors import UsageError
from flowctl.limits import MAX_COUNT
from flowctl.model import EntryState, Run, RunStatus, iso
from flowctl.tracing.ids import normal_traceparent

# ---------------------------------------------------------------------------
# run

# Its arguments and options, one line each in its signature.
_TARGET = typer.Argument(
    metavar="TARGET", help="file.py:function, module:function, file.yaml, or a workflow name."
)
_ARG = typer.Option(
    "-i",
    "--arg",
    metavar="KEY=VALUE",
    help="Input: key=value (string) or key:=JSON (typed). Repeatable.",
)
_INPUT = typer.Option("--input", metavar="JSON", help="The whole input as a JSON object.")
_WAIT = typer.Option(
    "--wait", help="Stay in the foreground through sleeps and child runs until the run ends."
)
_DETACH = typer.Option("--detach", help="Only queue the run; a daemon runs it.")
_IN = typer.Option(
    "--in", metavar="DURATION", help="Start after a duration (queues the run), e.g. 10m."
)
_AT = typer.Option("--at", metavar="TIME", help="Start at a time (queues the run), ISO-8601.")
_DEADLINE = typer.Option(
    "--deadline",
    metavar="TIME|DURATION",
    help="Give up on the whole run at this time or after this duration.",
)
_TIMEOUT = typer.Option(
    "--timeout",
    metavar="DURATION",
    help="Execution budget per attempt (sleeping spends none), e.g. 30s.",
)
_MAX_ATTEMPTS = typer.Option(
    "--max-attempts", metavar="N", max=MAX_COUNT, help="Attempts in total (default 3)."
)
_PRIORITY = typer.Option(
    "--priority",
    metavar="N",
    help="Higher first among due runs (default 0); never past a concurrency limit.",
)
_KEY = typer.Option(
    "--key",
    metavar="KEY",
    help="Idempotency key: a second run with the same key returns the first.",
)
_INPUT_FILE = typer.Option(
    "--input-file",
    metavar="FILE|-",
    help="Queue one run per line of JSON objects (- reads stdin), in one transaction;"
    " with --key, line N's run gets key KEY:N. Needs --detach.",
)
_JSON = typer.Option("--json", help="Print one JSON object.")
_TRACEPARENT = typer.Option(
    "--traceparent",
    metavar="VALUE",
    help="Join this W3C trace (00-<trace id>-<span id>-<flags>): the run's spans go under it.",
)


def run(
    ctx: typer.Context,
    target: Annotated[str, _TARGET],
    inputs: Annotated[list[str] | None, _ARG] = None,
    input_json: Annotated[str | None, _INPUT] = None,
    wait: Annotated[bool, _WAIT] = False,
    detach: Annotated[bool, _DETACH] = False,
    in_: Annotated[str | None, _IN] = None,
    at: Annotated[str | None, _AT] = None,
    deadline: Annotated[str | None, _DEADLINE] = None,
    timeout: Annotated[str | None, _TIMEOUT] = None,
    max_attempts: Annotated[int | None, _MAX_ATTEMPTS] = None,
    priority: Annotated[int | None, _PRIORITY] = None,
    key: Annotated[str | None, _KEY] = None,
    input_file: Annotated[str | None, _INPUT_FILE] = None,
    as_json: Annotated[bool, _JSON] = False,
    traceparent: Annotated[str | None, _TRACEPARENT] = None,
) -> None:
    """Start a workflow run.  Example: flowctl run examples/hello.py:hello -i name=ana --wait"""
    st = _state(ctx)
    _check_modes(wait, detach, input_file, given_inputs=bool(inputs) or input_json is not None)
    data = parse_inputs(inputs, input_json)
    traceparent = normal_traceparent(traceparent)
    # Each option resolved once, by ops, before the database is opened (and created).
    options = ops.start_options(
        st.clock,
        delay=in_,
        at=at,
        deadline=deadline,
        timeout=timeout,
        max_attempts=max_attempts,
        priority=priority,
    )
    if input_file is not None:
        _run_many(st, target, input_file, key, options, as_json, traceparent)
        return
    # A bad target or input is refused before the database is opened (and created); a bad
    # --db is said first, as every command says it.
    st.db_path  # noqa: B018  (resolving it checks it)
    workflows_dir = st.config.workflows_dir()
    targets = ops.check_start(target, data, workflows_dir=workflows_dir)
    started = ops.start(
        st.open_store(create=True),
        target,
        data,
        clock=st.clock,
        options=options,
        key=key,
        workflows_dir=workflows_dir,
        targets=targets,
        traceparent=traceparent,
    )
    if not started.created:
        _say_known(st, started.run, key, wait=wait, as_json=as_json)
    elif detach or options.run_at is not None:
        _say_queued(st, started.run, options.run_at, as_json=as_json)
    else:
        _run_here(st, started.run, wait=wait, as_json=as_json)


def _check_modes(wait: bool, detach: bool, input_file: str | None, *, given_inputs: bool) -> None:
    """The options of `run` that exclude each other."""
    if wait and detach:
        raise UsageError("give --wait or --detach, not both")
    if input_file is not None:
        if not detach:
            raise UsageError("--input-file only queues runs: add --detach")
        if given_inputs:
            raise UsageError("give -i/--input or --input-file, not both")


def _say_known(st: State, run: Run, key: str | None, *, wait: bool, as_json: bool) -> None:
    """--key matched an earlier run: say so, and with --wait drive it here if it runs on."""
    if not as_json and key is None and run.debounce_key is not None:
        due = "-" if run.run_at is None else _local(run.run_at)
        typer.echo(f"collapsed into run {run.run_id} (debounce): it starts at {due}, newest input")
    elif not as_json:
        typer.echo(f"run {run.run_id} already exists for key {key!r} ({run.status})")
    if wait and not run.status.is_terminal:
        from flowctl.cli.printer import drive  # the engine loads only for a run driven here

        run = drive(st, run, wait=True, quiet=as_json)
    if as_json:
        _emit_json(_run_summary(run, created=False))


def _say_queued(st: State, run: Run, run_at: datetime | None, *, as_json: bool) -> None:
    """--detach, --in or --at: the run is queued for a daemon."""
    if as_json:
        _emit_json(_run_summary(run))
        return
    now = st.clock.now()
    when = "" if run_at is None else f" to start {_local(run_at)} ({_relative(run_at, now)})"
    typer.echo(f"queued {run.run_id} ({run.workflow}){when}")


def _run_here(st: State, run: Run, *, wait: bool, as_json: bool) -> None:
    """Run it in the foreground (through its sleeps with --wait); exit 1 if it ends dead
    or cancelled."""
    from flowctl.cli.printer import drive  # the engine loads only for a run driven here

    final = drive(st, run, wait=wait, quiet=as_json)
    if as_json:
        _emit_json(_run_summary(final))
    else:
        _print_end(st, final)
    if final.status in (RunStatus.DEAD, RunStatus.CANCELLED):
        raise typer.Exit(1)


def _run_many(
    st: State,
    target: str,
    input_file: str,
    key: str | None,
    options: ops.StartOptions,
    as_json: bool,
    traceparent: str | None,
) -> None:
    """`run --detach --input-file`: every line checked, then all queued in one transaction."""
    if input_file == "-":
        text, source = sys.stdin.read(), "stdin"
    else:
        try:
            text = Path(input_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--input-file {input_file}: cannot read it ({e})") from None
        source = input_file
    lines = ops.parse_input_lines(text, source)
    # Line N's run has the key K:N, N as an editor numbers lines (blank lines counted).
    keys = None if key is None else [f"{key}:{number}" for number, _ in lines]
    started = ops.start_many(
        st.open_store(create=True),
        target,
        [value for _, value in lines],
        clock=st.clock,
        options=options,
        keys=keys,
        labels=[f"{source} line {number}" for number, _ in lines],
        workflows_dir=st.config.workflows_dir(),
        traceparent=traceparent,
    )
    if as_json:
        _emit_json([_run_summary(s.run, created=s.created) for s in started])
        return
    new = sum(s.created for s in started)
    known = f" ({len(started) - new} already existed for their keys)" if new < len(started) else ""
    typer.echo(f"queued {new} run(s) of {started[0].run.workflow}{known}")


def _run_summary(run: Run, *, created: bool = True) -> dict[str, Any]:
    """What `flowctl run --json` prints; `created` is false when --key matched an earlier run."""
    return {
        "id": run.run_id,
        "created": created,
        "workflow": run.workflow,
        "status": str(run.status),
        "result": run.result,
        "error": run.error,
        "run_at": iso(run.run_at),
    }


def _print_end(st: State, run: Run) -> None:
    """How a run driven or watched here stands now that it ended or parks (two lines when
    it parks: where, then what carries it on)."""
    now = st.clock.now()
    child = _awaited_child(st, run)
    if child is not None:
        _print_child_wait(run, child, now)
    elif run.status is RunStatus.COMPLETED:
        typer.echo(f"completed {run.run_id}: {_shown_json(run.result)}")
    elif run.status is RunStatus.SLEEPING:
        typer.echo(f"sleeping until {_local(run.run_at)} ({_relative(run.run_at, now)})")
        typer.echo(f"run {run.run_id} (`flowctl daemon` wakes it; `flowctl show {run.run_id}`)")
    elif run.status is RunStatus.WAITING:
        due = f", timeout {_local(run.run_at)}" if run.run_at else ""
        typer.echo(f"waiting for a signal{due}")
        typer.echo(f"run {run.run_id} (`flowctl signal {run.run_id} NAME`)")
    elif run.status is RunStatus.QUEUED:
        typer.echo(
            f"queued {run.run_id}: next attempt {_local(run.run_at)} ({_relative(run.run_at, now)})"
        )
        if run.error:
            typer.echo(f"  last error: {_first_error_line(run)}")
    elif run.status is RunStatus.RUNNING:
        typer.echo(f"running {run.run_id} in another worker")
    elif run.status is RunStatus.PAUSED:
        typer.echo(f"paused {run.run_id} (`flowctl resume {run.run_id}` resumes it)")
    else:
        typer.echo(f"{run.status} {run.run_id}: {_first_error_line(run)}", err=True)


def _awaited_child(st: State, run: Run) -> Run | None:
    """The child run a waiting run waits for (its pending `ctx.child` call), else None."""
    from flowctl.transitions import awaited_child

    if run.status is not RunStatus.WAITING:
        return None
    pending = st.store.last_entry(run.run_id, [EntryState.PENDING])
    child_id = awaited_child(run.status, pending)
    return None if child_id is None else st.store.get_run(child_id)


def _print_child_wait(run: Run, child: Run, now: datetime) -> None:
    """A run parked on a child run that parked too (a sleep, a signal wait: `run` without
    --wait drives its children only until they park), or one a daemon runs."""
    if child.status is RunStatus.SLEEPING:
        how = f"sleeping until {_local(child.run_at)} ({_relative(child.run_at, now)})"
    elif child.status is RunStatus.WAITING:
        how = "waiting for a signal"
    else:
        how = str(child.status)
    typer.echo(f"waiting for child run {child.run_id} ({child.workflow}), which is {how}")
    typer.echo(f"run {run.run_id} (`flowctl daemon` carries it on; `flowctl show {run.run_id}`)")


def _start_copy(st: State, new: Run, origin: str, index: int, wait: bool, as_json: bool) -> None:
    """Render a fork or rerun; with --wait, drive it here as `run --wait` does."""
    from flowctl.cli.printer import drive  # the engine loads only for a run driven here

    journal = set(st.store.journal(new.run_id))
    copied = len(journal)
    final = drive(st, new, wait=True, quiet=as_json, known=journal) if wait else new
    if as_json:
        _emit_json(
            {**_run_summary(final), "forked_from": origin, "from_index": index, "copied": copied}
        )
    elif wait:
        _print_end(st, final)
    else:
        typer.echo(
            f"queued {new.run_id} ({new.workflow}): forked from {origin} at call #{index},"
            f" {copied} checkpoint(s) copied"
        )
    if final.status in (RunStatus.DEAD, RunStatus.CANCELLED):
        raise typer.Exit(1)


_FORK_INPUT = typer.Option(
    "--input", metavar="JSON", help="Input as a JSON object (default: the original's)."
)


_FORK_WAIT = typer.Option("--wait", help="Run it here, in the foreground, until it ends.")


def fork(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    from_index: Annotated[
        int,
        typer.Option(
            "--from",
            metavar="INDEX",
            max=MAX_COUNT,
            help="Copy the checkpoints before this call index.",
        ),
    ],
    input_json: Annotated[str | None, _FORK_INPUT] = None,
    wait: Annotated[bool, _FORK_WAIT] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new run as JSON.")] = False,
) -> None:
    """Start a new run of the same workflow from a call index of an earlier one; the
    original is left as it was.  Example: flowctl fork m8rtkeefq3x7bz2w --from 3 --wait"""
    st = _state(ctx)
    data = parse_inputs(None, input_json) if input_json is not None else None
    new = ops.fork(st.store, run_ref, from_index, clock=st.clock, input=data)
    origin = st.store.find_run(run_ref).run_id
    _start_copy(st, new, origin, from_index, wait, as_json)


def rerun(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    input_json: Annotated[str | None, _FORK_INPUT] = None,
    wait: Annotated[bool, _FORK_WAIT] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new run as JSON.")] = False,
) -> None:
    """Start the same workflow again with the same input (a fork from 0).
    Example: flowctl rerun m8rtkeefq3x7bz2w --wait"""
    st = _state(ctx)
    data = parse_inputs(None, input_json) if input_json is not None else None
    new = ops.rerun(st.store, run_ref, clock=st.clock, input=data)
    origin = st.store.find_run(run_ref).run_id
    _start_copy(st, new, origin, 0, wait, as_json)


# ---------------------------------------------------------------------------
# wait

WAIT_POLL = 0.2  # seconds between looks at the runs (their rows; a cheap read)
DAEMON_LOOK = 5.0  # seconds between looks for a live daemon, until "no daemon" is said
TIMED_OUT = 124  # as timeout(1)
NO_DAEMON = (
    "flowctl: no daemon is running on this database: sleepers will not wake and queued"
    " runs will not start; start one with `flowctl daemon` (still waiting)"
)


_RUNS = typer.Argument(metavar="RUN...", help="Run ids or unique prefixes.")
_WAIT_TIMEOUT = typer.Option(
    "--timeout", metavar="DURATION", help="Give up after this long (exit 124), e.g. 10m."
)
_WAIT_JSON = typer.Option(
    "--json", help="Print the run as JSON (a list for several RUNs), once they end."
)


def wait(
    ctx: typer.Context,
    run_refs: Annotated[list[str], _RUNS],
    timeout: Annotated[str | None, _WAIT_TIMEOUT] = None,
    as_json: Annotated[bool, _WAIT_JSON] = False,
) -> None:
    """Wait until runs end (a daemon or another `run --wait` runs them); say each as it
    ends. With no daemon running, say so once on stderr, and wait on. Exit 0 when every one completed, 1 when any is dead or cancelled, 124 when
    --timeout passes first.  Example: flowctl wait m8rtkeefq3x7bz2w
    Example: flowctl wait m8rtkeefq3x7bz2w m8rtkf0c9d2hxa4n --timeout 10m --json"""
    st = _state(ctx)
    budget = parse_duration(timeout).total_seconds() if timeout is not None else None
    runs: dict[str, Run] = {}
    for ref in run_refs:
        found = st.store.find_run(ref)
        runs.setdefault(found.run_id, found)
    give_up = None if budget is None else st.clock.monotonic() + budget
    try:
        active = _watch(st, runs, give_up, quiet=as_json)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    final = list(runs.values())
    if as_json:
        _emit_json(_run_json(final[0]) if len(final) == 1 else [_run_json(r) for r in final])
    if active:
        still = ", ".join(f"{r.run_id} ({r.status})" for r in active)
        typer.echo(f"flowctl: still running after {timeout}: {still}", err=True)
        raise typer.Exit(TIMED_OUT)
    if any(r.status in (RunStatus.DEAD, RunStatus.CANCELLED) for r in final):
        raise typer.Exit(1)


def _watch(st: State, runs: dict[str, Run], give_up: float | None, *, quiet: bool) -> list[Run]:
    """Read the runs every WAIT_POLL until none is active or `give_up` (the clock's
    monotonic time) passes, saying each end (unless `quiet`) and, once, on stderr, that no
    daemon serves the database. Updates `runs`; returns those still active."""
    idle = threading.Event()
    said: set[str] = set()
    look_for_daemon: float | None = st.clock.monotonic()  # None once "no daemon" was said
    while True:
        for rid, r in runs.items():
            if not r.status.is_terminal:
                runs[rid] = r = st.store.get_run(rid)
            if r.status.is_terminal and rid not in said and not quiet:
                said.add(rid)
                _print_end(st, r)
        active = [r for r in runs.values() if not r.status.is_terminal]
        now = st.clock.monotonic()
        if not active or (give_up is not None and now >= give_up):
            return active
        if look_for_daemon is not None and now >= look_for_daemon:
            # Said once, on stderr (stdout stays the ends, or one JSON document); the
            # wait goes on: a daemon may start later, or a `run --wait` runs its run.
            if ops.daemon_running(st.store, clock=st.clock):
                look_for_daemon = now + DAEMON_LOOK
            else:
                typer.echo(NO_DAEMON, err=True)
                look_for_daemon = None
        st.clock.wait_until(
            idle, now + WAIT_POLL if give_up is None else min(now + WAIT_POLL, give_up)
        )
