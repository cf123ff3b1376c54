"""Identities: run ids (short, random, sortable by creation time) and lease owners (host,
pid and the process's start time, so a dead owner is provable)."""

from __future__ import annotations

import base64
import os
import random
import re
import socket
import threading
import time
from datetime import datetime, timedelta

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_lock = threading.Lock()
_last = 0


# base64's RFC 4648 base32 digits, mapped to Crockford's: b32encode does the bit work in C.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())
_MS_BITS = (1 << 40) - 1  # 8 base32 digits of time: milliseconds modulo 2**40


def new_run_id() -> str:
    """16 characters: 8 of millisecond time (sorts by creation), 8 random."""
    return new_run_ids(1)[0]


def new_run_ids(n: int) -> list[str]:
    """`n` run ids of this millisecond, made together: ten bytes are exactly sixteen base32
    digits, so one b32encode of all of them, cut every sixteen, is each id's own encoding
    (a batch of runs pays one clock read, one urandom and one encode)."""
    global _last
    with _lock:
        ms = time.time_ns() // 1_000_000
        _last = max(_last, ms)
        ms = _last
    stamp = (ms & _MS_BITS).to_bytes(5, "big")
    noise = os.urandom(5 * n)
    raw = b"".join([stamp + noise[i : i + 5] for i in range(0, 5 * n, 5)])
    text = base64.b32encode(raw).translate(_TO_CROCKFORD).decode()
    # Sorted: a batch's runs are created in id order, so their journal and timeline rows
    # (keyed by run id) append at the end of those indexes, as one-by-one ids do, instead
    # of landing on random pages (which cost the daemon a quarter of its throughput).
    return sorted(text[i : i + 16] for i in range(0, 16 * n, 16))


# A daemon on another host can only be judged by its heartbeat: one not seen within its
# lease is not counted live (its runs are reclaimed as their leases lapse, as for any
# owner). A registration that does not say its lease is judged by this instead.
REMOTE_STALE = timedelta(seconds=60)


def _host() -> str:
    """This machine's name in lease owners: FLOWCTL_HOST when set (containers, tests: where
    the kernel's host name does not say which machine, or which pid namespace, this is),
    else the host name. '/' (the owner's separator) and whitespace become '-'."""
    name = os.environ.get("FLOWCTL_HOST", "").strip() or socket.gethostname()
    return re.sub(r"[/\s]+", "-", name)


HOST = _host()


def proc_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if it is gone.

    A zombie (killed, not yet reaped by its parent) counts as gone: it will never
    write again.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def make_owner() -> str:
    pid = os.getpid()
    return f"{HOST}/{pid}/{proc_start(pid) or '?'}/{random.randrange(16**4):04x}"


def owner_is_dead(owner: str) -> bool:
    """True only when provably gone: same host, and the pid is gone or was reused."""
    parts = owner.split("/")
    if len(parts) < 3 or parts[0] != HOST:
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    start = proc_start(pid)
    return start is None or (parts[2] != "?" and start != parts[2])


def owner_alive(owner: str) -> bool:
    return not owner_is_dead(owner)


def on_this_host(owner: str) -> bool:
    return owner.split("/", 1)[0] == HOST


def daemon_live(owner: str, seen_at: datetime, now: datetime, lease: float | None = None) -> bool:
    """Whether a registered daemon counts as live: on this host, while its process is there
    (a pid check); on another host, while its heartbeat has not lapsed (no pid to check
    there): last seen within its `lease` (seconds; REMOTE_STALE if it did not say)."""
    if on_this_host(owner):
        return owner_alive(owner)
    return now - seen_at <= (REMOTE_STALE if lease is None else timedelta(seconds=lease))
