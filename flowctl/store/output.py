"""Step output (`flowctl logs`): appended as steps print, read in order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flowctl.model import from_us, to_us
from flowctl.store.core import StoreCore
from flowctl.store.records import OutputChunk
from flowctl.store.values import OUTPUT, Values

_COLUMNS = "seq, run_id, call_index, step, stream, at, text"


def _chunk(row: Sequence[object], values: Values) -> OutputChunk:
    seq, run_id, index, step, stream, at, text = row
    return OutputChunk(
        int(seq),  # type: ignore[call-overload]
        str(run_id),
        int(index),  # type: ignore[call-overload]
        str(step),
        str(stream),
        from_us(int(at)),  # type: ignore[call-overload]
        values.text(str(text)),
    )


class Output(StoreCore):
    """append_output, output, output_tail."""

    def append_output(
        self,
        run_id: str,
        call_index: int,
        step: str,
        at: datetime,
        chunks: Sequence[tuple[str, str]],
    ) -> None:
        """Not fenced (a record of what ran, even late); nothing for a run that is gone.
        Each chunk's text is sealed with a key (flowctl.store.values)."""
        if not chunks:
            return
        at_us, seal = to_us(at), self.values.seal
        rows = [
            (run_id, call_index, step, stream, at_us, seal(text, OUTPUT), run_id)
            for stream, text in chunks
        ]
        self._write(
            lambda tx: tx.many(
                "INSERT INTO output (run_id, call_index, step, stream, at, text)"
                " SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ?)",
                rows,
            )
        )

    def output(
        self, run_id: str, *, after: int = 0, step: str | None = None, limit: int = 1000
    ) -> list[OutputChunk]:
        where = "run_id = ? AND seq > ?"
        params: list[object] = [run_id, after]
        if step is not None:
            where += " AND step = ?"
            params.append(step)
        rows = self._read(
            f"SELECT {_COLUMNS} FROM output WHERE {where} ORDER BY seq LIMIT ?", [*params, limit]
        )
        return [_chunk(r, self.values) for r in rows]

    def output_tail(self, run_id: str, chunks: int = 20) -> list[OutputChunk]:
        rows = self._read(
            f"SELECT {_COLUMNS} FROM output WHERE run_id = ? AND call_index ="
            " (SELECT MAX(call_index) FROM output WHERE run_id = ?) ORDER BY seq DESC LIMIT ?",
            [run_id, run_id, chunks],
        )
        return [_chunk(r, self.values) for r in reversed(rows)]
