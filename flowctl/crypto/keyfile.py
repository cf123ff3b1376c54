"""Key files: 32 random bytes in a file only its owner can read (mode 0600).

A key is named by its id, a short hash of the key (never the key itself): the id is
stored with every sealed value, so a database can say which key it needs.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from flowctl.errors import UsageError

KEY_BYTES = 32  # AES-256
_ID_CONTEXT = b"flowctl key id v1\x00"


class KeyFileError(UsageError):
    """A key file that cannot be made or used as one."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="key_file")


@dataclass(frozen=True)
class Key:
    """A key and its id; repr never shows the secret."""

    kid: str
    secret: bytes = field(repr=False)
    path: str = ""


def key_id(secret: bytes) -> str:
    """The key's public name: 16 hex digits of a SHA-256 of it (not the key)."""
    return hashlib.sha256(_ID_CONTEXT + secret).hexdigest()[:16]


def new_key_file(path: str | os.PathLike[str]) -> Key:
    """Write a new random key to `path` (mode 0600), never over an existing file."""
    target = Path(path)
    if not target.parent.is_dir():
        raise KeyFileError(f"key file {target}: folder {target.parent} does not exist")
    secret = os.urandom(KEY_BYTES)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(
            f"key file {target} already exists: `keys new` never overwrites a key; give a new path"
        ) from None
    except OSError as e:
        raise KeyFileError(f"key file {target}: {e.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, secret)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Key(key_id(secret), secret, str(target.resolve()))


def read_key(path: str | os.PathLike[str]) -> Key:
    """The key in `path`: refused unless it is a regular file of 32 bytes that neither
    group nor others can read or write."""
    target = Path(path).expanduser()
    try:
        info = target.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"key file {target} does not exist: make one with `flowctl keys new {target}`"
        ) from None
    except OSError as e:
        raise KeyFileError(f"key file {target}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(f"key file {target} is not a regular file")
    if info.st_mode & 0o077:
        mode = oct(stat.S_IMODE(info.st_mode))[2:]
        raise KeyFileError(
            f"key file {target} has mode {mode}: others may read it; run `chmod 600 {target}`"
        )
    if info.st_size != KEY_BYTES:
        raise KeyFileError(
            f"key file {target} holds {info.st_size} bytes, not a key of {KEY_BYTES}:"
            " make one with `flowctl keys new PATH`"
        )
    secret = target.read_bytes()
    if len(secret) != KEY_BYTES:  # changed under us
        raise KeyFileError(f"key file {target} changed while it was read")
    return Key(key_id(secret), secret, str(target.resolve()))
