"""Run ids: short, random, and sortable by creation time."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_lock = threading.Lock()
_last = 0


def _b32(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        n, r = divmod(n, 32)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def new_run_id() -> str:
    """16 characters: 8 of millisecond time (sorts by creation), 8 random."""
    global _last
    with _lock:
        ms = time.time_ns() // 1_000_000
        _last = max(_last, ms)
        ms = _last
    return _b32(ms, 8) + _b32(int.from_bytes(os.urandom(5), "big"), 8)
