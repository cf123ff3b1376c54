"""The PostgreSQL store: the store's every transaction (flowctl.store.store) over one
server database."""

from __future__ import annotations

from flowctl.store.postgres.connection import POOL_MAX, PostgresDatabase
from flowctl.store.store import SqlStore
from flowctl.store.values import PLAIN, Values


class PostgresStore(SqlStore):
    """One PostgreSQL database. Thread-safe: each call takes a pooled connection."""

    db: PostgresDatabase

    def __init__(
        self,
        url: str,
        *,
        durability: str = "full",
        create: bool = True,
        pool_max: int = POOL_MAX,
        values: Values = PLAIN,
    ) -> None:
        """Connect to the database at `url` (see PostgresDatabase)."""
        super().__init__(
            PostgresDatabase(url, durability=durability, create=create, pool_max=pool_max),
            values,
        )


__all__ = ["PostgresStore"]
