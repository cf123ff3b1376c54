"""The key a database is sealed with (meta `key_id`), a rotation's hand-over of the new
key (meta `key_next`, sealed with the old one), and re-sealing values in batches.

A rotation (flowctl.ops.keys) writes `key_next`, then re-seals every value not under
the new key, a batch per transaction, each row changed only if it still holds what was
read (a daemon writing meanwhile is never overwritten), then records the new `key_id`
and deletes `key_next`. A process holding the old key adopts the new one when it opens
the database or, in a daemon, when it sees another process's write: from then on it
seals with the new key, and the old one is no longer needed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from flowctl.store.core import StoreCore
from flowctl.store.values import KeyNeededError


class Sealed(NamedTuple):
    """A column that holds sealed values, and the columns that find its row."""

    table: str
    keys: tuple[str, ...]
    column: str


SEALED: tuple[Sealed, ...] = (
    Sealed("runs", ("run_id",), "input"),
    Sealed("runs", ("run_id",), "result"),
    Sealed("runs", ("run_id",), "error"),
    Sealed("journal", ("run_id", "call_index"), "value"),
    Sealed("signals", ("seq",), "payload"),
    Sealed("published", ("run_id", "key"), "value"),
    Sealed("output", ("seq",), "text"),
    Sealed("schedules", ("name",), "input"),
)

KEY_ID = "key_id"
KEY_NEXT = "key_next"


class Rekeying(StoreCore):
    """check_keys, reload_keys, begin_rotation, reseal_batch, end_rotation."""

    def _meta(self) -> dict[str, str]:
        rows = self._read("SELECT key, value FROM meta WHERE key IN (?, ?)", [KEY_ID, KEY_NEXT])
        return {str(r[0]): str(r[1]) for r in rows}

    def check_keys(self) -> None:
        """On opening: adopt a rotation's new key, refuse a database sealed with a key not
        held (one line naming it), and record the key of a first sealed write."""
        meta = self._meta()
        values = self.values
        if KEY_NEXT in meta:
            values.adopt(meta[KEY_NEXT])
        kid = meta.get(KEY_ID)
        sealer = values.sealer
        if kid is not None and (sealer is None or not sealer.holds(kid)):
            raise KeyNeededError(kid, () if sealer is None else sealer.kids)
        if kid is None and sealer is not None and not self.read_only:
            self._set_meta(KEY_ID, sealer.kid, replace=False)

    def reload_keys(self) -> bool:
        """Adopt a rotation's new key if one is being handed over; whether it was."""
        if self.values.sealer is None:
            return False
        wrapped = self._meta().get(KEY_NEXT)
        return wrapped is not None and self.values.adopt(wrapped)

    def begin_rotation(self, secret: bytes) -> None:
        """Hand `secret` to every process holding the current key (sealed with it) and
        seal with it here from now on."""
        values = self.values
        if values.sealer is None:
            raise RuntimeError("a rotation needs a key ring")
        wrapped = values.wrap(secret)
        self._set_meta(KEY_NEXT, wrapped, replace=True)
        values.adopt(wrapped)

    def end_rotation(self) -> None:
        """Every value is under the writing key: record it, drop the hand-over."""
        sealer = self.values.sealer
        if sealer is None:
            raise RuntimeError("a rotation needs a key ring")
        kid = sealer.kid

        def write(tx: Any) -> None:
            tx.execute("DELETE FROM meta WHERE key = ?", [KEY_NEXT])
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [KEY_ID, kid],
            )

        self.db.transact(write)

    def _set_meta(self, key: str, value: str, *, replace: bool) -> None:
        conflict = "DO UPDATE SET value = excluded.value" if replace else "DO NOTHING"
        self.db.transact(  # not _write: its key check calls this one
            lambda tx: tx.execute(
                f"INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) {conflict}",
                [key, value],
            )
        )

    def reseal_batch(
        self, which: Sealed, after: tuple[Any, ...] | None, limit: int
    ) -> tuple[tuple[Any, ...] | None, int]:
        """Re-seal up to `limit` rows of one column after the row `after` (None: from the
        first), in key order: (the last row's key, or None at the end; rows changed)."""
        keys = ", ".join(which.keys)
        where = f"{which.column} IS NOT NULL"
        params: list[Any] = []
        if after is not None:
            where += f" AND ({keys}) > ({', '.join('?' for _ in which.keys)})"
            params += list(after)
        rows = self._read(
            f"SELECT {keys}, CAST({which.column} AS TEXT) FROM {which.table} WHERE {where}"
            f" ORDER BY {keys} LIMIT ?",
            [*params, limit],
        )
        changes = []
        for row in rows:
            old = str(row[-1])
            new = self.values.reseal(old, f"{which.table}.{which.column}")
            if new is not None:
                changes.append([new, *row[:-1], old])
        if changes:
            match = " AND ".join(f"{k} = ?" for k in which.keys)
            self._write(
                lambda tx: tx.many(
                    f"UPDATE {which.table} SET {which.column} = ? WHERE {match}"
                    f" AND CAST({which.column} AS TEXT) = ?",
                    changes,
                )
            )
        last = tuple(rows[-1][:-1]) if len(rows) == limit else None
        return last, len(changes)
