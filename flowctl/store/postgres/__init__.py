"""The PostgreSQL store (a `postgresql://` URL): the optional `[postgres]` extra."""
