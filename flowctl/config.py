"""flowctl.toml: find it, read it (stdlib tomllib), write it (tomli-w), resolve the database."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowctl.errors import ConfigError
from flowctl.status import RunStatus

if TYPE_CHECKING:  # flowctl.notify loads only for a file with a [notify] table
    from flowctl.notify import NotifyConfig

CONFIG_NAME = "flowctl.toml"
MAX_WORKERS = 256  # `workers` (and daemon --workers) at most
AUTO_WORKERS_MAX = 4  # the default: one worker per usable core, at most this many
# Finished runs: the only ones [retention] and `flowctl prune` ever delete.
PRUNABLE = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.DEAD)


def default_workers() -> int:
    """The daemon's worker processes when neither --workers nor flowctl.toml says: one per
    core this process may run on, at most AUTO_WORKERS_MAX. Past a few, more processes
    mostly wait their turn on SQLite's one write lock (each still costs ~25 MB); on one
    core it is 1, the daemon process alone."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, AUTO_WORKERS_MAX))


def daemon_workers(config: Config, db: Path | str) -> int:
    """The daemon's worker processes when --workers is not given: flowctl.toml's `workers`
    if the file sets it, else one per core on a file (default_workers) and 1 on
    PostgreSQL, where a fleet grows by daemons on more hosts: each process holds a pool of
    up to 10 connections, so one per core on every host would soon pass the server's
    max_connections (100 by default)."""
    if "workers" in config.given:
        return int(config.values["workers"])
    return 1 if isinstance(db, str) else default_workers()  # resolve_db: a str is a URL


DEFAULTS: dict[str, Any] = {
    "db": ".flowctl/flowctl.db",
    "workflows": "workflows",
    "concurrency": 64,
    "workers": default_workers(),
    "durability": "full",
    "timezone": "",
    "lease": "15s",
    "heartbeat": "1s",
    "grace": "30s",
}

_TYPES: dict[str, type | tuple[type, ...]] = {
    "db": str,
    "workflows": str,
    "concurrency": int,
    "workers": int,
    "durability": str,
    "timezone": str,
    "lease": (str, int, float),
    "heartbeat": (str, int, float),
    "grace": (str, int, float),
    "schedules": dict,  # [schedules.NAME] tables, checked by `flowctl schedule sync`
    "notify": dict,  # [notify]: who is told when runs end (flowctl.notify)
    "serve": dict,  # [serve] token = "...": the HTTP API's bearer token (file must be 0600)
    "retention": dict,  # [retention] completed = "30d" ...: applied by the daemon hourly
    "key_file": str,  # encryption at rest: the key file (FLOWCTL_KEY_FILE overrides)
}

_COMMENT = """# flowctl configuration. Paths are relative to this file.
# durability = "full" makes every committed transition survive a power loss (WAL with
# synchronous=FULL). "normal" is faster but the last transactions before a power cut
# (not a process crash) may be lost: a finished step could then run again.
"""

_WORKERS_COMMENT = f"""# workers = N sets the daemon's worker processes; by default one per core, at most
# {AUTO_WORKERS_MAX} (1: the daemon process alone, on one core); 1 on PostgreSQL.
"""


@dataclass
class Config:
    path: Path | None = None  # the flowctl.toml read, if any
    values: dict[str, Any] = field(default_factory=lambda: dict(DEFAULTS))
    given: frozenset[str] = frozenset()  # the keys the file set (the rest are DEFAULTS)

    @property
    def root(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def get(self, key: str) -> Any:
        return self.values[key]

    def workflows_dir(self) -> Path:
        return self.root / str(self.values["workflows"])

    def notify(self) -> NotifyConfig | None:
        """The [notify] table, checked when the file was loaded; None when there is none."""
        from flowctl.notify import parse_notify

        return parse_notify(self.values.get("notify"), str(self.path))


def find_config(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None, start: Path | None = None) -> Config:
    path = path or find_config(start)
    if path is None:
        return Config()
    import tomllib  # only with a file to read: a command run outside a project skips it

    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    values = dict(DEFAULTS)
    for key, value in data.items():
        if key not in _TYPES:
            import difflib

            hint = difflib.get_close_matches(key, list(_TYPES), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(
                f"{path}: unknown key {key!r}{extra}; known keys: {', '.join(sorted(_TYPES))}"
            )
        expected = _TYPES[key]
        if isinstance(value, bool) or not isinstance(value, expected):
            names = " or ".join(
                t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,))
            )
            raise ConfigError(f"{path}: key {key!r} must be {names}, got {value!r}")
        values[key] = value
    for name, table in values.get("schedules", {}).items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: schedules.{name} must be a table [schedules.{name}]")
    if values.get("notify") is not None:  # parse_notify(None) is None: nothing to check
        from flowctl.notify import parse_notify

        parse_notify(values["notify"], str(path))
    unknown_serve = sorted(set(values.get("serve", {})) - {"token"})
    if unknown_serve:
        raise ConfigError(f"{path}: unknown [serve] key {unknown_serve[0]!r}; accepted: token")
    if values["durability"] not in ("full", "normal"):
        raise ConfigError(
            f'{path}: durability must be "full" or "normal", got {values["durability"]!r}'
        )
    if values["concurrency"] < 1:
        raise ConfigError(f"{path}: concurrency must be at least 1, got {values['concurrency']}")
    if not 1 <= values["workers"] <= MAX_WORKERS:
        raise ConfigError(
            f"{path}: workers must be from 1 to {MAX_WORKERS}, got {values['workers']}"
            " (1: the daemon process alone; N: N worker processes it supervises)"
        )
    if values["timezone"]:  # said at load, not at the first `schedule add` that uses it
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(values["timezone"])
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ConfigError(
                f"{path}: timezone {values['timezone']!r} is not a time zone: use an IANA name"
                " such as Europe/Paris, America/New_York or UTC"
            ) from None
    from flowctl.durations import parse_duration
    from flowctl.errors import DurationError

    if "retention" in values:
        parse_retention(values["retention"], str(path))
    for key in ("lease", "heartbeat", "grace"):
        try:
            parse_duration(values[key])
        except DurationError as e:
            raise ConfigError(f"{path}: key {key!r}: {e}") from None
    return Config(path=path, values=values, given=frozenset(data))


def xdg_state_db() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "flowctl" / "flowctl.db"


DATABASE_URL_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(name: str) -> bool:
    """Whether a --db / FLOWCTL_DB / flowctl.toml `db` value is a PostgreSQL URL; anything
    else is a SQLite file path."""
    return name.strip().lower().startswith(DATABASE_URL_SCHEMES)


# The password of a URL (scheme://user:PASSWORD@host; up to the token's last `@`, so one
# with an unencoded `@` or `/` is masked whole) and of a `password=` setting (a URL's query
# or a key=value connection string; `sslpassword=` too).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@'\"]*:)[^\s'\"]*@")
_KEY_PASSWORD = re.compile(r"(?i)(\b\w*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#'\"]+)")
_PIECE_MIN = 3  # shorter pieces of a password are not searched for (they would mask words)


def mask_password(text: str, url: str | None = None) -> str:
    """`text` with every database password in it shown as ***: the one place flowctl hides
    them, for every message, log line, header and response that names a database. Given
    the `url` a driver error is about, also every piece of that URL's password (as typed
    and percent-decoded, and split at `@ : /`): libpq quotes fragments of a URL it cannot
    parse. A SQLite path comes back as it was."""
    for secret in _secrets(url) if url else ():
        text = text.replace(secret, "***")
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _KEY_PASSWORD.sub(r"\1***", text)


def _secrets(url: str) -> list[str]:
    """The password pieces of `url` worth searching for, longest first: not those the rest
    of the URL spells too (postgresql://flowctl:flowctl@h/flowctl_db would otherwise lose
    its user and database name from every message)."""
    from urllib.parse import unquote

    found = [m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(url)]
    found += [m.group(2).strip("'") for m in _KEY_PASSWORD.finditer(url)]
    pieces = {p for s in found for t in (s, unquote(s)) for p in (t, *re.split(r"[@:/]", t))}
    rest = unquote(_KEY_PASSWORD.sub(r"\1", _URL_PASSWORD.sub(r"\1@", url)))
    kept = (p for p in pieces if len(p) >= _PIECE_MIN and p not in rest)
    return sorted(kept, key=len, reverse=True)


def _refuse_other_url(value: str, where: str) -> None:
    """`mysql://x` or a mistyped `postgresq://` would otherwise become a SQLite file in a
    folder named after the scheme: refuse any URL that is not PostgreSQL's."""
    match = re.match(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if match and not is_database_url(value):
        raise ConfigError(
            f"{where} {mask_password(value.strip())!r}: {match.group(1)}:// URLs are not accepted: give a"
            " SQLite file path (e.g. ./flowctl.db) or a postgresql:// URL"
        )


def resolve_db(explicit: str | None, config: Config, *, flag: str = "--db") -> Path | str:
    """--db, then FLOWCTL_DB, then flowctl.toml's db (next to the file), then the XDG state dir.

    A `postgresql://` or `postgres://` URL comes back as it was given (a str, never a Path,
    which would fold its `//`); anything else is a SQLite file path. An explicit but empty
    value is a usage error, never a silent fall-back to the default.
    """
    if explicit is not None:
        if not explicit.strip():
            leave = ", or leave --db out for the default" if flag == "--db" else ""
            raise ConfigError(
                f"{flag} is empty: give a database file (e.g. ./flowctl.db) or a"
                f" postgresql:// URL{leave}"
            )
        _refuse_other_url(explicit, flag)
        return explicit.strip() if is_database_url(explicit) else Path(explicit).expanduser()
    env = os.environ.get("FLOWCTL_DB")
    if env:
        _refuse_other_url(env, "FLOWCTL_DB")
        return env.strip() if is_database_url(env) else Path(env).expanduser()
    if config.path is not None:
        value = str(config.values["db"])
        _refuse_other_url(value, f"db in {config.path}")
        if is_database_url(value):
            return value.strip()
        db = Path(value).expanduser()
        return db if db.is_absolute() else config.root / db
    return xdg_state_db()


def resolve_key_file(config: Config) -> Path | None:
    """The key file values are sealed with: FLOWCTL_KEY_FILE, then flowctl.toml's
    `key_file` (relative to the file); None: no encryption."""
    env = os.environ.get("FLOWCTL_KEY_FILE")
    if env:
        return Path(env).expanduser()
    value = config.values.get("key_file")
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else config.root / path


def write_default_config(folder: Path, *, force: bool = False) -> Path:
    import tomli_w

    path = folder / CONFIG_NAME
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a file: move it away, then run init again")
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; use --force to overwrite it")
    try:
        # `workers` is left out: its default is this machine's cores, and a file copied to
        # another machine should get that machine's (the comment says how to pin it).
        written = {k: v for k, v in DEFAULTS.items() if k != "workers"}
        path.write_text(_COMMENT + _WORKERS_COMMENT + tomli_w.dumps(written))
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror}") from None
    return path


def parse_retention(table: Any, where: str = "flowctl.toml") -> dict[RunStatus, timedelta]:
    """The `[retention]` table: `completed = "30d"`, `cancelled = "30d"`, `dead = "90d"`.
    A status left out is kept forever. Applied by the daemon (flowctl.daemon.retention)."""
    from flowctl.durations import parse_duration
    from flowctl.errors import DurationError

    if not isinstance(table, dict):
        raise ConfigError(f"{where}: retention must be a table [retention]")
    out: dict[RunStatus, timedelta] = {}
    for key, value in table.items():
        status = next((s for s in PRUNABLE if str(s) == key), None)
        if status is None:
            raise ConfigError(
                f"{where}: retention.{key}: use completed, cancelled or dead"
                " (runs that are not finished are never pruned)"
            )
        try:
            age = parse_duration(value)
        except DurationError as e:
            raise ConfigError(f"{where}: retention.{key}: {e}") from None
        if age <= timedelta(0):
            raise ConfigError(f"{where}: retention.{key} must be above 0, got {value!r}")
        out[status] = age
    return out
