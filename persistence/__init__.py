"""Durable runs for statecharts: stores (SQLite, PostgreSQL, memory), a runtime, workers, and
runs executed in their caller.

from persistence import Inline, KeyRing, Limit, Runtime, Worker, keys_from_env, open_store
"""

from persistence.capacity import Limit
from persistence.inline import Inline, InlineResult
from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.stores.codec import KeyRing, keys_from_env
from persistence.worker import Worker

__all__ = [
    "Inline",
    "InlineResult",
    "KeyRing",
    "Limit",
    "Runtime",
    "Worker",
    "keys_from_env",
    "open_store",
]
