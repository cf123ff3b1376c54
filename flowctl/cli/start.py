"""Starting runs: `flowctl run` (and `--input-file`), `fork` and `rerun`, and driving a run
here in the foreground (`--wait`): parse -> flowctl.ops -> render.

flowctl/cli/__init__.py registers them on the app, in the order `flowctl --help` lists them.
"""

from __future__ import annotations

import sys
import threading
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flowctl import ops
from flowctl.cli.common import (
    State,
    _daemon_config,
    _emit_json,
    _first_error_line,
    _local,
    _relative,
    _run_json,
    _shown_json,
    _state,
)
from flowctl.durations import format_duration, parse_duration
from flowctl.errors import UsageError
from flowctl.limits import MAX_COUNT, one_line, terminal_safe
from flowctl.model import EntryState, Run, RunStatus, iso

if TYPE_CHECKING:
    from flowctl.output import CommandListener, StepOutput
    from flowctl.store import OutputChunk

# ---------------------------------------------------------------------------
# run


def run(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="file.py:function, module:function, file.yaml, or a workflow name.",
        ),
    ],
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "-i",
            "--arg",
            metavar="KEY=VALUE",
            help="Input: key=value (string) or key:=JSON (typed). Repeatable.",
        ),
    ] = None,
    input_json: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON", help="The whole input as a JSON object."),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Stay in the foreground through sleeps until the run ends."),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Only queue the run; a daemon runs it.")
    ] = False,
    in_: Annotated[
        str | None,
        typer.Option(
            "--in", metavar="DURATION", help="Start after a duration (queues the run), e.g. 10m."
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", metavar="TIME", help="Start at a time (queues the run), ISO-8601."),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            metavar="TIME|DURATION",
            help="Give up on the whole run at this time or after this duration.",
        ),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            metavar="DURATION",
            help="Execution budget per attempt (sleeping spends none), e.g. 30s.",
        ),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            "--max-attempts", metavar="N", max=MAX_COUNT, help="Attempts in total (default 3)."
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            metavar="KEY",
            help="Idempotency key: a second run with the same key returns the first.",
        ),
    ] = None,
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input-file",
            metavar="FILE|-",
            help="Queue one run per line of JSON objects (- reads stdin), in one transaction;"
            " with --key, line N's run gets key KEY:N. Needs --detach.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Start a workflow run.  Example: flowctl run examples/hello.py:hello -i name=ana --wait"""
    st = _state(ctx)
    clock = st.clock
    if in_ is not None and at is not None:
        raise UsageError("give --in or --at, not both")
    if wait and detach:
        raise UsageError("give --wait or --detach, not both")
    if input_file is not None:
        if not detach:
            raise UsageError("--input-file only queues runs: add --detach")
        if inputs or input_json is not None:
            raise UsageError("give -i/--input or --input-file, not both")
    data = ops.parse_inputs(inputs, input_json)
    run_at = None
    if in_ is not None:
        run_at = clock.now() + parse_duration(in_)
    elif at is not None:
        run_at = ops.parse_start_at(at, clock)
    deadline_at = (
        ops.parse_duration_or_time(deadline, clock, flag="--deadline") if deadline else None
    )
    if timeout is not None:
        parse_duration(timeout)
    if input_file is not None:
        _run_many(st, target, input_file, key, run_at, deadline_at, timeout, max_attempts, as_json)
        return
    # A bad target or input is refused before the database is opened (and created); a bad
    # --db is said first, as every command says it.
    st.db_path  # noqa: B018  (resolving it checks it)
    targets = ops.check_start(target, data, workflows_dir=st.config.workflows_dir())
    started = ops.start(
        st.open_store(create=True),
        target,
        data,
        clock=clock,
        workflows_dir=st.config.workflows_dir(),
        key=key,
        run_at=run_at,
        deadline=deadline_at,
        timeout=timeout,
        max_attempts=max_attempts,
        targets=targets,
    )
    run_obj = started.run
    if not started.created:
        if not as_json:
            typer.echo(f"run {run_obj.run_id} already exists for key {key!r} ({run_obj.status})")
        if wait and not run_obj.status.is_terminal:
            run_obj = _drive(st, run_obj, wait=True, quiet=as_json)
        if as_json:
            _emit_json(_run_summary(run_obj, created=False))
        return
    if detach or run_at is not None:
        if as_json:
            _emit_json(_run_summary(run_obj))
        else:
            when = (
                ""
                if run_at is None
                else f" to start {_local(run_at)} ({_relative(run_at, clock.now())})"
            )
            typer.echo(f"queued {run_obj.run_id} ({run_obj.workflow}){when}")
        return
    final = _drive(st, run_obj, wait=wait, quiet=as_json)
    if as_json:
        _emit_json(_run_summary(final))
    else:
        _print_end(final, clock.now())
    if final.status in (RunStatus.DEAD, RunStatus.CANCELLED):
        raise typer.Exit(1)


def _run_many(
    st: State,
    target: str,
    input_file: str,
    key: str | None,
    run_at: datetime | None,
    deadline_at: datetime | None,
    timeout: str | None,
    max_attempts: int | None,
    as_json: bool,
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
        keys=keys,
        labels=[f"{source} line {number}" for number, _ in lines],
        workflows_dir=st.config.workflows_dir(),
        run_at=run_at,
        deadline=deadline_at,
        timeout=timeout,
        max_attempts=max_attempts,
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


def _drive(
    st: State, run_obj: Run, *, wait: bool, quiet: bool, known: set[int] | None = None
) -> Run:
    """Run it here as a worker; print each step as it is journaled (`known`: call indices
    already journaled before, e.g. copied by a fork, not printed)."""
    from flowctl.engine import Outcome
    from flowctl.foreground import drive_run
    from flowctl.model import JournalEntry
    from flowctl.ops.explain import error_line
    from flowctl.output import command_output_to
    from flowctl.store.records import Claim

    def on_checkpoint(entry: JournalEntry) -> None:
        if quiet or entry.kind != "step":
            return
        took = f" ({format_duration(entry.duration)})" if entry.duration is not None else ""
        if entry.state is EntryState.DONE:
            typer.echo(f"  ✓ {one_line(entry.name)}{took}")
            return
        error = entry.value if isinstance(entry.value, dict) else None
        why = f": {terminal_safe(one_line(error_line(error)))}" if error else ""
        typer.echo(f"  ✗ {one_line(entry.name)}{took}{why}")

    # What has been printed: journal entries by (call index, state), so a step that failed
    # here and was retried elsewhere is printed again when it ends (a step's retries by
    # their try, so each failed try is said); and output chunks by seq, so output printed
    # live (this process ran the step) is not replayed.
    printed: set[tuple[int, str]] = set()

    def key(entry: JournalEntry) -> tuple[int, str]:
        if entry.state is EntryState.RETRYING:
            return entry.call_index, f"{entry.state}:{entry.tries}"
        return entry.call_index, str(entry.state)

    copied = set(known or ())  # journaled before this run began here (a fork's copy)
    shown_chunks: set[int] = set()

    def catch_up(before: int | None, *, with_output: bool) -> None:
        """Print, in call order, the journal entries before `before` (None: all) not yet
        printed: each step after the output it recorded (`with_output`: a daemon ran it;
        this process printed its own live), and each sleep or wait it parked on."""
        from flowctl.ops.maintenance import run_output

        missed = sorted(
            (
                e
                for e in st.store.journal(run_obj.run_id).values()
                if key(e) not in printed
                and e.call_index not in copied
                and (before is None or e.call_index < before)
            ),
            key=lambda e: e.call_index,
        )
        chunks = run_output(st.store, run_obj.run_id) if missed else []
        if not with_output:
            shown_chunks.update(c.seq for c in chunks)
        for entry in missed:
            printed.add(key(entry))
            say_chunks(entry.call_index, chunks)
            _say_entry(entry)

    def say_chunks(index: int, chunks: list[OutputChunk]) -> None:
        """The output the step at `index` recorded that is not printed yet."""
        for c in chunks:
            if c.call_index == index and c.seq not in shown_chunks:
                shown_chunks.add(c.seq)
                if c.stream in ("stdout", "stderr"):
                    text = "\n".join(terminal_safe(line) for line in c.text.split("\n"))
                    typer.echo(text, nl=False, err=c.stream == "stderr")

    def _say_entry(entry: JournalEntry) -> None:
        pending = entry.state is EntryState.PENDING
        if entry.kind == "sleep" and pending and wait and entry.wake_at is not None:
            when = f"{_local(entry.wake_at)} ({_relative(entry.wake_at, st.clock.now())})"
            typer.echo(f"  … sleeping until {when}")
        elif entry.kind == "signal" and pending and wait:
            timeout = "" if entry.wake_at is None else f", timeout {_local(entry.wake_at)}"
            typer.echo(f"  … waiting for signal {one_line(entry.name)!r}{timeout}")
        elif entry.kind == "step" and pending and isinstance(entry.value, dict):
            child = entry.value.get("child_run_id")
            if child and wait:
                typer.echo(f"  … waiting for child run {child} (`flowctl daemon` runs it)")
        elif entry.kind == "step" and not pending:
            on_checkpoint(entry)

    # The timeline after the events already there when this began: what another worker (a
    # daemon) did to the run. Its failed attempt's checkpoint is deleted when the retry is
    # queued, so only the timeline still says that a step failed and when it runs again.
    ours: set[int] = set()  # the fences of this process's claims: their events it printed
    seen = [0 if quiet else st.store.timeline_page(run_obj.run_id, limit=0)[1]]
    theirs = [False]  # the events being read follow a claim by another worker
    attempt = [run_obj.attempt]  # the newest attempt a `retry scheduled` event named

    def say_others() -> None:
        from flowctl.ops.maintenance import run_output

        total = st.store.timeline_page(run_obj.run_id, limit=0)[1]
        if total <= seen[0]:  # nothing new (or `prune` trimmed it: count from here)
            seen[0] = total
            return
        events, seen[0] = st.store.timeline_page(run_obj.run_id, limit=total - seen[0])
        for event in events:
            data = event.data
            if event.type == "claimed":
                theirs[0] = data.get("fence") not in ours
            elif event.type == "retry scheduled" and _int(data.get("attempt")) > attempt[0]:
                # A new attempt: the last one's failures left the journal, and the next
                # one's are new at the same indices (a load retry is the same attempt).
                attempt[0] = _int(data.get("attempt"))
                printed.difference_update([k for k in printed if k[1] != str(EntryState.DONE)])
            if not theirs[0]:
                continue
            if event.type == "step failed" and isinstance(data.get("index"), int):
                if (data["index"], str(EntryState.ERROR)) not in printed:
                    printed.add((data["index"], str(EntryState.ERROR)))
                    say_chunks(data["index"], run_output(st.store, run_obj.run_id))
                    error = terminal_safe(one_line(str(data.get("error", ""))))
                    typer.echo(f"  ✗ {one_line(str(data.get('name', '?')))}: {error}")
            elif event.type in ("retry scheduled", "step retry scheduled") and wait:
                try:
                    at = datetime.fromisoformat(str(data.get("at")))
                except ValueError:
                    continue
                typer.echo(f"  ↻ retrying at {_local(at)} ({_relative(at, st.clock.now())})")

    def others_ran() -> None:
        """Before this process runs a step, and while it waits: what a daemon ran."""
        catch_up(None, with_output=True)
        say_others()

    def on_claim(claim: Claim) -> None:
        ours.add(claim.lease.fence)  # first: its `claimed` event is already written
        others_ran()

    def on_step(entry: JournalEntry) -> None:
        if not quiet:
            catch_up(entry.call_index, with_output=True)
        printed.add(key(entry))
        on_checkpoint(entry)

    def on_outcome(outcome: Outcome) -> None:
        # Say why the terminal goes quiet when --wait waits through a sleep or a retry:
        # the sleep or wait just journaled (its output was printed live), then a retry.
        from flowctl.ops.maintenance import run_output

        if quiet:
            return
        catch_up(None, with_output=False)
        # Everything the attempt printed was printed live: a later catch-up (a daemon runs
        # the next attempt) prints only the output recorded after this.
        newest = max(shown_chunks, default=0)
        shown_chunks.update(c.seq for c in run_output(st.store, run_obj.run_id, after=newest))
        if wait and outcome.run_at is not None and outcome.status is RunStatus.QUEUED:
            until = f"{_local(outcome.run_at)} ({_relative(outcome.run_at, st.clock.now())})"
            typer.echo(f"  ↻ retrying at {until}")

    cfg = _daemon_config(st, concurrency=1)
    echo = nullcontext() if quiet else command_output_to(_echo_commands(run_obj.run_id))
    try:
        with echo:
            final: Run = drive_run(
                st.store,
                st.clock,
                run_obj.run_id,
                cfg,
                wait=wait,
                on_checkpoint=on_step,
                on_outcome=on_outcome,
                on_claim=None if quiet else on_claim,
                on_wait=None if quiet else others_ran,
            )
        if not quiet:
            others_ran()  # steps a daemon ran after the run left us
        return final
    except KeyboardInterrupt:
        typer.echo(
            f"\ninterrupted: run {run_obj.run_id} is left to `flowctl daemon`, which resumes it",
            err=True,
        )
        raise typer.Exit(130) from None


def _int(value: object) -> int:
    """A timeline event's number, 0 when it holds something else."""
    return value if isinstance(value, int) else 0


def _echo_commands(run_id: str) -> CommandListener:
    """Print a command step's output of this run as it comes (stdout to stdout, stderr to
    stderr), not copied into the step's stored output a second time. A closed pipe only
    stops the echo: it never fails the step."""
    from flowctl.output import uncaptured

    broken: list[bool] = []

    def echo(sink: StepOutput, stream: str, text: str) -> None:
        if sink.run_id != run_id or broken or not text:
            return
        target = uncaptured(sys.stderr if stream == "stderr" else sys.stdout)
        try:
            target.write(text)
            target.flush()
        except (OSError, ValueError):
            broken.append(True)

    return echo


def _print_end(run: Run, now: datetime) -> None:
    if run.status is RunStatus.COMPLETED:
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


def _start_copy(st: State, new: Run, origin: str, index: int, wait: bool, as_json: bool) -> None:
    """Render a fork or rerun; with --wait, drive it here as `run --wait` does."""
    journal = set(st.store.journal(new.run_id))
    copied = len(journal)
    final = _drive(st, new, wait=True, quiet=as_json, known=journal) if wait else new
    if as_json:
        _emit_json(
            {**_run_summary(final), "forked_from": origin, "from_index": index, "copied": copied}
        )
    elif wait:
        _print_end(final, st.clock.now())
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
    data = ops.parse_inputs(None, input_json) if input_json is not None else None
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
    data = ops.parse_inputs(None, input_json) if input_json is not None else None
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


def wait(
    ctx: typer.Context,
    run_refs: Annotated[
        list[str], typer.Argument(metavar="RUN...", help="Run ids or unique prefixes.")
    ],
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout", metavar="DURATION", help="Give up after this long (exit 124), e.g. 10m."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the run as JSON (a list for several RUNs), once they end."
        ),
    ] = False,
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
    idle = threading.Event()
    said: set[str] = set()
    look_for_daemon: float | None = st.clock.monotonic()  # None once "no daemon" was said
    try:
        while True:
            for rid, r in runs.items():
                if not r.status.is_terminal:
                    runs[rid] = r = st.store.get_run(rid)
                if r.status.is_terminal and rid not in said and not as_json:
                    said.add(rid)
                    _print_end(r, st.clock.now())
            active = [r for r in runs.values() if not r.status.is_terminal]
            now = st.clock.monotonic()
            if not active or (give_up is not None and now >= give_up):
                break
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
