"""The idempotency key user code receives (``idempotency_key=`` or, on the durable runtime,
``current_idempotency_key()``), in one form on every runtime.

A key is ``length`` lowercase hexadecimal digits of the SHA-256 of where the call happens
(``scope``: an in-memory actor's session, a durable run's id) and which call it is (``call``: a
retried call's record, stable across its attempts, or the call's own place). Hex digits are a
subset of ``[A-Za-z0-9_-]``, so the key fits payment providers that accept 32-40 such
characters; an invoke's ``keyLength`` (16-64, default 32) sets the length per call site.
"""

from __future__ import annotations

import hashlib

KEY_LENGTH = 32
"""Characters in a key unless the call site's ``keyLength`` says otherwise (128 bits)."""
MIN_KEY_LENGTH, MAX_KEY_LENGTH = 16, 64
"""The lengths ``keyLength`` may ask for (64 is the whole SHA-256)."""


def idempotency_key(scope: str, call: str, length: int = KEY_LENGTH) -> str:
    """The key of ``call`` in ``scope``: the same for the same two, different otherwise."""
    if not MIN_KEY_LENGTH <= length <= MAX_KEY_LENGTH:
        raise ValueError(
            f"an idempotency key has {MIN_KEY_LENGTH} to {MAX_KEY_LENGTH} characters, not {length}"
        )
    digest = hashlib.sha256(f"{scope}\x00{call}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:length]
