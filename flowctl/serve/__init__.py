"""`flowctl serve`: a small JSON HTTP API over the operator actions in `flowctl.ops`.

Optional: it needs the `[serve]` extra (Starlette and uvicorn). Nothing outside this package
imports it, and the CLI imports it inside the `serve` command only, so no other command
pays for loading an HTTP stack.
"""
