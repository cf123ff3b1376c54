"""Reaching a PostgreSQL server: which database names are URLs, the optional driver, and
connection failures as one line naming the server and the cause.

psycopg is an optional extra (`flowctl-runner[postgres]`): it is imported only here and in the
PostgreSQL store, and only when a URL is used, so a SQLite install never needs it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from flowctl.config import mask_password
from flowctl.errors import DatabaseError, DatabaseUnavailable, SerializationError
from flowctl.store.postgres.outage import is_outage

if TYPE_CHECKING:
    import psycopg

URL_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S = 10
# A client frozen inside a transaction (SIGSTOP, a partition) would hold its row locks, and
# so its runs, forever: the server ends such a session after this long, so leases can
# lapse and the runs be reclaimed. Far above any flowctl transaction's length.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000


def session_options() -> dict[str, Any]:
    """Connection settings for every flowctl session: its name in pg_stat_activity says which
    host and process it serves; the idle-in-transaction bound above."""
    import os

    from flowctl.ids import HOST

    return {
        "application_name": f"flowctl {HOST} {os.getpid()}"[:63],
        "options": f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}",
    }


class PostgresDriverMissingError(DatabaseError):
    """A postgresql:// URL was given but psycopg is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "a postgresql:// database needs the PostgreSQL driver: install the extra with"
            " pip install 'flowctl-runner[postgres]'"
        )


class PostgresUnavailableError(DatabaseError):
    """The server cannot be reached, refuses the login, or has no such database."""


class ServerDownError(PostgresUnavailableError, DatabaseUnavailable):
    """The server refuses connections for now (down, starting, stopping): an outage, which
    the caller may wait out, unlike a refused login or a missing database."""


def is_postgres_url(name: str) -> bool:
    """Whether a --db / FLOWCTL_DB / flowctl.toml value names a PostgreSQL database;
    anything else is a SQLite file path."""
    return name.strip().lower().startswith(URL_SCHEMES)


def describe(url: str) -> str:
    """host:port/database of a URL, never its password: how messages name the server."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "the server in the URL"
    db = unquote(parts.path.lstrip("/")) or unquote(parts.username or "") or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}/{db}"


def driver() -> Any:
    """The psycopg module, or the one-line error naming the extra to install."""
    try:
        import psycopg
        import psycopg_pool  # noqa: F401  (checked here: the store's pool needs it)
    except ImportError:
        raise PostgresDriverMissingError() from None
    return psycopg


# untranslatable_character: the server's jsonb refusing a \u0000 escape.
_UNTRANSLATABLE = "22P05"


def unstorable(e: BaseException) -> SerializationError | None:
    """The driver's refusal of a NUL character (U+0000), as the caller's error: PostgreSQL's
    text and jsonb cannot hold one (SQLite's can). psycopg refuses it in a text parameter
    before sending, the server in a JSON value; either way nothing was written."""
    pg = driver()
    nul_text = isinstance(e, pg.DataError) and "NUL" in str(e)
    if not nul_text and getattr(e, "sqlstate", None) != _UNTRANSLATABLE:
        return None
    return SerializationError(
        "PostgreSQL cannot store the NUL character (\\u0000) in text or JSON: remove it"
        " from the value (a SQLite database keeps it)"
    )


def cause(e: BaseException) -> str:
    """The useful part of a libpq connection error, on one line."""
    text = " ".join(str(e).split("\n")[0].split())
    if " failed: " in text:
        text = text.rsplit(" failed: ", 1)[1]
    text = re.sub(r"^(FATAL|ERROR):\s*", "", text)
    return text or type(e).__name__


def unavailable(url: str, e: BaseException) -> PostgresUnavailableError:
    why = mask_password(cause(e), url)
    hint = ""
    if "does not exist" in why and "database" in why:
        hint = ": create it (createdb) or fix the database name in the URL"
    elif "password" in why or "authentication" in why:
        hint = ": check the user and password in the URL"
    elif "refused" in why.lower() or "timeout" in why.lower() or "resolve" in why.lower():
        hint = ": is the server running there and accepting TCP/IP connections?"
    message = f"cannot connect to PostgreSQL at {describe(url)}: {why}{hint}"
    if is_outage(e):
        return ServerDownError(message)
    return PostgresUnavailableError(message)


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """One connection (autocommit: every transaction is explicit), or a one-line error."""
    pg = driver()
    try:
        conn: psycopg.Connection[Any] = pg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            **{**session_options(), **kwargs},
        )
    except pg.Error as e:
        raise unavailable(url, e) from None
    except ValueError as e:  # a malformed URL (bad port, bad option)
        raise PostgresUnavailableError(
            f"invalid PostgreSQL URL {mask_password(url.strip())!r}: {mask_password(str(e), url)}"
        ) from None
    return conn
