"""Encryption keys for operators: a new key file, and a rotation that re-seals every value
with a new key while daemons run (see flowctl.store.rekey for the hand-over)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flowctl.clock import Clock
from flowctl.crypto.keyfile import Key
from flowctl.store import Store
from flowctl.store.rekey import SEALED

BATCH = 500  # values re-sealed per transaction
SETTLE = 2.0  # seconds a rotation waits for every process to adopt the new key


@dataclass(frozen=True)
class Rotation:
    """What a rotation did: the new key's id, values re-sealed, passes over the columns."""

    kid: str
    resealed: int
    passes: int


def rotate(
    store: Store,
    new: Key,
    clock: Clock,
    *,
    batch: int = BATCH,
    settle: float = SETTLE,
    progress: Callable[[str, int], None] | None = None,
) -> Rotation:
    """Re-seal every stored value with `new`, batch by batch, while others write.

    With a key already (the store's ring holds the database's key), the new key is handed
    to every process holding the old one first, so what they write from then on is under
    the new key. Passes repeat until one changes nothing after `settle` seconds (a value
    a process sealed just before it adopted the key is caught by the next pass); then the
    new key is recorded and the old one is no longer needed. Interrupted, running it again
    resumes: values already under the new key are skipped."""
    if store.values.sealer is not None and store.values.sealer.kid != new.kid:
        store.begin_rotation(new.secret)
    started = clock.monotonic()
    total = passes = 0
    while True:
        passes += 1
        changed = _one_pass(store, batch, progress)
        total += changed
        if changed == 0 and clock.monotonic() - started >= settle:
            break
        if changed == 0:
            clock.sleep(min(0.2, settle))
    store.end_rotation()
    return Rotation(new.kid, total, passes)


def _one_pass(store: Store, batch: int, progress: Callable[[str, int], None] | None) -> int:
    changed = 0
    for which in SEALED:
        after = None
        while True:
            after, n = store.reseal_batch(which, after, batch)
            changed += n
            if n and progress is not None:
                progress(f"{which.table}.{which.column}", n)
            if after is None:
                break
    return changed
