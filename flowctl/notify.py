"""Notifications when runs end: the `[notify]` table, and the pure policy of who is told
and when a failed delivery is tried again. A leaf: stdlib only.

A run's ending is one of the events `dead`, `completed`, `cancelled`, `timed_out` (a run
that ended dead because its deadline passed or its execution budget ran out is both
`timed_out` and `dead`). A channel is `webhook` (POST of the run object as JSON) or
`command` (argv, the run object on stdin).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from flowctl.errors import ConfigError

EVENTS = ("dead", "completed", "cancelled", "timed_out")
KEYS = ("on", "webhook", "secret", "command", "tries", "timeout")
OVERRIDE_KEYS = ("on", "webhook", "command")  # the secret stays in flowctl.toml
DEFAULT_ON = ("dead",)
DEFAULT_TRIES = 10
DEFAULT_TIMEOUT = 10.0
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 300.0
SIGNATURE_HEADER = "X-Flowctl-Signature"  # "sha256=" + hex HMAC-SHA256 of the body


@dataclass(frozen=True)
class NotifyConfig:
    on: frozenset[str] = frozenset(DEFAULT_ON)
    webhook: str | None = None
    secret: str | None = None
    command: tuple[str, ...] | None = None
    tries: int = DEFAULT_TRIES
    timeout: float = DEFAULT_TIMEOUT

    def channels(self) -> tuple[str, ...]:
        return (("webhook",) if self.webhook else ()) + (("command",) if self.command else ())


def parse_notify(table: Any, where: str, *, override: bool = False) -> NotifyConfig | None:
    """A `[notify]` table (or a workflow's `notify:` override when `override`), checked.

    None means "nothing configured". An override may not carry `secret`, `tries` or
    `timeout`: those belong to whoever delivers, in flowctl.toml.
    """
    if table is None:
        return None
    if table is False:
        return NotifyConfig(on=frozenset())
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: notify must be a table of {', '.join(KEYS)}")
    allowed = OVERRIDE_KEYS if override else KEYS
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown notify key {key!r}; accepted: {', '.join(allowed)}"
            )
    return _fill(NotifyConfig(), table, where)


def _fill(base: NotifyConfig, table: Mapping[str, Any], where: str) -> NotifyConfig:
    out = base
    if "on" in table:
        on = table["on"]
        if isinstance(on, str):
            on = [on]
        if not isinstance(on, list) or not all(isinstance(e, str) for e in on):
            raise ConfigError(f"{where}: notify.on must be a list of {', '.join(EVENTS)}")
        bad = [e for e in on if e not in EVENTS]
        if bad:
            raise ConfigError(
                f"{where}: notify.on has unknown event {bad[0]!r}; use any of {', '.join(EVENTS)}"
            )
        out = replace(out, on=frozenset(on))
    if "webhook" in table:
        url = table["webhook"]
        if url is not None and (
            not isinstance(url, str) or not url.startswith(("http://", "https://"))
        ):
            raise ConfigError(f"{where}: notify.webhook must be an http:// or https:// URL")
        out = replace(out, webhook=url or None)
    if "secret" in table:
        secret = table["secret"]
        if not isinstance(secret, str) or not secret:
            raise ConfigError(f"{where}: notify.secret must be a non-empty string")
        out = replace(out, secret=secret)
    if "command" in table:
        argv = table["command"]
        if argv is not None and (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(a, str) and a for a in argv)
        ):
            raise ConfigError(
                f'{where}: notify.command must be an argv list like ["notify-send", "flowctl"]'
            )
        out = replace(out, command=None if argv is None else tuple(argv))
    if "tries" in table:
        tries = table["tries"]
        if isinstance(tries, bool) or not isinstance(tries, int) or not 1 <= tries <= 100:
            raise ConfigError(f"{where}: notify.tries must be an integer from 1 to 100")
        out = replace(out, tries=tries)
    if "timeout" in table:
        from flowctl.durations import parse_duration
        from flowctl.errors import DurationError

        try:
            seconds = parse_duration(table["timeout"]).total_seconds()
        except DurationError as e:
            raise ConfigError(f"{where}: notify.timeout: {e}") from None
        if not 0 < seconds <= 600:
            raise ConfigError(f"{where}: notify.timeout must be more than 0 and at most 10m")
        out = replace(out, timeout=seconds)
    return out


def override_json(table: Any) -> dict[str, Any] | None:
    """The part of a workflow's override a run pins (JSON), checked by the caller."""
    if table is None:
        return None
    if table is False:
        return {"on": []}
    return {k: table[k] for k in OVERRIDE_KEYS if k in table}


def checked_override(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A workflow's `notify:` value as a run pins it, or the one-line problem with it."""
    try:
        parse_notify(value, "notify", override=True)
    except ConfigError as e:
        return None, str(e).removeprefix("notify: ")
    return override_json(value), None


def effective(config: NotifyConfig | None, override: Mapping[str, Any] | None) -> NotifyConfig:
    """The deliverer's [notify] with the run's pinned override on top, key by key."""
    base = config or NotifyConfig(on=frozenset())
    if not override:
        return base
    if config is None and "on" not in override:
        base = NotifyConfig()  # an override that names a channel but no events: the default
    return _fill(base, override, "the run's notify override")


def events_of(status: str, error_kind: str | None) -> frozenset[str]:
    """The events a run's ending is: its status, and `timed_out` for a deadline or budget."""
    events = {status} if status in EVENTS else set()
    if status == "dead" and error_kind in ("deadline", "timeout"):
        events.add("timed_out")
    return frozenset(events)


def wanted(config: NotifyConfig, status: str, error_kind: str | None) -> tuple[str, ...]:
    """The channels to tell of this ending: none unless one of its events is in `on`."""
    if not config.on & events_of(status, error_kind):
        return ()
    return config.channels()


ENDINGS = ("completed", "dead", "cancelled")  # the statuses an outbox row is written for


def unwanted_endings(config: NotifyConfig | None) -> tuple[str, ...]:
    """The ending statuses whose outbox rows no channel of `config` wants, whatever their
    error kind, for a run with no notify override of its own: the deliverer drops those
    in bulk, with no look at each row (one per run ended, most of them unwanted)."""
    if config is None or not config.channels():
        return ENDINGS
    return tuple(
        status
        for status in ENDINGS
        if not config.on & (events_of(status, None) | events_of(status, "deadline"))
    )


def event_name(status: str, error_kind: str | None) -> str:
    """The one event name a delivery carries (`timed_out` before `dead`)."""
    events = events_of(status, error_kind)
    return "timed_out" if "timed_out" in events else status


def retry_delay(tries: int) -> float:
    """Seconds before try `tries + 1`: 1 s doubling, at most 5 min."""
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, tries - 1)))
