"""Step output (`flowctl logs`, the tail `show` prints) on PostgreSQL: appended as steps
print, read in the order written (`seq`, an identity: one order however many hosts write)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowctl.model import from_us, to_us
from flowctl.store.postgres.connection import PostgresConnection, retried
from flowctl.store.records import OutputChunk

_COLUMNS = "seq, run_id, call_index, step, stream, at, text"


def _chunk(row: Sequence[Any]) -> OutputChunk:
    seq, run_id, index, step, stream, at, text = row
    return OutputChunk(
        int(seq), str(run_id), int(index), str(step), str(stream), from_us(int(at)), str(text)
    )


class Output(PostgresConnection):
    """append_output, output, output_tail."""

    @retried
    def append_output(
        self,
        run_id: str,
        call_index: int,
        step: str,
        at: datetime,
        chunks: Sequence[tuple[str, str]],
    ) -> None:
        """Not fenced (a record of what ran, even late); nothing for a run that is gone."""
        if not chunks:
            return
        at_us = to_us(at)
        with self._write() as c:
            c.execute(
                "INSERT INTO output (run_id, call_index, step, stream, at, text)"
                " SELECT %s, %s, %s, u.stream, %s, u.text"
                " FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS u(stream, text, i)"
                " WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = %s) ORDER BY u.i",
                [
                    run_id,
                    call_index,
                    step,
                    at_us,
                    [stream for stream, _ in chunks],
                    [text for _, text in chunks],
                    run_id,
                ],
            )

    def output(
        self, run_id: str, *, after: int = 0, step: str | None = None, limit: int = 1000
    ) -> list[OutputChunk]:
        where = "run_id = %s AND seq > %s"
        params: list[Any] = [run_id, after]
        if step is not None:
            where += " AND step = %s"
            params.append(step)
        rows = self._read(
            f"SELECT {_COLUMNS} FROM output WHERE {where} ORDER BY seq LIMIT %s", [*params, limit]
        )
        return [_chunk(r) for r in rows]

    def output_tail(self, run_id: str, chunks: int = 20) -> list[OutputChunk]:
        rows = self._read(
            f"SELECT {_COLUMNS} FROM output WHERE run_id = %s AND call_index ="
            " (SELECT MAX(call_index) FROM output WHERE run_id = %s) ORDER BY seq DESC LIMIT %s",
            [run_id, run_id, chunks],
        )
        return [_chunk(r) for r in reversed(rows)]
