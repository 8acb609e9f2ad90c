"""Durable runs for statecharts: stores (SQLite, PostgreSQL, memory), a runtime and workers.

from persistence import Limit, Runtime, Worker, open_store
"""

from persistence.capacity import Limit
from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker

__all__ = ["Limit", "Runtime", "Worker", "open_store"]
