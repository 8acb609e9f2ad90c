"""Run ids: random version-4 UUIDs, as `uuid.uuid4()` makes them, their randomness read in
bulk (`persistence.stores.randomness`: `uuid4()` makes one system call per id)."""

from __future__ import annotations

import uuid

from persistence.stores.randomness import random_bytes


def random_uuid() -> uuid.UUID:
    """A random version-4 UUID, as `uuid.uuid4()` makes one."""
    return uuid.UUID(bytes=random_bytes(16), version=4)


def new_run_id() -> str:
    """A new run's id: a random UUID in its text form."""
    return str(random_uuid())
