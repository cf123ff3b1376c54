"""The commands for a long-lived install: `flowctl check`, `logs`, `prune`, `vacuum` and
`backup`: parse -> flowctl.ops -> render."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flowctl.cli.common import _emit_json, _local, _state, _table
from flowctl.errors import UsageError
from flowctl.limits import terminal_safe
from flowctl.model import iso

if TYPE_CHECKING:  # annotations only: ops.maintenance loads when a command runs
    from datetime import datetime

    from flowctl.ops.maintenance import PruneReport
    from flowctl.store import OutputChunk


def check(
    ctx: typer.Context,
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[TARGET...]", help="Only runs of these workflows (names or targets)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of findings.")] = False,
) -> None:
    """Before a deploy: replay every unfinished run against the code on disk (nothing runs,
    nothing is written); exit 1 if any would break.  Example: flowctl check"""
    st = _state(ctx)
    from flowctl.ops import maintenance as ops

    report = ops.check(st.store, targets, clock=st.clock, workflows_dir=st.config.workflows_dir())
    if as_json:
        _emit_json([f.to_json() for f in report.findings])
    else:
        for f in report.findings:
            where = f" at call #{f.call_index}" if f.call_index is not None else ""
            typer.echo(f"BREAKS {f.run_id} ({f.workflow}, {f.status}){where}: {f.message}")
            if f.recorded is not None or f.now is not None:
                typer.echo(f"  recorded: {f.recorded or '-'}   now: {f.now or '-'}")
            typer.echo(f"  fix: {f.fix}")
        if report.findings:
            typer.echo(
                f"{len(report.findings)} of {report.checked} unfinished run(s) would break"
                " with the code on disk"
            )
        else:
            typer.echo(f"ok: {report.checked} unfinished run(s) replay with the code on disk")
    if report.findings:
        raise typer.Exit(1)


def _chunk_json(c: OutputChunk) -> dict[str, Any]:
    return {
        "seq": c.seq,
        "at": iso(c.at),
        "step": c.step,
        "call_index": c.call_index,
        "stream": c.stream,
        "text": c.text,
    }


def _print_chunk(c: OutputChunk) -> None:
    """One line per printed line: local time with the zone, to the millisecond (as `show`'s
    timeline prints it), the step, the stream unless stdout, the text."""
    at = _local(c.at, ms=True)
    mark = "" if c.stream == "stdout" else f" [{c.stream}]"
    for line in c.text.splitlines():
        typer.echo(f"{at}  {c.step}{mark}  {terminal_safe(line)}")


def logs(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id or unique prefix.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow until the run ends.")
    ] = False,
    step: Annotated[str | None, typer.Option("--step", help="Only this step's output.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list of chunks (with -f, as they come).")
    ] = False,
) -> None:
    """What a run's steps printed (stdout, stderr, logging), in order with step and time.
    Example: flowctl logs m8rtkeefq3x7bz2w -f"""
    from flowctl.ops import maintenance as ops

    if step is not None and not step.strip():
        raise UsageError(
            "--step is empty: give a step name (see `flowctl show RUN`), or leave it out"
        )
    st = _state(ctx)
    run = st.store.find_run(run_ref)
    if not follow:
        chunks = ops.run_output(st.store, run.run_id, step=step)
        if as_json:
            _emit_json([_chunk_json(c) for c in chunks])
            return
        if not chunks:
            what = f"step {step!r} of run" if step else "run"
            typer.echo(f"no output recorded for {what} {run.run_id}", err=True)
        for c in chunks:
            _print_chunk(c)
        return
    idle = threading.Event()
    last = 0
    sep = "[\n"  # with --json, one JSON list, written as the chunks come
    try:
        while True:
            ended = st.store.get_run(run.run_id).status.is_terminal  # read before the output
            chunks = ops.run_output(st.store, run.run_id, step=step, after=last)
            for c in chunks:
                if as_json:
                    typer.echo(sep + json.dumps(_chunk_json(c)), nl=False)
                    sep = ",\n"
                else:
                    _print_chunk(c)
                last = c.seq
            if ended and not chunks:
                return
            st.clock.wait(idle, 0.2)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        if as_json:
            typer.echo("[]" if sep == "[\n" else "\n]")


_OLDER_THAN = typer.Option(
    "--older-than", metavar="DURATION", help="Runs that finished before this long ago, e.g. 30d."
)
_PRUNE_STATUS = typer.Option(
    "--status",
    "-s",
    help="completed, cancelled or dead; repeatable (default: completed and cancelled).",
)
_DRY_RUN = typer.Option("--dry-run", help="Only say what would go.")
_PRUNE_JSON = typer.Option("--json", help="Print JSON.")


def prune(
    ctx: typer.Context,
    older_than: Annotated[str, _OLDER_THAN],
    status: Annotated[list[str] | None, _PRUNE_STATUS] = None,
    dry_run: Annotated[bool, _DRY_RUN] = False,
    as_json: Annotated[bool, _PRUNE_JSON] = False,
) -> None:
    """Delete finished runs (journal, timeline, signals, output, published values) that
    ended before the cutoff; never a run that is not finished.  Example: flowctl prune --older-than 30d"""
    from flowctl.ops import maintenance as ops

    st = _state(ctx)
    report = ops.prune(st.store, older_than, status, clock=st.clock, dry_run=dry_run)
    statuses = [str(s) for s in report.statuses]
    if as_json:
        _emit_json(_prune_json(report, st.clock.now()))
        return
    if report.dry_run:
        if report.runs:
            _table(
                ["RUN", "WORKFLOW", "STATUS", "FINISHED"],
                [[r.run_id, r.workflow, str(r.status), _local(r.finished_at)] for r in report.runs],
            )
        typer.echo(
            f"would delete {len(report.runs)} run(s) ({', '.join(statuses)}); nothing deleted"
        )
        return
    typer.echo(
        f"deleted {len(report.runs)} run(s) ({', '.join(statuses)}) that finished more than"
        f" {older_than} ago; `flowctl vacuum` gives the space back"
    )


def _prune_json(report: PruneReport, now: datetime) -> dict[str, Any]:
    """What `prune --json` prints: the cutoff and every run deleted (or, dry, to be)."""
    return {
        "dry_run": report.dry_run,
        "statuses": [str(s) for s in report.statuses],
        "cutoff": iso(now - report.cutoff_age),
        "count": len(report.runs),
        "runs": [
            {
                "run_id": r.run_id,
                "workflow": r.workflow,
                "status": str(r.status),
                "finished_at": iso(r.finished_at),
            }
            for r in report.runs
        ],
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def vacuum(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Give the space of deleted runs back to the filesystem (VACUUM; writers wait while it
    runs).  Example: flowctl vacuum"""
    from flowctl.ops import maintenance as ops

    st = _state(ctx)
    before, after = ops.vacuum(st.store)
    if as_json:
        _emit_json({"before_bytes": before, "after_bytes": after})
    else:
        typer.echo(f"vacuumed {st.shown_db}: {_mb(before)} -> {_mb(after)}")


def backup(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(metavar="PATH", help="The copy to write.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite PATH if it exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """A consistent copy of the database while daemons write, checked with PRAGMA
    integrity_check; the copy is a working database.  Example: flowctl backup ~/flowctl-copy.db"""
    from flowctl.ops import maintenance as ops

    st = _state(ctx)
    st.masked = True  # the file is copied as it is: sealed values stay sealed, no key needed
    written = ops.backup(st.store, path, force=force)
    size = written.stat().st_size
    if as_json:
        _emit_json({"path": str(written.resolve()), "bytes": size, "integrity": "ok"})
    else:
        typer.echo(f"backup written to {written} ({_mb(size)}, integrity_check ok)")
