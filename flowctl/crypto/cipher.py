"""The key ring: AES-256-GCM over one or more keys, the first sealing new values.

The one module that imports the `cryptography` package (pyproject's banned-api and
tests/test_layers.py keep it so); imported only when a key is configured.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from flowctl.crypto.keyfile import Key, KeyFileError, key_id, read_key

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError:  # pragma: no cover - the [encrypt] extra is missing
    raise KeyFileError(
        "a key is configured but the cryptography package is not installed:"
        " pip install 'flowctl-runner[encrypt]'"
    ) from None

NONCE_BYTES = 12  # 96 bits, random per value


class Keyring:
    """Keys by id; `kid` is the one new values are sealed with, the others only open.

    A sealed value's associated data is its key id and its column, so an envelope whose
    id was edited, or one moved to another column, does not open."""

    def __init__(self, keys: Sequence[Key]) -> None:
        if not keys:
            raise ValueError("a key ring needs a key")
        self.kid = keys[0].kid
        self._aead = {k.kid: AESGCM(k.secret) for k in keys}

    def holds(self, kid: str) -> bool:
        return kid in self._aead

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(self._aead)

    def seal(self, data: bytes, column: str) -> tuple[bytes, bytes]:
        """(nonce, ciphertext with its tag) of `data` for `column` under the writing key."""
        nonce = os.urandom(NONCE_BYTES)
        kid = self.kid
        return nonce, self._aead[kid].encrypt(nonce, data, f"{kid}/{column}".encode())

    def open(self, kid: str, nonce: bytes, data: bytes, column: str) -> bytes | None:
        """The plaintext, or None when it does not authenticate under key `kid` for
        `column`."""
        try:
            return self._aead[kid].decrypt(nonce, data, f"{kid}/{column}".encode())
        except InvalidTag:
            return None

    def adopt(self, secret: bytes) -> str:
        """Seal new values with `secret` from now on (a rotation in progress); its id."""
        kid = key_id(secret)
        self._aead.setdefault(kid, AESGCM(secret))
        self.kid = kid
        return kid


def load_keyring(*paths: str | os.PathLike[str]) -> Keyring:
    """A key ring of the key files at `paths`, the first sealing new values."""
    return Keyring([read_key(p) for p in paths])
