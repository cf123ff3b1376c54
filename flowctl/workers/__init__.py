"""Worker processes for `flowctl daemon --workers N` (pool.py says why this shape)."""
