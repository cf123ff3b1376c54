"""Where the bearer token comes from, and how a request's token is checked.

The token is FLOWCTL_TOKEN, else `[serve] token` in flowctl.toml; a token in a file that
others can read is refused, as ssh refuses a readable private key. The comparison is
constant-time (hmac.compare_digest), so response timing says nothing about the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
from pathlib import Path

from flowctl.config import Config
from flowctl.errors import ConfigError, UsageError

MIN_TOKEN_LENGTH = 16


def resolve_token(config: Config, environ: dict[str, str] | None = None) -> str | None:
    """The configured token, or None when neither FLOWCTL_TOKEN nor `[serve] token` is set."""
    env = os.environ if environ is None else environ
    token = env.get("FLOWCTL_TOKEN")
    source = "FLOWCTL_TOKEN"
    if not token:
        table = config.values.get("serve") or {}
        token = table.get("token")
        if token is None:
            return None
        if config.path is not None:
            _check_private(config.path)
        source = f"{config.path}: [serve] token"
    if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"{source} must be a string of at least {MIN_TOKEN_LENGTH} characters"
            " (e.g. the output of `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
        )
    return token.strip()


def _check_private(path: Path) -> None:
    """A flowctl.toml holding a token must be readable by its owner only (mode 0600)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"{path} holds [serve] token but its mode is {mode:04o}: others can read it;"
            f" run `chmod 600 {path}`, or pass the token in FLOWCTL_TOKEN"
        )


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, no_auth: bool) -> None:
    """Refuse to serve without a token, unless --no-auth on a loopback address."""
    if no_auth and not is_loopback(host):
        raise UsageError(
            f"--no-auth binds only to loopback (127.0.0.1, ::1, localhost), not {host!r};"
            " set FLOWCTL_TOKEN to serve on other addresses"
        )
    if token is None and not no_auth:
        raise UsageError(
            "flowctl serve needs a bearer token: set FLOWCTL_TOKEN, or `[serve] token` in a"
            " flowctl.toml of mode 0600; or pass --no-auth to serve loopback without one"
        )


def token_matches(header: str | None, token: str) -> bool:
    """Whether an Authorization header carries `Bearer <token>`, compared in constant time."""
    if header is None:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))
