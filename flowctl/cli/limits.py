"""`flowctl limits ...`: named limits shared by steps across runs and workflows
(parse -> flowctl.ops.limits -> render)."""

from __future__ import annotations

from typing import Annotated

import typer

from flowctl.cli.common import _emit_json, _Group, _local, _relative, _state, _table

limits_app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Named limits that steps share across runs, workflows and daemons."
    "  Example: flowctl limits set api --rate 100/1m --concurrency 5",
)

_NAME = typer.Argument(metavar="NAME", help="The limit's name, as steps give it (limit: NAME).")


@limits_app.command("set")
def limits_set(
    ctx: typer.Context,
    name: Annotated[str, _NAME],
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", metavar="N", help="Steps at once.")
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", metavar="N/PERIOD", help="Starts per window, e.g. 100/1m."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Define or change a limit.  Example: flowctl limits set api --rate 100/1m"""
    from flowctl.ops import limits as limit_ops

    st = _state(ctx)
    checked = limit_ops.limit_spec(name, concurrency=concurrency, rate=rate)
    spec = limit_ops.set_limit(st.open_store(create=True), checked, clock=st.clock)
    if as_json:
        _emit_json({"name": spec.name, "concurrency": spec.concurrency, "rate": spec.rate})
        return
    typer.echo(f"limit {spec.name}: {spec.describe()}")


@limits_app.command("ls")
def limits_ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List limits with their holders and next free time.  Example: flowctl limits ls"""
    from flowctl.ops import limits as limit_ops

    st = _state(ctx)
    infos = limit_ops.list_limits(st.store, clock=st.clock)
    if as_json:
        _emit_json([i.to_json() for i in infos])
        return
    if not infos:
        typer.echo("no limits (define one with `flowctl limits set NAME --rate 10/1s`)")
        return
    now, rows = st.clock.now(), []
    for i in infos:
        s = i.state
        held = ", ".join(f"{r} (#{n})" for r, n, _ in s.holders) or "-"
        free = (
            "now"
            if s.next_free is None
            else f"{_local(s.next_free)} ({_relative(s.next_free, now)})"
        )
        rows.append([s.spec.name, str(s.spec.concurrency or "-"), s.spec.rate or "-", held, free])
    _table(["NAME", "CONCURRENCY", "RATE", "HOLDERS", "NEXT FREE"], rows, keep=(0, 4))


@limits_app.command("rm")
def limits_rm(
    ctx: typer.Context,
    name: Annotated[str, _NAME],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Remove a limit.  Example: flowctl limits rm api"""
    from flowctl.ops import limits as limit_ops

    st = _state(ctx)
    limit_ops.remove_limit(st.store, name)
    if as_json:
        _emit_json({"name": name, "removed": True})
        return
    typer.echo(f"limit {name} removed")
