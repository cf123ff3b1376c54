"""The SQLite backend of the store: one file, WAL, group commit (see `SqliteStore`)."""
