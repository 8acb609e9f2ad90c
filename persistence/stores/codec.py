"""Encrypted payloads: the codec a store seals its payload columns with (AES-GCM).

A store with a codec (`Store.use_codec`, `Runtime(codec=...)`) writes every payload column
(a run's snapshot, its outbox payloads and results, inbox events and dead letters, journal
events, call inputs and heartbeat details) as an *envelope*, itself JSON so that PostgreSQL's
`jsonb` columns take it as they are::

    {"$enc": "k2", "n": "<nonce, base64>", "ct": "<ciphertext and tag, base64>"}

The plaintext is the value's JSON; the associated data binds the ciphertext to its run and
column (`aad`), so a payload moved to another run's row or another column does not decrypt.
What queries and the UI need stays in clear: state names, keys, statuses, workflow names and
versions, times, limits, errors.

Several keys may be configured (`KeyRing`): the first is the current one, which seals new
payloads; any of them opens. `statecharts db reencrypt` rewrites older payloads (and payloads
written before encryption was turned on) under the current key, after which an old key can be
removed. A payload whose key is not configured never reads as data: `PayloadKeyError` names the
key id, the run and the column (a run whose snapshot it is, is failed with that text at its
next claim; the UI and `runs show` show it as encrypted).

Keys come from `STATECHARTS_KEYS` (`id:base64key,...`, first current) or a file named by
`STATECHARTS_KEYS_FILE`/`--keys-file` (one `id:base64key` per line); they are never logged.
Without keys nothing is sealed, and reading costs one type check per payload.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from persistence.stores.errors import StoreEncodingError, StoreError
from persistence.stores.protocol import PayloadCodec
from persistence.stores.randomness import random_bytes
from persistence.stores.rules import SEALED

KEYS_ENV = "STATECHARTS_KEYS"
"""The variable holding the keys inline: `id:base64key` entries, comma separated, current first."""
KEYS_FILE_ENV = "STATECHARTS_KEYS_FILE"
"""The variable naming a keys file: one `id:base64key` per line, current first."""
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_KEY_SIZES = (16, 24, 32)
_NONCE_BYTES = 12

ENCRYPTED = "<encrypted>"
"""The `type` of what a payload reads as without its key, for display (`shown_sealed`)."""


class Column(StrEnum):
    """The sealed columns, as named in the associated data (dead letters are inbox rows)."""

    SNAPSHOT = "snapshot"
    EFFECT_PAYLOAD = "effect.payload"
    EFFECT_RESULT = "effect.result"
    EVENT = "inbox.event"
    JOURNAL = "journal.event"
    CALL_PAYLOAD = "call.payload"
    CALL_DETAILS = "call.details"


class PayloadCodecError(StoreError):
    """A sealed payload that cannot be opened (base class)."""


class PayloadKeyError(PayloadCodecError):
    """A payload is sealed with a key this process does not have: the message names the key
    id, the run and the column. Nothing is returned in its place."""

    def __init__(self, key_id: str, run_id: str, column: str) -> None:
        self.key_id, self.run_id, self.column = key_id, run_id, column
        super().__init__(
            f"run {run_id}: {column} is encrypted with key {key_id!r}, which is not configured "
            f"here (set {KEYS_ENV} or {KEYS_FILE_ENV} with that key)"
        )


class PayloadTamperedError(PayloadCodecError):
    """A sealed payload does not authenticate under its key: altered, moved from another run
    or column, or sealed by a different key that has the same id."""

    def __init__(self, key_id: str, run_id: str, column: str) -> None:
        self.key_id, self.run_id, self.column = key_id, run_id, column
        super().__init__(
            f"run {run_id}: {column} does not decrypt under key {key_id!r} (altered, moved from "
            "another run or column, or another key under that id)"
        )


class KeyConfigError(ValueError):
    """Keys that cannot be used (a bad id, size or encoding, a duplicate id); names which."""


def is_sealed(value: Any) -> bool:
    """Whether a payload as read is an envelope."""
    return type(value) is dict and SEALED in value and "ct" in value


def sealed_key(value: Any) -> str | None:
    """The key id of an envelope, None for a payload in clear."""
    return str(value[SEALED]) if is_sealed(value) else None


def aad(run_id: str, column: str) -> bytes:
    """The associated data of a payload: its run and column, so it opens nowhere else."""
    return f"statecharts\x00{column}\x00{run_id}".encode()


class KeyRing:
    """AES-GCM keys by id; the first is the current one (it seals), all of them open.

    `keys`: (id, key) pairs, a key being 16, 24 or 32 raw bytes (32: AES-256). Needs the
    `cryptography` package (`pip install 'statecharts[crypto]'`).
    """

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
            raise KeyConfigError(
                "encrypted payloads need the 'crypto' extra (cryptography is "
                "not installed): pip install 'statecharts[crypto]'"
            ) from exc
        if not keys:
            raise KeyConfigError("a key ring needs at least one key")
        self._ciphers: dict[str, Any] = {}
        for n, (key_id, key) in enumerate(keys, 1):
            if not _KEY_ID.match(key_id):  # (not shown: it may be a key given the wrong way round)
                raise KeyConfigError(f"key id of entry {n} is not 1-32 of A-Z a-z 0-9 _ . -")
            if len(key) not in _KEY_SIZES:
                raise KeyConfigError(
                    f"key {key_id!r}: {len(key)} bytes; an AES key is 16, 24 "
                    "or 32 bytes (32 recommended)"
                )
            if key_id in self._ciphers:
                raise KeyConfigError(f"key id {key_id!r} is given twice")
            self._ciphers[key_id] = AESGCM(key)
        self.current = keys[0][0]
        self._sealer = self._ciphers[self.current]
        self._refused: tuple[type[Exception], ...] = (
            InvalidTag,
            KeyError,
            TypeError,
            ValueError,
            binascii.Error,
        )

    @property
    def key_ids(self) -> list[str]:
        """The configured key ids, the current one first (never the keys)."""
        return list(self._ciphers)

    def __repr__(self) -> str:  # (never the keys themselves)
        return f"KeyRing(current={self.current!r}, keys={self.key_ids!r})"

    def seal(self, value: Any, run_id: str, column: str) -> dict[str, Any]:
        """`value` (JSON-able) as an envelope under the current key. A snapshot's `version`
        label stays in clear beside it: workers find the runs a migration is for by it."""
        try:
            plain = orjson.dumps(value)
        except TypeError as exc:  # orjson.JSONEncodeError: a value no store holds exactly
            raise StoreEncodingError(f"cannot store value: {exc}") from exc
        nonce = random_bytes(_NONCE_BYTES)
        sealed = self._sealer.encrypt(nonce, plain, aad(run_id, column))
        envelope: dict[str, Any] = {SEALED: self.current, "n": _b64(nonce), "ct": _b64(sealed)}
        if column == Column.SNAPSHOT and type(value) is dict and "version" in value:
            envelope["version"] = value["version"]
        return envelope

    def open(self, envelope: Mapping[str, Any], run_id: str, column: str) -> Any:
        """The value an envelope holds; `PayloadKeyError` without its key,
        `PayloadTamperedError` if it does not authenticate here."""
        key_id = str(envelope[SEALED])
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadKeyError(key_id, run_id, column)
        try:
            plain = cipher.decrypt(
                binascii.a2b_base64(envelope["n"]),
                binascii.a2b_base64(envelope["ct"]),
                aad(run_id, column),
            )
        except self._refused:
            raise PayloadTamperedError(key_id, run_id, column) from None
        return orjson.loads(plain)


def open_payload(ring: PayloadCodec | None, value: Any, run_id: str, column: str) -> Any:
    """A payload as read (`value`, JSON already parsed) opened if it is sealed; in clear as it
    is (rows written before encryption was turned on)."""
    if not is_sealed(value):
        return value
    if ring is None:
        raise PayloadKeyError(str(value[SEALED]), run_id, column)
    return ring.open(value, run_id, column)


def shown_sealed(error: PayloadCodecError) -> dict[str, str]:
    """What a reader without the key sees in place of a payload (UI, `runs show`): an object
    shaped like an event, so that views reading a payload's `type` show it as encrypted."""
    key_id = getattr(error, "key_id", "?")
    if isinstance(error, PayloadKeyError):
        return {"type": ENCRYPTED, "encrypted": f"key {key_id} not configured here"}
    return {"type": ENCRYPTED, "encrypted": f"does not decrypt under key {key_id}"}


def parse_keys(text: str, source: str) -> KeyRing:
    """A key ring from `id:base64key` entries separated by commas or lines (`#` comments),
    the first current; `source` names where they came from in errors (never the keys)."""
    pairs: list[tuple[str, bytes]] = []
    for n, raw in enumerate(re.split(r"[,\n]", text), 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        if not sep:
            raise KeyConfigError(f"{source}: entry {n} is not id:base64key")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyConfigError(f"{source}: the key of entry {n} is not base64") from None
        pairs.append((key_id.strip(), key))
    if not pairs:
        raise KeyConfigError(f"{source}: no keys")
    try:
        return KeyRing(pairs)
    except KeyConfigError as exc:
        raise KeyConfigError(f"{source}: {exc}") from None


def keys_from_env(
    keys_file: str | None = None, environ: Mapping[str, str] | None = None
) -> KeyRing | None:
    """The key ring of `keys_file`, else of `STATECHARTS_KEYS_FILE`, else of
    `STATECHARTS_KEYS`; None when none is set (payloads are then written in clear)."""
    env = os.environ if environ is None else environ
    path = keys_file or env.get(KEYS_FILE_ENV)
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise KeyConfigError(f"keys file {path}: {exc.strerror or exc}") from None
        return parse_keys(text, f"keys file {path}")
    inline = env.get(KEYS_ENV)
    return parse_keys(inline, KEYS_ENV) if inline else None


def new_key() -> str:
    """A new random AES-256 key, base64 (for `id:key` in the keys file or variable)."""
    return _b64(secrets.token_bytes(32))


def _b64(data: bytes) -> str:
    # (binascii directly: base64.b64encode and b64decode cost about 3 µs more per call)
    return binascii.b2a_base64(data, newline=False).decode("ascii")
