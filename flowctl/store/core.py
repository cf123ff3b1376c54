"""What every job of the store shares: the backend it runs on, how a write runs (alone, or
in the batch runner's round), and the backend's own capabilities passed through.

`StoreCore` is the base of each job's class (runs, claims, fenced writes, operator
actions, schedules, the outbox, output, metrics, maintenance); `flowctl.store.store.
SqlStore` is all of them over one `Database`. A job's methods are its transactions,
written once as procedures over a `Tx` (see flowctl.store.sql).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from flowctl.model import JournalEntry, Run
from flowctl.store.mapping import _entry_from_row, _run_from_row
from flowctl.store.round import Batch, Write, WriteRound
from flowctl.store.sql import CommitStats, Database, Row, Tx
from flowctl.store.values import PLAIN, Values

R = TypeVar("R")

# How often a process that seals values looks at the database's key (a rotation's
# hand-over, or a rotation finished without it): at most once a second, before a write.
KEY_CHECK_EVERY = 1.0


class _Local(threading.local):
    round: WriteRound | None = None  # the round open on this thread, if any


class StoreCore:
    """One database: a backend, and the round open on each thread (if any)."""

    def __init__(self, db: Database, values: Values = PLAIN) -> None:
        self.db = db
        self.values = values  # seals what is written, opens what is read (store.values)
        # Endings put in the outbox only for runs with a notify override (leave_untold).
        self.untold: frozenset[str] = frozenset()
        self._local = _Local()
        self._keys_checked = time.monotonic()

    # -- the handle ------------------------------------------------------------

    @property
    def path(self) -> str:
        return self.db.path

    @property
    def read_only(self) -> bool:
        return self.db.read_only

    @property
    def refresh_interval(self) -> float | None:
        return self.db.refresh_interval

    @property
    def location(self) -> str:
        return self.db.location

    @property
    def durability(self) -> str:
        return self.db.durability

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StoreCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running procedures ----------------------------------------------------

    @contextmanager
    def write_round(self, wait: Callable[[], None]) -> Iterator[WriteRound]:
        """Open a write round on this thread for the block (see flowctl.store.round)."""
        if self._local.round is not None:
            raise RuntimeError("a write round is already open on this thread")
        self._local.round = WriteRound(self.db, wait)
        try:
            yield self._local.round
        finally:
            self._local.round = None

    def _write(
        self,
        fn: Callable[[Tx], R],
        *,
        batch: Batch | None = None,
        params: Any = None,
        single: bool = False,
    ) -> R:
        """Run the write `fn` as one transaction, or, with a round open on this thread, in
        the round (with its kind `batch`, if given). Durable when it returns."""
        rnd = self._local.round
        if rnd is not None:
            return rnd.add(Write(fn, batch, params, single))
        if self.values.sealer is not None:
            self._keys_fresh()
        return self.db.transact(fn, single=single)

    def _keys_fresh(self) -> None:
        """Before a write, at most every KEY_CHECK_EVERY: adopt a rotation's new key, or
        refuse to write with a key the database no longer uses (a process that slept
        through a rotation fails in one line rather than writing under the old key)."""
        now = time.monotonic()
        if now - self._keys_checked >= KEY_CHECK_EVERY:
            self._keys_checked = now
            self.check_keys()

    def check_keys(self) -> None:
        """See flowctl.store.rekey.Rekeying.check_keys (the store's own)."""

    def _run(self, row: Row) -> Run:
        """A run's row as a Run, its values opened (flowctl.store.values)."""
        return self.values.run(_run_from_row(row))

    def _entry(self, row: Row) -> JournalEntry:
        return self.values.entry(_entry_from_row(row))

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.db.reading() as tx:
            return tx.all(sql, params)

    # -- the backend's own -------------------------------------------------------

    def data_version(self) -> int:
        return self.db.data_version()

    def own_writes(self) -> AbstractContextManager[None]:
        return self.db.own_writes()

    def leave_untold(self, statuses: Collection[str]) -> None:
        self.untold = frozenset(statuses)

    def set_group_commit(self, on: bool) -> None:
        self.db.set_group_commit(on)

    def take_turns(self) -> None:
        self.db.take_turns()

    def writers(self, n: int) -> None:
        self.db.writers(n)

    def file_replaced(self) -> str | None:
        return self.db.file_replaced()

    def file_identity(self) -> tuple[int, int] | None:
        return self.db.file_identity()

    def free_bytes(self) -> int | None:
        return self.db.free_bytes()

    def integrity_check(self) -> str:
        return self.db.integrity_check()

    def pragmas(self) -> dict[str, int | str]:
        return self.db.pragmas()

    def pending_writes(self) -> int:
        return self.db.pending_writes()

    def commit_stats(self) -> CommitStats:
        return self.db.commit_stats()

    def vacuum(self) -> tuple[int, int]:
        return self.db.vacuum()

    def backup_to(self, dest: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        self.db.backup_to(dest, overwrite=overwrite)
