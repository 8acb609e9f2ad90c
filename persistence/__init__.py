"""Durable runs for statecharts: stores (SQLite, PostgreSQL, memory), a runtime, workers, and
runs executed in their caller.

from persistence import Inline, Runtime, Worker, open_store
"""

from persistence.inline import Inline, InlineResult
from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker

__all__ = ["Inline", "InlineResult", "Runtime", "Worker", "open_store"]
