"""`flowctl serve`: the HTTP API's command. It imports the HTTP stack (the `[serve]`
extra) only when it runs, so no other command loads Starlette or uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from flowctl.cli.common import _state
from flowctl.errors import UsageError


def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback unless you say so).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port; 0 picks a free one.")
    ] = 8765,
    no_auth: Annotated[
        bool,
        typer.Option("--no-auth", help="Serve without a token (loopback addresses only)."),
    ] = False,
    log_level: Annotated[
        str, typer.Option("--log-level", help="uvicorn's log level (warning, info, debug).")
    ] = "warning",
) -> None:
    """Serve the JSON HTTP API; needs FLOWCTL_TOKEN or [serve] token.  Example: FLOWCTL_TOKEN=... flowctl serve --port 8765"""
    levels = ("critical", "error", "warning", "info", "debug", "trace")
    if log_level.strip().lower() not in levels:
        raise UsageError(
            f"--log-level {log_level!r} is not a level: use one of {', '.join(levels)}"
        )
    log_level = log_level.strip().lower()
    if not host.strip():
        raise UsageError(
            "--host is empty: give an address to listen on (default 127.0.0.1, loopback)"
        )
    try:
        from flowctl.serve.routes import Served
        from flowctl.serve.server import run
    except ImportError as e:
        if e.name not in ("starlette", "uvicorn"):
            raise
        raise UsageError(
            "flowctl serve needs the HTTP extra: pip install 'flowctl-runner[serve]'"
        ) from None
    from flowctl.ops.metrics import render
    from flowctl.serve.auth import check_bind, resolve_token

    st = _state(ctx)
    config = st.config
    token = None if no_auth else resolve_token(config)
    check_bind(host, token, no_auth)
    store = st.open_store(create=True)  # POST /runs creates work, as `flowctl run` does
    served = Served(
        store=store,
        clock=st.clock,
        token=token,
        root=config.root,
        workflows_dir=config.workflows_dir(),
        metrics=lambda: render(store),
    )
    run(served, host, port, log_level=log_level)
