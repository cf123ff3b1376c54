"""`flowctl replicate DEST` and `flowctl restore DEST PATH` (Litestream, issue 42)."""

from __future__ import annotations

from typing import Annotated

import typer

from flowctl.cli.common import _emit_json, _state


def replicate(
    ctx: typer.Context,
    dest: Annotated[
        str, typer.Argument(metavar="DEST", help="file:///folder, a folder, or s3://bucket/path.")
    ],
    sync_interval: Annotated[
        str,
        typer.Option(
            "--sync-interval", help="How often new WAL pages are shipped, e.g. 1s (the loss bound)."
        ),
    ] = "1s",
) -> None:
    """Keep a continuous replica of the SQLite database at DEST with Litestream (a child
    process) until stopped; beside a daemon or on its own.

    Example: flowctl replicate file:///srv/flowctl-replica
    """
    from flowctl.durations import parse_duration
    from flowctl.ops.replica import replicate as run_replica

    st = _state(ctx)
    seconds = parse_duration(sync_interval).total_seconds()
    code = run_replica(st.db_path, dest, sync_interval=seconds)
    raise typer.Exit(code)


def restore(
    ctx: typer.Context,
    dest: Annotated[
        str, typer.Argument(metavar="DEST", help="The replica: as `replicate` took it.")
    ],
    path: Annotated[str, typer.Argument(metavar="PATH", help="The database file to write (new).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what was restored as JSON.")
    ] = False,
) -> None:
    """Write a database from the replica at DEST to PATH, checked with PRAGMA
    integrity_check.

    Example: flowctl restore file:///srv/flowctl-replica ./flowctl.db
    """
    from flowctl.ops.replica import restore as run_restore

    _state(ctx)
    done = run_restore(dest, path)
    if as_json:
        _emit_json(
            {
                "path": done.path,
                "seconds": round(done.seconds, 3),
                "integrity": done.integrity,
                "runs": done.runs,
            }
        )
        return
    typer.echo(
        f"restored {done.runs} runs to {done.path} in {done.seconds:.2f}s"
        f" (integrity_check {done.integrity})"
    )
