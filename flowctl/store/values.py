"""Values as the database holds them: JSON text, sealed when a key is configured.

With a key ring, every stored value (an input, a step's result or error, a signal
payload, a published value, a run's result or error, a line of step output, a
schedule's input) is written as an envelope, `{"$enc":"v1","kid":...,"n":...,"c":...}`:
the key id, a random 96-bit nonce and the AES-256-GCM ciphertext of the value's JSON text
(base64), bound to its column (associated data: the key id and the column). The envelope is
JSON, so it fits the same TEXT and jsonb columns; ids, statuses, times, workflow names
and keys stay in clear, so listings, claims and indexes need no key.

Reading opens envelopes with the key ring. A store opened to list (`ls`, `status`,
`why`) shows a value it cannot open as `{"$enc":"v1","kid":...}` (the id alone); every
other reader is refused in one line naming the key it needs.

The key ring is handed in (flowctl.crypto): this module never imports a cipher.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol

from flowctl.errors import FlowctlError
from flowctl.model import JournalEntry, Run

ENC = "$enc"
VERSION = "v1"
_PREFIX = '{"$enc":"v1","kid":"'

# The column a value is sealed for, bound to its ciphertext (associated data with the key
# id): a sealed value moved to another column does not open there.
INPUT, RESULT, ERROR = "runs.input", "runs.result", "runs.error"
JOURNAL, SIGNAL, PUBLISHED = "journal.value", "signals.payload", "published.value"
OUTPUT, SCHEDULE_INPUT, KEY_HANDOVER = "output.text", "schedules.input", "meta.key_next"
_RUN_FIELDS = {"input": INPUT, "result": RESULT, "error": ERROR}


class KeyNeededError(FlowctlError):
    """A sealed value and no key that opens it."""

    def __init__(self, kid: str, held: tuple[str, ...] = ()) -> None:
        have = f"the key configured is {', '.join(held)}" if held else "no key is configured"
        super().__init__(
            f"this database is encrypted: key {kid} is needed to read it and {have};"
            " set FLOWCTL_KEY_FILE (or key_file in flowctl.toml) to that key's file"
        )
        self.kid = kid


class TamperedValueError(FlowctlError):
    """A sealed value that does not authenticate under the key its id names, for the
    column it was read from."""

    def __init__(self, kid: str, column: str) -> None:
        super().__init__(
            f"a value of {column} sealed with key {kid} does not decrypt with that key: it"
            " was altered or moved from another column, or the database is damaged"
        )
        self.kid = kid
        self.column = column


class Sealer(Protocol):
    """What the store needs of a key ring (flowctl.crypto.cipher.Keyring)."""

    kid: str

    @property
    def kids(self) -> tuple[str, ...]: ...

    def holds(self, kid: str) -> bool: ...

    def seal(self, data: bytes, column: str) -> tuple[bytes, bytes]: ...

    def open(self, kid: str, nonce: bytes, data: bytes, column: str) -> bytes | None: ...

    def adopt(self, secret: bytes) -> str: ...


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def is_envelope(value: Any) -> bool:
    return type(value) is dict and value.get(ENC) == VERSION and "kid" in value


class Values:
    """Seals what a store writes and opens what it reads; without a key ring, a plain
    pass-through that refuses (or, `masked`, shows as its key id) a sealed value."""

    def __init__(self, sealer: Sealer | None = None, *, masked: bool = False) -> None:
        self.sealer = sealer
        self.masked = masked

    @property
    def sealing(self) -> bool:
        return self.sealer is not None

    # -- writing -----------------------------------------------------------------

    def seal(self, text: str, column: str) -> str:
        """`text` (JSON, or a line of output) as stored in `column`: an envelope with a key
        ring."""
        if self.sealer is None:
            return text
        nonce, data = self.sealer.seal(text.encode("utf-8"), column)
        return f'{_PREFIX}{self.sealer.kid}","n":"{_b64(nonce)}","c":"{_b64(data)}"}}'

    # -- reading -----------------------------------------------------------------

    def open(self, value: Any, column: str) -> Any:
        """A parsed value read from `column`, opened if it is an envelope."""
        if not is_envelope(value):
            return value
        return json.loads(self._plain(value, column))

    def loads(self, text: str | None, column: str) -> Any:
        return None if text is None else self.open(json.loads(text), column)

    def text(self, stored: str) -> str:
        """A line of output as stored, opened if sealed."""
        if not stored.startswith(_PREFIX):
            return stored
        return self._plain(json.loads(stored), OUTPUT)

    def _plain(self, env: dict[str, Any], column: str) -> str:
        kid = str(env.get("kid"))
        sealer = self.sealer
        if sealer is None or not sealer.holds(kid):
            if self.masked:
                return json.dumps({ENC: VERSION, "kid": kid})
            raise KeyNeededError(kid, () if sealer is None else sealer.kids)
        try:
            nonce, data = base64.b64decode(env["n"]), base64.b64decode(env["c"])
        except (KeyError, ValueError, TypeError):
            raise TamperedValueError(kid, column) from None
        plain = sealer.open(kid, nonce, data, column)
        if plain is None:
            raise TamperedValueError(kid, column)
        return plain.decode("utf-8")

    def run(self, run: Run) -> Run:
        """`run` with its input, result and error opened."""
        fields = (("input", run.input), ("result", run.result), ("error", run.error))
        sealed = [(name, value) for name, value in fields if type(value) is dict and ENC in value]
        if not sealed:  # in clear (no key, or none of the three is set): as read
            return run
        opened = object.__new__(Run)
        opened.__dict__.update(run.__dict__)
        opened.__dict__.update({name: self.open(v, _RUN_FIELDS[name]) for name, v in sealed})
        return opened

    def note(self, data: dict[str, Any]) -> dict[str, Any]:
        """A timeline event's data as stored: with a key, an error it quotes ("Type:
        message") keeps its type alone, since the message is a sealed value."""
        error = data.get("error")
        if self.sealer is None or not isinstance(error, str):
            return data
        return {**data, "error": error.split(":", 1)[0]}

    def shown(self, run: Run) -> Run:
        """`run` opened as far as the keys held allow, the rest shown as key ids: for what
        an operator's action returns (its write is done; a missing key is no error)."""
        if self.masked:
            return self.run(run)
        return Values(self.sealer, masked=True).run(run)

    def entry(self, entry: JournalEntry) -> JournalEntry:
        value = entry.value
        if type(value) is not dict or ENC not in value:
            return entry
        opened = object.__new__(JournalEntry)
        opened.__dict__.update(entry.__dict__)
        opened.__dict__["value"] = self.open(value, JOURNAL)
        return opened

    # -- a key's rotation (flowctl.store.rekey) ------------------------------------

    def kid_of(self, stored: str) -> str | None:
        """The key id a stored value is sealed with; None for a value in clear."""
        if '"$enc"' not in stored:
            return None
        try:
            parsed = json.loads(stored)
        except ValueError:
            return None
        return str(parsed["kid"]) if is_envelope(parsed) else None

    def reseal(self, stored: str, column: str) -> str | None:
        """`stored` (read from `column`) sealed with the writing key, or None when it
        already is."""
        if self.sealer is None:
            raise RuntimeError("resealing needs a key ring")
        kid = self.kid_of(stored)
        if kid == self.sealer.kid:
            return None
        if kid is None:
            return self.seal(stored, column)
        plain = self._plain(json.loads(stored), column)
        return self.seal(plain, column)

    def wrap(self, secret: bytes) -> str:
        """A new key sealed with the writing key: handed to every process holding that key
        while a rotation runs (meta `key_next`), never in clear."""
        return self.seal(json.dumps(_b64(secret)), KEY_HANDOVER)

    def adopt(self, wrapped: str) -> bool:
        """Seal with the key `wrapped` holds from now on; False when it cannot be opened
        with a key held (then nothing changes)."""
        if self.sealer is None:
            return False
        env = json.loads(wrapped)
        if not is_envelope(env) or not self.sealer.holds(str(env["kid"])):
            return False
        secret = base64.b64decode(json.loads(self._plain(env, KEY_HANDOVER)))
        before = self.sealer.kid
        return self.sealer.adopt(secret) != before


PLAIN = Values()
